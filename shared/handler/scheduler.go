package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/schedule"
)

// SchedulerResponse is the scheduler function's answer: the sweep's report
// for a sweeper event, or the submitted job for a schedule's event.
type SchedulerResponse struct {
	// SweepReport is the sweep's report (nil for a schedule's event); its
	// fields appear at the top level of the JSON.
	*engine.SweepReport
	// Schedule names the schedule that fired ("" for a sweep).
	Schedule string `json:"schedule,omitempty"`
	// Tick is the firing's scheduled minute, which makes the job's unique key.
	Tick *time.Time `json:"tick,omitempty"`
	// Job is the id of the tick's job.
	Job string `json:"job,omitempty"`
	// Duplicate is true when the tick's job had already been submitted (a
	// repeated delivery of the firing): nothing new was submitted.
	Duplicate bool `json:"duplicate,omitempty"`
}

// SchedulerHandler is the signature of the scheduler function.
type SchedulerHandler func(ctx context.Context, ev events.EventBridgeEvent) (SchedulerResponse, error)

// Scheduler returns the scheduler function. EventBridge invokes it with two
// kinds of events:
//
//   - the sweeper rule's plain scheduled event (source "aws.events"), once a
//     minute: it sweeps (due scheduled jobs, parked retries, stalled jobs);
//   - a schedule rule's event (source schedule.EventSource, the Definition
//     in its detail): it submits the schedule's job for the firing's tick,
//     the event's time truncated to the minute. The tick makes the job's
//     unique key, so a repeated delivery of one firing submits one job.
//
// Any other event is an error, as is a schedule whose job is refused (an
// unregistered kind, say), so that the failure shows in the function's
// error metrics.
func Scheduler(e *engine.Engine, log *slog.Logger) SchedulerHandler {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) (SchedulerResponse, error) {
		switch ev.Source {
		case schedule.SweepEventSource:
			return sweep(ctx, e, log, ev)
		case schedule.EventSource:
			return fire(ctx, e, log, ev)
		}
		return SchedulerResponse{}, fmt.Errorf("scheduler: event %s: unknown source %q (want %q or %q)", ev.ID, ev.Source, schedule.SweepEventSource, schedule.EventSource)
	}
}

func sweep(ctx context.Context, e *engine.Engine, log *slog.Logger, ev events.EventBridgeEvent) (SchedulerResponse, error) {
	r, err := e.Sweep(ctx)
	if err != nil {
		return SchedulerResponse{SweepReport: &r}, fmt.Errorf("scheduler: event %s: %w", ev.ID, err)
	}
	if r != (engine.SweepReport{}) {
		log.Info("sweep", "released", r.Released, "redriven", r.Redriven, "finished", r.Finished, "retries", r.Retries, "follow_ups", r.FollowUps)
	}
	return SchedulerResponse{SweepReport: &r}, nil
}

func fire(ctx context.Context, e *engine.Engine, log *slog.Logger, ev events.EventBridgeEvent) (SchedulerResponse, error) {
	d, err := schedule.ParseEventDetail(ev.Detail)
	if err != nil {
		return SchedulerResponse{}, fmt.Errorf("scheduler: event %s: %w", ev.ID, err)
	}
	if ev.Time.IsZero() {
		return SchedulerResponse{Schedule: d.Name}, fmt.Errorf("scheduler: event %s of schedule %s has no time: %w", ev.ID, d.Name, job.ErrInvalid)
	}
	tick := schedule.Tick(ev.Time)
	resp := SchedulerResponse{Schedule: d.Name, Tick: &tick}
	j, err := e.SubmitRequest(ctx, d.Request(tick))
	switch {
	case errors.Is(err, job.ErrDuplicate) && j != nil:
		resp.Job, resp.Duplicate = j.ID, true
		log.Info("schedule tick already submitted", "schedule", d.Name, "tick", tick, "job", j.ID, "event", ev.ID)
		return resp, nil
	case err != nil:
		return resp, fmt.Errorf("scheduler: schedule %s tick %s: %w", d.Name, tick.Format(time.RFC3339), err)
	}
	resp.Job = j.ID
	log.Info("schedule fired", "schedule", d.Name, "tick", tick, "job", j.ID, "state", j.State)
	return resp, nil
}
