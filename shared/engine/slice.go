package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/split"
	"github.com/slicework/slicework/shared/store"
)

// ErrPoison marks a message that can never be processed (malformed body,
// unknown kind). Hosts leave it on the queue so that it reaches the DLQ.
var ErrPoison = errors.New("poison message")

// Control handles one message of the control queue: a slice or finish task.
// receiveCount is the message's delivery count. A nil error means the
// message is done and may be deleted; an error leaves it to be redelivered.
func (e *Engine) Control(ctx context.Context, body []byte, receiveCount int) error {
	var t job.ControlTask
	if err := json.Unmarshal(body, &t); err != nil || t.JobID == "" {
		return fmt.Errorf("engine: control task %q: %w", truncate(body), ErrPoison)
	}
	switch t.Op {
	case job.OpSlice:
		return e.slice(ctx, t)
	case job.OpFinish:
		return e.Finish(ctx, t.JobID, receiveCount)
	default:
		return fmt.Errorf("engine: control task op %q: %w", t.Op, ErrPoison)
	}
}

// Slice cuts job id's data space into chunk tasks and enqueues them. It is
// idempotent: a redelivered slice task re-sends the same tasks (the
// accounting ignores duplicates) and records the same totals. A data space
// too large for one invocation is spread over several: a plan-based input
// (ids, items, lines) of more than SliceBudget chunks is sliced recursively
// through sub-slice tasks (see subslice.go); a kind's own Slice, after
// SliceBudget chunks or half the invocation's time, enqueues a task that
// continues from the next chunk. Each invocation does bounded work.
func (e *Engine) Slice(ctx context.Context, id string) error {
	return e.slice(ctx, job.ControlTask{Op: job.OpSlice, JobID: id})
}

