package engine

import (
	"bytes"
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

// Child is one job of a Replace: a typed submission (NewChild) or a
// Request (ChildRequest). Its Parent is always the replacing job.
type Child struct {
	req Request
	err error
}

// NewChild returns the child job of args' kind with opts, as Submit would
// submit it.
func NewChild(args Args, opts SubmitOptions) Child {
	req, err := requestOf(args, opts)
	return Child{req: req, err: err}
}

// ChildRequest returns the child job that req describes, as POST /jobs
// takes it. req.Parent must be empty or the replacing job's id.
func ChildRequest(req Request) Child { return Child{req: req} }

// MaxReplaceJobs bounds the jobs of one Replace.
const MaxReplaceJobs = MaxItems

// Replace is the outcome REPLACE (TheSchwartz): a handler returns it to
// complete its chunk and submit jobs, atomically. Either the chunk is
// recorded as succeeded and every job exists with Parent set to the
// replacing job, or neither happens; a duplicate delivery of the chunk,
// which finds it completed, submits nothing. Jobs whose unique key is
// held already are not submitted again (the holder stands for them).
//
// The write is one store transaction (store.ReplaceChunk), so its size is
// bounded: up to 49 plain jobs, fewer with unique keys, tags or
// dependencies (store.FitsReplace). A larger fan-out, up to MaxReplaceJobs,
// becomes ONE child job of kind FanoutKind instead: the requests are
// written to the blob store as data blocks before the transaction, the
// transaction creates that job with the chunk's outcome, and its chunks,
// each sized to fit one transaction, replace themselves with the jobs in
// turn. The jobs are then the fan-out job's children (the replacing job's
// grandchildren).
//
// The jobs are validated like submissions when the chunk ends: an invalid
// one (a *ValidationError), two with one unique key, or more than
// MaxReplaceJobs fail the chunk for good. Slice tasks of the new jobs are
// enqueued after the transaction commits; if the process dies in between,
// the sweeper re-drives the queued jobs after Config.StaleAfter. Replace
// with no jobs simply completes the chunk.
func Replace(jobs ...Child) error { return &replaceOutcome{jobs: jobs} }

type replaceOutcome struct{ jobs []Child }

func (r *replaceOutcome) Error() string { return fmt.Sprintf("replace with %d jobs", len(r.jobs)) }

// replacement returns the jobs of a Replace outcome, if err is one.
func replacement(err error) ([]Child, bool) {
	var r *replaceOutcome
	if errors.As(err, &r) {
		return r.jobs, true
	}
	return nil, false
}

// replace completes chunk t of j with the successful attempt a and submits
// children, in one store transaction.
func (e *Engine) replace(ctx context.Context, j *job.Job, t job.ChunkTask, reg *registration, a job.Attempt, children []Child) Verdict {
	a.Outcome = job.OutcomeSucceeded
	now := e.clock.Now().UTC()
	fail := func(err error) Verdict {
		a.Outcome, a.Error = job.OutcomeFailed, fmt.Sprintf("replace: %v", err)
		if t.Items > 0 {
			a.Items = t.Items
		}
		return e.record(ctx, j, t, reg, a, 0)
	}
	reqs, jobs, err := e.validateChildren(ctx, j, children, now)
	if errors.Is(err, job.ErrInvalid) {
		return fail(err)
	}
	if err != nil {
		return e.retryLater(fmt.Errorf("worker: job %s chunk %d: replace: %w", t.JobID, t.Index, err))
	}
	var batch []*job.Job
	if store.FitsReplace(jobs) {
		batch, err = e.prepareChildren(ctx, jobs, now)
	} else {
		var fan *job.Job
		fan, err = e.fanoutJob(ctx, j, reqs, jobs, now)
		batch = []*job.Job{fan}
	}
	if err != nil {
		e.dropBlocks(ctx, batch)
		return e.retryLater(fmt.Errorf("worker: job %s chunk %d: replace: %w", t.JobID, t.Index, err))
	}
	rec, err := e.store.ReplaceChunk(ctx, t.JobID, t.Index, a, batch)
	if err != nil {
		e.dropBlocks(ctx, batch)
		if errors.Is(err, job.ErrInvalid) {
			return fail(err)
		}
		return e.retryLater(fmt.Errorf("worker: job %s chunk %d: replace: %w", t.JobID, t.Index, err))
	}
	if !rec.Applied {
		// A duplicate delivery: the chunk was accounted (and its jobs
		// submitted) by another one.
		e.dropBlocks(ctx, batch)
		return e.afterRecord(ctx, t, Verdict{Ack: true})
	}
	created := map[string]bool{}
	for _, c := range rec.Created {
		created[c.ID] = true
	}
	var unused []*job.Job
	for _, b := range batch {
		if !created[b.ID] {
			unused = append(unused, b)
		}
	}
	e.dropBlocks(ctx, unused)
	for _, h := range rec.Existing {
		e.log.Debug("replace: unique key held; not submitted again", "job", t.JobID, "chunk", t.Index, "holder", h.ID, "key", h.UniqueKey)
	}
	e.enqueueNew(ctx, rec.Created, now)
	return e.afterRecord(ctx, t, Verdict{Ack: true, Outcome: job.OutcomeSucceeded})
}

// afterRecord runs the finish check after a chunk's outcome is recorded.
func (e *Engine) afterRecord(ctx context.Context, t job.ChunkTask, v Verdict) Verdict {
	cur, err := e.store.GetJob(ctx, t.JobID)
	if err != nil {
		// The outcome is recorded; a redelivery or the sweeper will finish the job.
		return Verdict{Outcome: v.Outcome, Err: fmt.Errorf("worker: job %s: finish check: %w", t.JobID, err)}
	}
	if err := e.maybeFinish(ctx, cur); err != nil {
		return Verdict{Outcome: v.Outcome, Err: err}
	}
	return v
}

// validateChildren validates the children of parent as submissions and
// returns their requests and jobs (Parent set, no id yet). Errors wrapping
// job.ErrInvalid are the handler's fault; others are the backend's.
func (e *Engine) validateChildren(ctx context.Context, parent *job.Job, children []Child, now time.Time) ([]Request, []*job.Job, error) {
	if len(children) > MaxReplaceJobs {
		return nil, nil, invalid("replace", "%d jobs, at most %d", len(children), MaxReplaceJobs)
	}
	reqs := make([]Request, len(children))
	jobs := make([]*job.Job, len(children))
	keys := map[string]int{}
	for i, c := range children {
		if c.err != nil {
			return nil, nil, fmt.Errorf("job %d: %v: %w", i, c.err, job.ErrInvalid)
		}
		req := c.req
		if req.Parent != "" && req.Parent != parent.ID {
			return nil, nil, invalid("parent", "job %d: parent %q; a replaced job's parent is the replacing job %s", i, req.Parent, parent.ID)
		}
		req.Parent = ""
		cj, err := e.validate(ctx, req, now)
		if err != nil {
			return nil, nil, fmt.Errorf("job %d: %w", i, err)
		}
		cj.Parent = parent.ID
		// A fan-out job submits the request later: fix its delay now.
		req.RunAt, req.Delay = cj.RunAt, 0
		if k := cj.UniqueKey; k != "" {
			if first, ok := keys[k]; ok {
				return nil, nil, invalid("unique_key", "jobs %d and %d share unique key %q", first, i, k)
			}
			keys[k] = i
		}
		if !store.FitsReplace([]*job.Job{blocked(cj)}) {
			return nil, nil, invalid("args", "job %d is too large for one transaction (%d bytes, at most %d)", i, store.JobBytes(cj), store.MaxReplaceBytes)
		}
		reqs[i], jobs[i] = req, cj
	}
	return reqs, jobs, nil
}

// blocked is j as it is stored: an item list lives in data blocks.
func blocked(j *job.Job) *job.Job {
	if j.Input.Items == nil {
		return j
	}
	c := *j
	c.Input.Items = nil
	return &c
}

// prepareChildren gives validated jobs their ids and initial states and
// writes the data blocks of item lists, as SubmitRequest does.
func (e *Engine) prepareChildren(ctx context.Context, jobs []*job.Job, now time.Time) ([]*job.Job, error) {
	out := make([]*job.Job, 0, len(jobs))
	for _, cj := range jobs {
		cj.ID = job.NewID(now)
		switch {
		case len(cj.DependsOn) > 0:
			// It waits; its follow-up counts the dependencies done already.
			cj.State, cj.FollowUp = job.StateWaiting, newFollowUpToken()
		case cj.RunAt != nil && cj.RunAt.Sub(now) > queue.MaxDelay:
			cj.State = job.StateScheduled
		default:
			cj.State = job.StateQueued
		}
		out = append(out, cj)
		if cj.Input.Type == job.InputItems {
			if _, err := split.WriteBlocks(ctx, e.blobs, BlocksPrefix(cj.ID), cj.Input.Items, int(cj.ChunkSize)); err != nil {
				return out, fmt.Errorf("job %s: write data blocks: %w", cj.ID, err)
			}
			cj.Input.Key = BlocksPrefix(cj.ID)
			cj.Input.Start, cj.Input.End = 0, int64(len(cj.Input.Items))
			cj.Input.Items = nil
		}
	}
	return out, nil
}

// fanoutJob writes reqs as the data blocks of one FanoutKind job, child of
// parent, whose chunks each fit one ReplaceChunk, and returns that job.
func (e *Engine) fanoutJob(ctx context.Context, parent *job.Job, reqs []Request, jobs []*job.Job, now time.Time) (*job.Job, error) {
	maxItems, maxBytes := 1, 1
	for _, cj := range jobs {
		b := blocked(cj)
		maxItems, maxBytes = max(maxItems, store.JobItems(b)), max(maxBytes, store.JobBytes(b))
	}
	per := max(1, min((store.MaxTransactItems-store.ReplaceChunkItems)/maxItems, store.MaxReplaceBytes/maxBytes))
	items := make([]json.RawMessage, len(reqs))
	for i, r := range reqs {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("encode job %d: %w", i, err)
		}
		items[i] = b
	}
	fan := &job.Job{
		ID: job.NewID(now), Kind: FanoutKind, Args: json.RawMessage("{}"), Channel: parent.Channel,
		ChunkSize: int64(per), MaxAttempts: DefaultMaxAttempts, Parent: parent.ID, State: job.StateQueued,
		CreatedAt: now, UpdatedAt: now,
	}
	fan.Input = job.Input{Type: job.InputItems, Key: BlocksPrefix(fan.ID), Start: 0, End: int64(len(items))}
	if _, err := split.WriteBlocks(ctx, e.blobs, fan.Input.Key, items, per); err != nil {
		return fan, fmt.Errorf("fan-out job %s: write data blocks: %w", fan.ID, err)
	}
	return fan, nil
}

