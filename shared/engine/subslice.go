package engine

// Recursive slicing.
//
// A plan-based input (ids, items, lines) knows its chunk count and item
// total before a single chunk is sent, and can produce the i-th chunk's
// input on demand. When that count exceeds SliceBudget, the job's first
// slice task does not emit chunks itself. It
//
//  1. enqueues at most SliceFanout sub-slice tasks (ControlTask with To > 0)
//     that together cover the chunk indices [0, n), then
//  2. records the totals with SetSliced, and checks whether the job is done.
//
// A sub-slice task whose range holds more than SliceBudget chunks subdivides
// it the same way; one that fits emits its chunks (and, if it runs short of
// time, hands the rest of its range to a continuation). Ranges are cut on
// multiples of SliceBudget, so the leaves are full budgets but the last.
//
// Why this is exact and loses nothing:
//   - The totals are recorded once, by the first slice task, and only after
//     every sub-slice task is durably on the queue. A crash before SetSliced
//     redelivers the first task, which sends the sub-slice tasks again and
//     records the same totals (SetSliced with equal totals is a no-op).
//   - A job finishes only when every chunk index in [0, n) has an outcome;
//     chunk outcomes are recorded exactly once per index, so the early
//     totals cannot finish a job before its last sub-slice has emitted.
//   - A duplicated sub-slice task re-sends its subtree's chunk tasks; the
//     accounting ignores duplicate chunk deliveries, so the cost is extra
//     messages, never extra counts.
//   - A sub-slice task of a job that is no longer running is dropped.

import (
	"context"
	"errors"
	"fmt"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/split"
)

// planned is a plan-based input: its plan, the chunk input of each range,
// and the item total over the whole plan.
type planned struct {
	plan  split.Plan
	chunk func(split.Range) (job.ChunkInput, int64)
	items int64
}

// planFor returns the plan of j's plan-based input. A custom input has none
// and is an error here. Errors wrapping job.ErrInvalid or job.ErrNotFound,
// or from Permanent, will not go away on a retry.
func (e *Engine) planFor(ctx context.Context, j *job.Job) (*planned, error) {
	in := j.Input
	switch in.Type {
	case job.InputLines:
		info, err := e.blobs.Head(ctx, in.Key)
		if err != nil {
			return nil, fmt.Errorf("input object: %w", err)
		}
		var headerEnd int64
		if in.Format == job.FormatCSV {
			headerEnd, err = split.HeaderEnd(ctx, split.Opener(e.blobs, in.Key), info.Size, 1<<20)
			if err != nil {
				return nil, fmt.Errorf("csv header: %w", err)
			}
		}
		plan, err := split.Uniform(headerEnd, info.Size, j.ChunkSize)
		if err != nil {
			return nil, err
		}
		// The master does not scan the object: lines are counted by the workers.
		return &planned{plan: plan, chunk: func(r split.Range) (job.ChunkInput, int64) {
			return job.ChunkInput{Key: in.Key, Format: in.Format, Start: r.Start, End: r.End, HeaderEnd: headerEnd}, 0
		}}, nil
	case job.InputIDRange:
		var plan split.Plan
		var err error
		if in.Buckets != nil {
			plan, err = split.InverseLog(in.Start, in.End, in.Buckets.Count)
		} else {
			plan, err = split.Uniform(in.Start, in.End, j.ChunkSize)
		}
		if err != nil {
			return nil, err
		}
		// Plans cover [Start, End) exactly, so the ranges' lengths add up to it.
		return &planned{plan: plan, items: in.End - in.Start, chunk: func(r split.Range) (job.ChunkInput, int64) {
			return job.ChunkInput{Start: r.Start, End: r.End}, r.End - r.Start
		}}, nil
	case job.InputItems:
		plan, err := split.Uniform(in.Start, in.End, j.ChunkSize)
		if err != nil {
			return nil, err
		}
		return &planned{plan: plan, items: in.End - in.Start, chunk: func(r split.Range) (job.ChunkInput, int64) {
			return job.ChunkInput{Key: split.BlockKey(in.Key, r.Start/j.ChunkSize), Start: r.Start, End: r.End}, r.End - r.Start
		}}, nil
	case job.InputCustom:
		return nil, Permanent(fmt.Errorf("custom input has no plan"))
	}
	return nil, Permanent(fmt.Errorf("unknown input type %q", in.Type))
}