func (e *Engine) slice(ctx context.Context, t job.ControlTask) error {
	if t.To > 0 {
		return e.subSlice(ctx, t)
	}
	id := t.JobID
	j, err := e.store.GetJob(ctx, id)
	if errors.Is(err, job.ErrNotFound) {
		e.log.Warn("slice task for a missing job; dropped", "job", id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("slicer: job %s: %w", id, err)
	}
	switch j.State {
	case job.StateQueued:
		now := e.clock.Now().UTC()
		j, err = e.store.Transition(ctx, id, []job.State{job.StateQueued}, job.StateRunning, store.Patch{StartedAt: &now})
		if errors.Is(err, job.ErrConflict) && j != nil && j.State == job.StateRunning {
			err = nil // a concurrent delivery started it
		}
		if err != nil {
			if errors.Is(err, job.ErrConflict) {
				return nil // cancelled meanwhile
			}
			return fmt.Errorf("slicer: job %s: start: %w", id, err)
		}
	case job.StateRunning:
		if j.Counters.Sliced {
			return e.maybeFinish(ctx, j)
		}
	default:
		return nil // not ours to slice (terminal, finishing, scheduled, waiting)
	}
	reg, ok := e.reg.lookup(j.Kind)
	if !ok {
		return e.failJob(ctx, j, fmt.Sprintf("slicer: kind %q is not registered", j.Kind))
	}
	args, err := reg.decode(j.Args)
	if err != nil {
		return e.failJob(ctx, j, fmt.Sprintf("slicer: %v", err))
	}
	if t.From == 0 {
		spread, err := e.spread(ctx, j)
		if err != nil {
			return e.sliceFailed(ctx, j, err)
		}
		if spread != nil {
			return e.maybeFinish(ctx, spread)
		}
	}
	em := e.newEmitter(ctx, j, t)
	err = e.emitChunks(ctx, reg, args, j, em)
	if errors.Is(err, errBudget) {
		if err := em.flush(ctx); err != nil {
			return fmt.Errorf("slicer: job %s: %w", id, err)
		}
		next := job.ControlTask{Op: job.OpSlice, JobID: id, From: em.next, Items: em.items}
		if err := e.sendTask(ctx, next, 0); err != nil {
			return fmt.Errorf("slicer: job %s: hand on from chunk %d: %w", id, em.next, err)
		}
		e.log.Debug("slice handed on", "job", id, "from", t.From, "next", em.next)
		return nil
	}
	if err != nil {
		return e.sliceFailed(ctx, j, err)
	}
	if err := em.flush(ctx); err != nil {
		return fmt.Errorf("slicer: job %s: %w", id, err)
	}
	j, err = e.store.SetSliced(ctx, id, em.next, em.items)
	if err != nil {
		return fmt.Errorf("slicer: job %s: record totals: %w", id, err)
	}
	e.log.Debug("sliced", "job", id, "chunks", em.next, "items", em.items)
	return e.maybeFinish(ctx, j)
}

// errBudget stops an emitter that has used its invocation's budget.
var errBudget = errors.New("slice budget used")

// emitChunks runs the splitter the job's input calls for.
func (e *Engine) emitChunks(ctx context.Context, reg *registration, args Args, j *job.Job, em *emitter) error {
	if j.Input.Type == job.InputCustom {
		if reg.slice == nil {
			return Permanent(fmt.Errorf("kind %s has no Slice", reg.kind))
		}
		return reg.slice(ctx, e.blobs, j, args, func(in job.ChunkInput, items int64) error {
			return em.emit(ctx, in, items)
		})
	}
	p, err := e.planFor(ctx, j)
	if err != nil {
		return err
	}
	return em.plan(ctx, p.plan, p.chunk)
}

// emitter numbers chunk tasks from index from, sends them in batches, and
// stops with errBudget when its invocation's budget is used. Chunks before
// from were sent by an earlier invocation: a kind's own Slice, which cannot
// seek, re-emits them and the emitter skips them. A plan stops before index
// to when to is above 0 (a sub-slice task's range).
type emitter struct {
	e         *Engine
	j         *job.Job
	queueName string
	from      int64
	to        int64
	next      int64
	items     int64
	stopAt    int64
	skipped   int64
	started   time.Time
	deadline  time.Time
	buf       []queue.Outgoing
}

// newEmitter starts an emitter for control task t of job j: from t.From
// (and up to t.To, or t.Items already counted), with this invocation's
// budget, handing on after half of the time left in ctx.
func (e *Engine) newEmitter(ctx context.Context, j *job.Job, t job.ControlTask) *emitter {
	em := &emitter{e: e, j: j, queueName: e.queues.Channel(j.Channel), from: t.From, next: t.From, to: t.To, items: t.Items,
		stopAt: t.From + e.budget, started: time.Now()}
	if dl, ok := ctx.Deadline(); ok {
		em.deadline = em.started.Add(time.Until(dl) / 2)
	}
	return em
}

func (em *emitter) plan(ctx context.Context, p split.Plan, in func(split.Range) (job.ChunkInput, int64)) error {
	em.skipped = em.from // a plan seeks: nothing to skip
	end := p.Len()
	if em.to > 0 && em.to < end {
		end = em.to
	}
	for i := em.from; i < end; i++ {
		ci, n := in(p.At(i))
		if err := em.emit(ctx, ci, n); err != nil {
			return err
		}
	}
	return nil
}

func (em *emitter) emit(ctx context.Context, in job.ChunkInput, items int64) error {
	if em.next >= MaxChunks {
		return Permanent(fmt.Errorf("more than %d chunks", MaxChunks))
	}
	if em.skipped < em.from {
		// Re-emitted by a kind's Slice: already sent; its items are in em.items.
		em.skipped++
		return nil
	}
	if em.next >= em.stopAt || (!em.deadline.IsZero() && len(em.buf) == 0 && time.Now().After(em.deadline)) {
		return errBudget
	}
	body, err := json.Marshal(job.ChunkTask{JobID: em.j.ID, Kind: em.j.Kind, Index: em.next, Items: items, Input: in})
	if err != nil {
		return fmt.Errorf("encode chunk %d: %w", em.next, err)
	}
	if len(body) > queue.MaxBodyBytes {
		return Permanent(fmt.Errorf("chunk %d task is %d bytes, over the queue's %d", em.next, len(body), queue.MaxBodyBytes))
	}
	em.next++
	em.items += items
	em.buf = append(em.buf, queue.Outgoing{Body: body})
	if len(em.buf) >= em.e.sendBatch {
		return em.flush(ctx)
	}
	return nil
}

func (em *emitter) flush(ctx context.Context) error {
	if len(em.buf) == 0 {
		return nil
	}
	if err := em.e.queue.Send(ctx, em.queueName, em.buf...); err != nil {
		return fmt.Errorf("send chunk tasks: %w", err)
	}
	em.buf = em.buf[:0]
	return nil
}

// failJob ends a job that cannot run as failed with reason.
func (e *Engine) failJob(ctx context.Context, j *job.Job, reason string) error {
	now := e.clock.Now().UTC()
	done, err := e.store.Transition(ctx, j.ID, []job.State{job.StateQueued, job.StateRunning, job.StateFinishing, job.StateScheduled, job.StateWaiting},
		job.StateFailed, store.Patch{Error: &reason, FinishedAt: &now})
	if errors.Is(err, job.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine: fail job %s: %w", j.ID, err)
	}
	e.terminal(done)
	return nil
}

// maybeFinish moves an accounted running job to finishing and enqueues its
// finish task. The conditional transition makes this happen exactly once,
// however many workers see the last chunk.
func (e *Engine) maybeFinish(ctx context.Context, j *job.Job) error {
	if j.State != job.StateRunning || !j.Counters.Accounted() {
		return nil
	}
	_, err := e.store.Transition(ctx, j.ID, []job.State{job.StateRunning}, job.StateFinishing, store.Patch{})
	if errors.Is(err, job.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("engine: job %s: start finishing: %w", j.ID, err)
	}
	if err := e.sendControl(ctx, job.OpFinish, j.ID, 0); err != nil {
		// The sweeper re-sends finish tasks for jobs stuck in finishing.
		e.log.Warn("enqueue finish task failed; the sweeper will retry", "job", j.ID, "err", err)
	}
	return nil
}

// MaxFinishAttempts bounds deliveries of a finish task whose Finish step
// keeps failing; then the job fails with the step's error.
const MaxFinishAttempts = 5

// Finish runs the finish step of job id and moves it to its terminal state.
func (e *Engine) Finish(ctx context.Context, id string, receiveCount int) error {
	j, err := e.store.GetJob(ctx, id)
	if errors.Is(err, job.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finisher: job %s: %w", id, err)
	}
	if j.State != job.StateFinishing {
		return nil // done already, or cancelled
	}
	c := j.Counters
	state, reason := job.StateSucceeded, ""
	if c.ChunksFailed > 0 {
		pct := 100 * float64(c.ChunksFailed) / float64(max(c.ChunksTotal, 1))
		if pct > j.TolerateFailedPct {
			state = job.StateFailed
			reason = fmt.Sprintf("%d of %d chunks failed (%.2f%%, tolerated %.2f%%)", c.ChunksFailed, c.ChunksTotal, pct, j.TolerateFailedPct)
		}
	}
	var result string
	if reg, ok := e.reg.lookup(j.Kind); ok && reg.finish != nil && state == job.StateSucceeded {
		args, err := reg.decode(j.Args)
		if err == nil {
			result, err = reg.finish(ctx, e.blobs, j, args, Summary{Counters: c})
		}
		if err != nil {
			if receiveCount < MaxFinishAttempts && !IsPermanent(err) {
				return fmt.Errorf("finisher: job %s: attempt %d: %w", id, receiveCount, err)
			}
			state, reason = job.StateFailed, fmt.Sprintf("finish step failed: %v", err)
		}
	}
	now := e.clock.Now().UTC()
	p := store.Patch{FinishedAt: &now}
	if reason != "" {
		p.Error = &reason
	}
	if result != "" {
		p.Result = &result
	}
	done, err := e.store.Transition(ctx, id, []job.State{job.StateFinishing}, state, p)
	if errors.Is(err, job.ErrConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finisher: job %s: %w", id, err)
	}
	e.terminal(done)
	return nil
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}