// dropBlocks deletes the data blocks written for jobs that were not
// created.
func (e *Engine) dropBlocks(ctx context.Context, jobs []*job.Job) {
	for _, j := range jobs {
		if j != nil && j.ID != "" && j.Input.Type == job.InputItems {
			e.deleteBlocks(ctx, j.ID)
		}
	}
}

// enqueueNew sends the slice tasks of newly created queued jobs, each
// delayed to its RunAt, and runs the follow-up of waiting ones (their
// dependencies may be done already). A failure is logged: the jobs are
// durable, the sweeper re-drives queued jobs that have no task after
// StaleAfter and runs follow-ups left behind.
func (e *Engine) enqueueNew(ctx context.Context, jobs []*job.Job, now time.Time) {
	var msgs []queue.Outgoing
	for _, j := range jobs {
		if j.State == job.StateWaiting {
			e.followUpNow(ctx, j)
		}
		if j.State != job.StateQueued {
			continue
		}
		body, err := json.Marshal(job.ControlTask{Op: job.OpSlice, JobID: j.ID})
		if err != nil {
			e.log.Error("encode slice task", "job", j.ID, "err", err)
			continue
		}
		msgs = append(msgs, queue.Outgoing{Body: body, Delay: runDelay(j, now)})
	}
	if len(msgs) == 0 {
		return
	}
	if err := e.queue.Send(ctx, e.queues.Slice(), msgs...); err != nil {
		e.log.Warn("enqueue slice tasks of replaced jobs failed; the sweeper will re-drive them", "jobs", len(msgs), "err", err)
	}
}

