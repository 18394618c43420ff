// Package events is the port for job completion events: every job that
// reaches a terminal state is published once as a JobFinished event, from
// the engine's durable follow-up step. Adapters: Bus (in process, for the
// embedded backend and the local host, with Subscribe) and ebevents
// (Amazon EventBridge).
//
// Delivery is at least once: a process that dies after publishing but
// before it records the follow-up as done publishes again when the sweeper
// repeats the step. Every event of one job's terminal state carries the
// same ID, so consumers can drop repeats.
package events

import (
	"context"
	"sync"
	"time"

	"github.com/slicework/slicework/shared/job"
)

// Source is the EventBridge source of slicework's events.
const Source = "slicework"

// TypeJobFinished is the EventBridge detail-type of JobFinished.
const TypeJobFinished = "Job Finished"

// MaxErrorBytes bounds the job error an event carries; longer errors are
// cut (the job's details hold the whole text).
const MaxErrorBytes = 4096

// JobFinished is the completion event of one job.
type JobFinished struct {
	// ID is stable for a job and its terminal state: "<job id>:<state>".
	ID     string    `json:"id"`
	JobID  string    `json:"job_id"`
	Kind   string    `json:"kind"`
	State  job.State `json:"state"`
	Error  string    `json:"error,omitempty"`
	Result string    `json:"result,omitempty"`
	Parent string    `json:"parent,omitempty"`
	Tags   []string  `json:"tags,omitempty"`
	// DependsOn lists the job's dependencies, if any.
	DependsOn  []string     `json:"depends_on,omitempty"`
	Counters   job.Counters `json:"counters"`
	CreatedAt  time.Time    `json:"created_at"`
	StartedAt  *time.Time   `json:"started_at,omitempty"`
	FinishedAt *time.Time   `json:"finished_at,omitempty"`
}

// EventID is the ID of the completion event of job id in terminal state.
func EventID(id string, state job.State) string { return id + ":" + string(state) }

// Finished returns the completion event of terminal job j.
func Finished(j *job.Job) JobFinished {
	msg := j.Error
	if len(msg) > MaxErrorBytes {
		msg = msg[:MaxErrorBytes] + "…"
	}
	return JobFinished{
		ID: EventID(j.ID, j.State), JobID: j.ID, Kind: j.Kind, State: j.State, Error: msg, Result: j.Result,
		Parent: j.Parent, Tags: j.Tags, DependsOn: j.DependsOn, Counters: j.Counters,
		CreatedAt: j.CreatedAt, StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
	}
}

// Publisher publishes completion events. Publish returns nil only once
// the event is accepted (by the bus, or by EventBridge); an error means it
// may or may not have been, and the caller publishes it again later.
// Implementations are safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, e JobFinished) error
}

// Discard is a Publisher that drops every event (no bus configured).
type Discard struct{}

// Publish drops e and returns nil.
func (Discard) Publish(context.Context, JobFinished) error { return nil }

// Bus is the in-process Publisher: Publish hands the event to every
// current subscriber, synchronously and in subscription order, and
// returns once they have all returned. It is the embedded backend's event
// bus; subscribers see the events of engines in this process only. The
// zero value is ready to use.
type Bus struct {
	mu   sync.Mutex
	next int
	subs []subscription
}

type subscription struct {
	id int
	fn func(JobFinished)
}

// NewBus returns an empty bus.
func NewBus() *Bus { return &Bus{} }

// Subscribe calls fn with every event published from now on, until the
// returned cancel function is called. fn must not block for long: it runs
// on the publishing engine's goroutine.
func (b *Bus) Subscribe(fn func(JobFinished)) (cancel func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	id := b.next
	b.subs = append(b.subs, subscription{id: id, fn: fn})
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for i, s := range b.subs {
			if s.id == id {
				b.subs = append(b.subs[:i:i], b.subs[i+1:]...)
				return
			}
		}
	}
}

// Publish calls every subscriber with e. It returns ctx's error if ctx is
// done before it starts, else nil.
func (b *Bus) Publish(ctx context.Context, e JobFinished) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	subs := make([]subscription, len(b.subs))
	copy(subs, b.subs)
	b.mu.Unlock()
	for _, s := range subs {
		s.fn(e)
	}
	return nil
}
