package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/store"
)

// SweepReport counts what one sweep did.
type SweepReport struct {
	// Released scheduled jobs that came due.
	Released int `json:"released"`
	// Redriven queued or finishing jobs whose task had gone missing.
	Redriven int `json:"redriven"`
	// Finished running jobs found accounted but not finishing.
	Finished int `json:"finished"`
	// Retries parked chunks re-enqueued.
	Retries int `json:"retries"`
	// FollowUps pending follow-ups (dependencies, completion events,
	// callbacks) run for processes that died before they did.
	FollowUps int `json:"follow_ups"`
}

// sweepPage bounds the work of one sweep per category.
const sweepPage = 500

// Sweep does the periodic work that no message triggers: it releases
// scheduled jobs that came due and parked chunk retries, and re-drives jobs
// whose next message was lost to a crash between two writes, or whose
// follow-up work (dependants, completion event, callback) a crash left
// undone for longer than StaleAfter. The scheduler
// runs it once a minute; it is safe to run concurrently with itself.
func (e *Engine) Sweep(ctx context.Context) (SweepReport, error) {
	var r SweepReport
	now := e.clock.Now().UTC()

	due, err := e.store.ListJobs(ctx, job.Query{State: job.StateScheduled, RunAtBefore: now, Limit: sweepPage})
	if err != nil {
		return r, fmt.Errorf("sweeper: list scheduled: %w", err)
	}
	for _, j := range due.Jobs {
		if _, err := e.store.Transition(ctx, j.ID, []job.State{job.StateScheduled}, job.StateQueued, store.Patch{}); err != nil {
			if errors.Is(err, job.ErrConflict) {
				continue
			}
			return r, fmt.Errorf("sweeper: release job %s: %w", j.ID, err)
		}
		if err := e.sendControl(ctx, job.OpSlice, j.ID, 0); err != nil {
			return r, fmt.Errorf("sweeper: enqueue job %s: %w", j.ID, err)
		}
		r.Released++
	}

	stale := now.Add(-e.staleAfter)
	for _, st := range []job.State{job.StateQueued, job.StateFinishing} {
		page, err := e.store.ListJobs(ctx, job.Query{State: st, UpdatedBefore: stale, Limit: sweepPage})
		if err != nil {
			return r, fmt.Errorf("sweeper: list %s: %w", st, err)
		}
		op := job.OpSlice
		if st == job.StateFinishing {
			op = job.OpFinish
		}
		for _, j := range page.Jobs {
			if err := e.store.Touch(ctx, j.ID); err != nil {
				return r, fmt.Errorf("sweeper: touch job %s: %w", j.ID, err)
			}
			// A queued job may still wait for its RunAt (up to the
			// queue's maximum delay): its slice task waits with it.
			delay := time.Duration(0)
			if op == job.OpSlice {
				delay = runDelay(j, now)
			}
			if err := e.sendControl(ctx, op, j.ID, delay); err != nil {
				return r, fmt.Errorf("sweeper: re-drive job %s: %w", j.ID, err)
			}
			r.Redriven++
		}
	}

	running, err := e.store.ListJobs(ctx, job.Query{State: job.StateRunning, UpdatedBefore: stale, Limit: sweepPage})
	if err != nil {
		return r, fmt.Errorf("sweeper: list running: %w", err)
	}
	for _, j := range running.Jobs {
		if j.Counters.Accounted() {
			if err := e.maybeFinish(ctx, j); err != nil {
				return r, err
			}
			r.Finished++
		}
	}

	parked, err := e.store.DueRetries(ctx, now, sweepPage)
	if err != nil {
		return r, fmt.Errorf("sweeper: due retries: %w", err)
	}
	for _, c := range parked {
		if c.Task == nil {
			continue
		}
		j, err := e.store.GetJob(ctx, c.JobID)
		if err != nil && !errors.Is(err, job.ErrNotFound) {
			return r, fmt.Errorf("sweeper: job %s: %w", c.JobID, err)
		}
		if err == nil && j.State == job.StateRunning {
			body, err := json.Marshal(c.Task)
			if err != nil {
				return r, err
			}
			if err := e.queue.Send(ctx, e.queues.Channel(j.Channel), queue.Outgoing{Body: body}); err != nil {
				return r, fmt.Errorf("sweeper: re-enqueue job %s chunk %d: %w", c.JobID, c.Index, err)
			}
		}
		if err := e.store.ReleaseRetry(ctx, c.JobID, c.Index); err != nil && !errors.Is(err, job.ErrConflict) {
			return r, fmt.Errorf("sweeper: release job %s chunk %d: %w", c.JobID, c.Index, err)
		}
		r.Retries++
	}

	if r.FollowUps, err = e.sweepFollowUps(ctx, stale); err != nil {
		return r, err
	}
	return r, nil
}