// runDelay is how long a queued job's slice task waits: until its RunAt,
// within the queue's limits.
func runDelay(j *job.Job, now time.Time) time.Duration {
	if j.RunAt == nil {
		return 0
	}
	return min(max(j.RunAt.Sub(now), 0), queue.MaxDelay)
}

// FanoutKind is the built-in kind of the job that carries a Replace too
// large for one transaction. Its input is an item list (data blocks) of
// Requests; each chunk replaces itself with the jobs of its items, so the
// jobs become the fan-out job's children. Every engine knows the kind,
// whether or not the registry lists it.
const FanoutKind = "slicework.fanout"

// FanoutArgs are the (empty) arguments of a FanoutKind job.
type FanoutArgs struct{}

// Kind implements Args.
func (FanoutArgs) Kind() string { return FanoutKind }

// fanoutHandler submits a fan-out chunk's requests with Replace.
type fanoutHandler struct{}

// Process reads the chunk's requests and replaces the chunk with them. A
// request that is not a valid Request fails the chunk for good.
func (fanoutHandler) Process(ctx context.Context, c *Chunk[FanoutArgs]) error {
	items, err := c.Items(ctx)
	if err != nil {
		if errors.Is(err, job.ErrInvalid) {
			return Permanent(err)
		}
		return err
	}
	children := make([]Child, len(items))
	for i, it := range items {
		var req Request
		dec := json.NewDecoder(bytes.NewReader(it))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return Permanent(fmt.Errorf("fan-out chunk %d item %d: not a job request: %w", c.Index(), i, err))
		}
		children[i] = ChildRequest(req)
	}
	return Replace(children...)
}

// builtins holds the kinds every engine runs: Registry.lookup falls back
// to it.
var builtins = func() *Registry {
	r := NewRegistry()
	MustRegister(r, fanoutHandler{}, Options{})
	return r
}()