// spread starts recursive slicing for the first slice task of running job
// j: if j's input is plan-based and has more chunks than the budget, it
// enqueues the sub-slice tasks, records the totals and returns the job after
// SetSliced. It returns nil (and does nothing) when the slicer should emit
// the chunks itself.
func (e *Engine) spread(ctx context.Context, j *job.Job) (*job.Job, error) {
	if j.Input.Type == job.InputCustom {
		return nil, nil
	}
	p, err := e.planFor(ctx, j)
	if err != nil {
		return nil, err
	}
	n := p.plan.Len()
	if n <= e.budget {
		return nil, nil
	}
	if n > MaxChunks {
		return nil, Permanent(fmt.Errorf("more than %d chunks", MaxChunks))
	}
	if err := e.fanOut(ctx, j.ID, 0, n); err != nil {
		return nil, err
	}
	done, err := e.store.SetSliced(ctx, j.ID, n, p.items)
	if err != nil {
		return nil, fmt.Errorf("record totals: %w", err)
	}
	e.log.Debug("slicing spread", "job", j.ID, "chunks", n, "items", p.items)
	return done, nil
}

// subRanges cuts [from, to) into at most fanout consecutive ranges whose
// boundaries lie on multiples of budget past from, so that the leaves of
// the recursion hold budget chunks each (the last one fewer).
func subRanges(from, to, budget int64, fanout int) [][2]int64 {
	leaves := ceilDiv(to-from, budget)
	per := ceilDiv(leaves, int64(fanout)) * budget
	out := make([][2]int64, 0, fanout)
	for s := from; s < to; s += per {
		out = append(out, [2]int64{s, min(s+per, to)})
	}
	return out
}

// fanOut enqueues the sub-slice tasks of [from, to) of job id.
func (e *Engine) fanOut(ctx context.Context, id string, from, to int64) error {
	for _, r := range subRanges(from, to, e.budget, e.fanout) {
		if err := e.sendTask(ctx, job.ControlTask{Op: job.OpSlice, JobID: id, From: r[0], To: r[1]}, 0); err != nil {
			return fmt.Errorf("enqueue sub-slice [%d, %d): %w", r[0], r[1], err)
		}
	}
	return nil
}

// subSlice runs a sub-slice task: it subdivides a range larger than the
// budget, or emits the range's chunks.
func (e *Engine) subSlice(ctx context.Context, t job.ControlTask) error {
	id := t.JobID
	if t.From < 0 || t.To <= t.From {
		return fmt.Errorf("engine: sub-slice task of job %s has range [%d, %d): %w", id, t.From, t.To, ErrPoison)
	}
	j, err := e.store.GetJob(ctx, id)
	if errors.Is(err, job.ErrNotFound) {
		e.log.Warn("sub-slice task for a missing job; dropped", "job", id)
		return nil
	}
	if err != nil {
		return fmt.Errorf("slicer: job %s: %w", id, err)
	}
	if j.State != job.StateRunning {
		return nil // cancelled, failed or done: nothing left to emit
	}
	if t.To-t.From > e.budget {
		if err := e.fanOut(ctx, id, t.From, t.To); err != nil {
			return fmt.Errorf("slicer: job %s: %w", id, err)
		}
		return nil
	}
	reg, ok := e.reg.lookup(j.Kind)
	if !ok {
		return e.failJob(ctx, j, fmt.Sprintf("slicer: kind %q is not registered", j.Kind))
	}
	args, err := reg.decode(j.Args)
	if err != nil {
		return e.failJob(ctx, j, fmt.Sprintf("slicer: %v", err))
	}
	em := e.newEmitter(ctx, j, t)
	err = e.emitChunks(ctx, reg, args, j, em)
	if errors.Is(err, errBudget) {
		if err := em.flush(ctx); err != nil {
			return fmt.Errorf("slicer: job %s: %w", id, err)
		}
		next := job.ControlTask{Op: job.OpSlice, JobID: id, From: em.next, To: t.To}
		if err := e.sendTask(ctx, next, 0); err != nil {
			return fmt.Errorf("slicer: job %s: hand on [%d, %d): %w", id, em.next, t.To, err)
		}
		return nil
	}
	if err != nil {
		return e.sliceFailed(ctx, j, err)
	}
	if err := em.flush(ctx); err != nil {
		return fmt.Errorf("slicer: job %s: %w", id, err)
	}
	e.log.Debug("sub-slice emitted", "job", id, "from", t.From, "to", t.To)
	return nil
}

// sliceFailed fails job j for a slicing error that a retry cannot cure
// (Permanent, invalid input, missing object) and returns any other error
// for the slice task to be redelivered.
func (e *Engine) sliceFailed(ctx context.Context, j *job.Job, err error) error {
	if IsPermanent(err) || errors.Is(err, job.ErrInvalid) || errors.Is(err, job.ErrNotFound) {
		return e.failJob(ctx, j, fmt.Sprintf("slicer: %v", err))
	}
	return fmt.Errorf("slicer: job %s: %w", j.ID, err)
}
