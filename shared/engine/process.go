package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
)

// Delivery describes how a chunk message arrived.
type Delivery struct {
	MessageID    string
	ReceiveCount int
}

// Verdict tells the host what to do with a chunk message.
type Verdict struct {
	// Ack: the message is done (delete it).
	Ack bool
	// RetryAfter: when not acked, make the message visible again after this delay.
	RetryAfter time.Duration
	// Outcome is what the attempt came to ("" when no attempt ran: duplicate,
	// cancelled job, poison message).
	Outcome job.Outcome
	// Err is the handler's or the engine's error, for logs.
	Err error
}

// ProcessChunk runs one chunk task: it skips chunks that are already
// accounted or whose job is over, runs the kind's handler, and records the
// outcome exactly once. The verdict says whether to delete the message or to
// hide it for a back-off delay.
func (e *Engine) ProcessChunk(ctx context.Context, body []byte, d Delivery) Verdict {
	var t job.ChunkTask
	if err := json.Unmarshal(body, &t); err != nil || t.JobID == "" || t.Kind == "" {
		return Verdict{Err: fmt.Errorf("worker: chunk task %q: %w", truncate(body), ErrPoison)}
	}
	reg, ok := e.reg.lookup(t.Kind)
	if !ok {
		return Verdict{Err: fmt.Errorf("worker: job %s chunk %d: kind %q not registered here: %w", t.JobID, t.Index, t.Kind, ErrPoison)}
	}
	j, err := e.store.GetJob(ctx, t.JobID)
	if errors.Is(err, job.ErrNotFound) {
		return Verdict{Ack: true, Err: fmt.Errorf("worker: job %s: %w; chunk dropped", t.JobID, err)}
	}
	if err != nil {
		return e.retryLater(fmt.Errorf("worker: job %s chunk %d: %w", t.JobID, t.Index, err))
	}
	if j.State != job.StateRunning {
		return Verdict{Ack: true} // finished, failed or cancelled: nothing to do
	}
	prior, err := e.store.GetChunk(ctx, t.JobID, t.Index)
	switch {
	case errors.Is(err, job.ErrNotFound):
		prior = nil
	case err != nil:
		return e.retryLater(fmt.Errorf("worker: job %s chunk %d: %w", t.JobID, t.Index, err))
	case prior.State.Terminal():
		// A duplicate delivery. The first one may have died between its
		// writes or before the finish check: settle and check here; both
		// are idempotent.
		settled, err := e.store.Settle(ctx, t.JobID, t.Index)
		if err != nil {
			return e.retryLater(fmt.Errorf("worker: job %s chunk %d: settle: %w", t.JobID, t.Index, err))
		}
		if err := e.maybeFinish(ctx, settled); err != nil {
			return e.retryLater(err)
		}
		return Verdict{Ack: true}
	case prior.RetryAt != nil && prior.RetryAt.After(e.clock.Now()):
		// Parked for a long retry; the sweeper will re-enqueue it.
		return Verdict{Ack: true}
	}
	attempt := 1
	if prior != nil {
		attempt = len(prior.Attempts) + 1
	}
	args, err := reg.decode(j.Args)
	if err != nil {
		return e.record(ctx, j, t, reg, job.Attempt{Outcome: job.OutcomeFailed, Error: err.Error(), Worker: e.worker, Started: e.clock.Now().UTC()}, 0)
	}

	started := e.clock.Now().UTC()
	items, herr := e.call(ctx, reg, j, args, t, attempt)
	a := job.Attempt{Worker: e.worker, Started: started, Duration: e.clock.Now().Sub(started), Items: items}
	if children, ok := replacement(herr); ok {
		return e.replace(ctx, j, t, reg, a, children)
	}
	if herr == nil {
		a.Outcome = job.OutcomeSucceeded
		return e.record(ctx, j, t, reg, a, 0)
	}
	a.Error = herr.Error()
	var pe *PanicError
	if errors.As(herr, &pe) {
		a.Stack = pe.Stack
	}
	if t.Items > 0 {
		a.Items = t.Items
	}
	if IsPermanent(herr) || attempt >= j.MaxAttempts {
		a.Outcome = job.OutcomeFailed
		return e.record(ctx, j, t, reg, a, 0)
	}
	delay, ok := retryDelay(herr)
	if !ok {
		delay = reg.opts.Backoff.Delay(attempt)
	}
	a.Outcome, a.RetryAfter = job.OutcomeRetry, delay
	return e.record(ctx, j, t, reg, a, delay)
}

// call runs the handler with the kind's timeout, turning a panic into a
// *PanicError carrying the stack.
func (e *Engine) call(ctx context.Context, reg *registration, j *job.Job, args Args, t job.ChunkTask, attempt int) (items int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, reg.opts.Timeout)
	defer cancel()
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	return reg.process(ctx, e.blobs, j, args, t, attempt)
}

// record writes the attempt and turns it into a verdict.
func (e *Engine) record(ctx context.Context, j *job.Job, t job.ChunkTask, reg *registration, a job.Attempt, delay time.Duration) Verdict {
	var retryAt *time.Time
	var parked *job.ChunkTask
	if a.Outcome == job.OutcomeRetry && delay > queue.MaxVisibility {
		at := e.clock.Now().UTC().Add(delay)
		retryAt, parked = &at, &t
	}
	rec, err := e.store.RecordAttempt(ctx, t.JobID, t.Index, a, retryAt, parked)
	if err != nil {
		return e.retryLater(fmt.Errorf("worker: job %s chunk %d: record attempt: %w", t.JobID, t.Index, err))
	}
	v := Verdict{Outcome: a.Outcome}
	if a.Error != "" {
		v.Err = fmt.Errorf("worker: job %s chunk %d attempt %d: %s", t.JobID, t.Index, rec.Chunk.Attempts[len(rec.Chunk.Attempts)-1].N, a.Error)
	}
	switch {
	case !rec.Applied:
		// Another delivery accounted the chunk first.
		v.Ack, v.Outcome = true, ""
	case a.Outcome == job.OutcomeRetry && retryAt == nil:
		v.RetryAfter = delay
		return v
	case a.Outcome == job.OutcomeRetry:
		v.Ack = true // parked in the store
		return v
	default:
		v.Ack = true
	}
	cur, err := e.store.GetJob(ctx, t.JobID)
	if err != nil {
		// The outcome is recorded; a redelivery or the sweeper will finish the job.
		return Verdict{RetryAfter: 0, Outcome: v.Outcome, Err: fmt.Errorf("worker: job %s: finish check: %w", t.JobID, err)}
	}
	if err := e.maybeFinish(ctx, cur); err != nil {
		return Verdict{Outcome: v.Outcome, Err: err}
	}
	return v
}

// retryLater is the verdict for an infrastructure error: leave the message
// to come back after a short delay, without counting an attempt.
func (e *Engine) retryLater(err error) Verdict {
	return Verdict{RetryAfter: 5 * time.Second, Err: err}
}
