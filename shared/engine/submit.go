package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/slicework/slicework/shared/blob/fsblob"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/split"
)

// Request is a job submission, as POST /jobs takes it.
type Request struct {
	Kind      string          `json:"kind"`
	Args      json.RawMessage `json:"args,omitempty"`
	Input     job.Input       `json:"input"`
	Channel   string          `json:"channel,omitempty"`
	UniqueKey string          `json:"unique_key,omitempty"`
	// RunAt delays the job; a RunAt in the past runs it now.
	RunAt *time.Time `json:"run_at,omitempty"`
	// Delay delays the job by a duration from now ("90s", "36h", "3d", or
	// seconds); 0..MaxRunAhead, and not together with RunAt.
	Delay Duration `json:"delay,omitempty"`
	Tags  []string `json:"tags,omitempty"`
	// ChunkSize overrides the kind's chunk size (items, or bytes for lines).
	ChunkSize   int64 `json:"chunk_size,omitempty"`
	MaxAttempts int   `json:"max_attempts,omitempty"`
	// TolerateFailedPct overrides the kind's tolerated failure percentage.
	TolerateFailedPct *float64 `json:"tolerate_failed_pct,omitempty"`
	Parent            string   `json:"parent,omitempty"`
	// DependsOn lists jobs (at most MaxDependsOn, existing, distinct) that
	// must all reach a terminal state before this one runs; it waits
	// until then. If one fails or is cancelled, this job fails too unless
	// RunAnyway is set.
	DependsOn []string `json:"depends_on,omitempty"`
	// RunAnyway runs the job even if a dependency fails or is cancelled.
	RunAnyway bool `json:"run_anyway,omitempty"`
	// CallbackURL, an http or https URL, receives the job's completion
	// event as a JSON POST (retried with back-off, at least once).
	CallbackURL string `json:"callback_url,omitempty"`
}

// SubmitOptions are the options of a typed Submit.
type SubmitOptions struct {
	Input     job.Input
	Channel   string
	UniqueKey string
	RunAt     time.Time
	// Delay delays the job by a duration from now (not with RunAt).
	Delay             time.Duration
	Tags              []string
	ChunkSize         int64
	MaxAttempts       int
	TolerateFailedPct *float64
	// DependsOn, RunAnyway and CallbackURL are as in Request.
	DependsOn   []string
	RunAnyway   bool
	CallbackURL string
}

// Limits on submissions.
const (
	MaxUniqueKey   = 256
	MaxTags        = 20
	MaxItems       = 100_000
	MaxChunks      = 10_000_000
	MaxMaxAttempts = 100
	MaxRunAhead    = 366 * 24 * time.Hour
	// MaxID bounds id ranges so that their length fits an int64.
	MaxID = 1 << 62
)

var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_.:=/-]{1,64}$`)

// ValidationError is a submission that breaks a rule. It wraps
// job.ErrInvalid; Field names the offending field.
type ValidationError struct {
	Field string
	Msg   string
}

func (v *ValidationError) Error() string { return v.Field + ": " + v.Msg }

// Unwrap returns job.ErrInvalid.
func (v *ValidationError) Unwrap() error { return job.ErrInvalid }

func invalid(field, format string, a ...any) error {
	return &ValidationError{Field: field, Msg: fmt.Sprintf(format, a...)}
}

// Submit submits a job of args' kind.
func (e *Engine) Submit(ctx context.Context, args Args, opts SubmitOptions) (*job.Job, error) {
	req, err := requestOf(args, opts)
	if err != nil {
		return nil, fmt.Errorf("engine: submit: %w", err)
	}
	req.DependsOn, req.RunAnyway, req.CallbackURL = opts.DependsOn, opts.RunAnyway, opts.CallbackURL
	return e.SubmitRequest(ctx, req)
}

// requestOf is the Request of a typed submission (Submit, and the children
// of Replace).
func requestOf(args Args, opts SubmitOptions) (Request, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return Request{}, fmt.Errorf("%s: encode args: %w", args.Kind(), err)
	}
	req := Request{
		Kind: args.Kind(), Args: raw, Input: opts.Input, Channel: opts.Channel, UniqueKey: opts.UniqueKey,
		Tags: opts.Tags, ChunkSize: opts.ChunkSize, MaxAttempts: opts.MaxAttempts, TolerateFailedPct: opts.TolerateFailedPct,
	}
	if !opts.RunAt.IsZero() {
		req.RunAt = &opts.RunAt
	}
	req.Delay = Duration(opts.Delay)
	req.DependsOn, req.RunAnyway, req.CallbackURL = opts.DependsOn, opts.RunAnyway, opts.CallbackURL
	return req, nil
}

// SubmitRequest validates req, writes the job and enqueues its slice task.
// Invalid requests fail with a *ValidationError (wrapping job.ErrInvalid) and
// write nothing. A request whose unique key is held returns the existing job
// and an error wrapping job.ErrDuplicate.
func (e *Engine) SubmitRequest(ctx context.Context, req Request) (*job.Job, error) {
	now := e.clock.Now().UTC()
	j, err := e.validate(ctx, req, now)
	if err != nil {
		return nil, fmt.Errorf("engine: submit: %w", err)
	}
	j.ID = job.NewID(now)

	// Explicit items become data blocks before the job exists, so the job
	// record stays small; a duplicate submission removes its blocks again.
	if req.Input.Type == job.InputItems {
		if _, err := split.WriteBlocks(ctx, e.blobs, BlocksPrefix(j.ID), req.Input.Items, int(j.ChunkSize)); err != nil {
			e.deleteBlocks(ctx, j.ID)
			return nil, fmt.Errorf("engine: submit %s: write data blocks: %w", j.ID, err)
		}
		j.Input.Key = BlocksPrefix(j.ID)
		j.Input.Start, j.Input.End = 0, int64(len(req.Input.Items))
		j.Input.Items = nil
	}

	delay := time.Duration(0)
	if j.RunAt != nil {
		delay = j.RunAt.Sub(now)
	}
	switch {
	case len(j.DependsOn) > 0:
		// It waits; its follow-up (run below, or by the sweeper after a
		// crash) counts the dependencies that are done already.
		j.State, j.FollowUp = job.StateWaiting, newFollowUpToken()
	case delay > queue.MaxDelay:
		j.State = job.StateScheduled
	default:
		j.State = job.StateQueued
	}
	created, err := e.store.CreateJob(ctx, j)
	if err != nil {
		if j.Input.Type == job.InputItems {
			e.deleteBlocks(ctx, j.ID)
		}
		if errors.Is(err, job.ErrDuplicate) {
			return created, fmt.Errorf("engine: submit: unique key %q held by job %s: %w", j.UniqueKey, created.ID, job.ErrDuplicate)
		}
		return nil, fmt.Errorf("engine: submit %s: %w", j.ID, err)
	}
	if created.State == job.StateQueued {
		if delay < 0 {
			delay = 0
		}
		if err := e.sendControl(ctx, job.OpSlice, created.ID, delay); err != nil {
			// The job is durable; the sweeper re-drives queued jobs whose
			// slice task went missing, so the submission still stands.
			e.log.Warn("enqueue slice task failed; the sweeper will retry", "job", created.ID, "err", err)
		}
	}
	if created.State == job.StateWaiting {
		e.followUpNow(ctx, created)
		if cur, err := e.store.GetJob(ctx, created.ID); err == nil {
			created = cur
		}
	}
	return created, nil
}

func (e *Engine) deleteBlocks(ctx context.Context, id string) {
	infos, err := e.blobs.List(ctx, BlocksPrefix(id)+"/")
	if err != nil {
		return
	}
	for _, i := range infos {
		_ = e.blobs.Delete(ctx, i.Key)
	}
}

func (e *Engine) sendControl(ctx context.Context, op, id string, delay time.Duration) error {
	return e.sendTask(ctx, job.ControlTask{Op: op, JobID: id}, delay)
}

func (e *Engine) sendTask(ctx context.Context, t job.ControlTask, delay time.Duration) error {
	body, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return e.queue.Send(ctx, e.queues.Slice(), queue.Outgoing{Body: body, Delay: delay})
}

// validate checks req and builds the job it describes, without writing.
func (e *Engine) validate(ctx context.Context, req Request, now time.Time) (*job.Job, error) {
	req, err := applyDelay(req, now)
	if err != nil {
		return nil, err
	}
	if req.Kind == "" {
		return nil, invalid("kind", "is required")
	}
	reg, ok := e.reg.lookup(req.Kind)
	if !ok {
		return nil, invalid("kind", "unknown kind %q (registered: %v)", req.Kind, e.reg.Kinds())
	}
	if _, err := reg.decode(req.Args); err != nil {
		return nil, err
	}
	j := &job.Job{
		Kind: req.Kind, Args: compactArgs(req.Args), Input: req.Input, Channel: reg.opts.Channel,
		UniqueKey: req.UniqueKey, Tags: req.Tags, ChunkSize: req.ChunkSize, MaxAttempts: reg.opts.MaxAttempts,
		TolerateFailedPct: reg.opts.TolerateFailedPct, Parent: req.Parent, CreatedAt: now, UpdatedAt: now,
	}
	if req.Channel != "" {
		if !contains(e.reg.Channels(), req.Channel) {
			return nil, invalid("channel", "unknown channel %q (channels: %v)", req.Channel, e.reg.Channels())
		}
		j.Channel = req.Channel
	}
	if len(req.UniqueKey) > MaxUniqueKey {
		return nil, invalid("unique_key", "longer than %d bytes", MaxUniqueKey)
	}
	if len(req.Tags) > MaxTags {
		return nil, invalid("tags", "more than %d tags", MaxTags)
	}
	for _, t := range req.Tags {
		if !tagPattern.MatchString(t) {
			return nil, invalid("tags", "tag %q must be 1-64 characters of letters, digits and _.:=/-", t)
		}
	}
	if req.MaxAttempts != 0 {
		if req.MaxAttempts < 1 || req.MaxAttempts > MaxMaxAttempts {
			return nil, invalid("max_attempts", "must be 1..%d", MaxMaxAttempts)
		}
		j.MaxAttempts = req.MaxAttempts
	}
	if p := req.TolerateFailedPct; p != nil {
		if *p < 0 || *p > 100 || *p != *p {
			return nil, invalid("tolerate_failed_pct", "must be 0..100")
		}
		j.TolerateFailedPct = *p
	}
	if req.RunAt != nil {
		if req.RunAt.After(now.Add(MaxRunAhead)) {
			return nil, invalid("run_at", "more than %s ahead", MaxRunAhead)
		}
		t := req.RunAt.UTC()
		j.RunAt = &t
	}
	if req.Parent != "" {
		if _, err := e.store.GetJob(ctx, req.Parent); err != nil {
			return nil, invalid("parent", "job %s: %v", req.Parent, err)
		}
	}
	if req.ChunkSize < 0 {
		return nil, invalid("chunk_size", "must be positive")
	}
	if err := e.validateInput(ctx, reg, j); err != nil {
		return nil, err
	}
	if err := e.validateFlow(ctx, req, j); err != nil {
		return nil, err
	}
	return j, nil
}

func (e *Engine) validateInput(ctx context.Context, reg *registration, j *job.Job) error {
	in := &j.Input
	chunks := int64(0)
	switch in.Type {
	case job.InputLines:
		if j.ChunkSize == 0 {
			j.ChunkSize = pick(reg.opts.ChunkSize, DefaultChunkBytes)
		}
		switch in.Format {
		case "":
			in.Format = job.FormatNDJSON
		case job.FormatNDJSON, job.FormatCSV, job.FormatText:
		default:
			return invalid("input.format", "unknown format %q (ndjson, csv, text)", in.Format)
		}
		if err := fsblob.ValidKey(in.Key); err != nil {
			return invalid("input.key", "%s", strings.TrimSuffix(err.Error(), ": "+job.ErrInvalid.Error()))
		}
		info, err := e.blobs.Head(ctx, in.Key)
		if errors.Is(err, job.ErrNotFound) {
			return invalid("input.key", "object %q not found", in.Key)
		}
		if err != nil {
			return fmt.Errorf("input object %s: %w", in.Key, err)
		}
		chunks = ceilDiv(info.Size, j.ChunkSize)
		if in.Start != 0 || in.End != 0 || in.Items != nil || in.Buckets != nil || in.Spec != nil {
			return invalid("input", "lines input takes only key and format")
		}
	case job.InputIDRange:
		if j.ChunkSize == 0 {
			j.ChunkSize = pick(reg.opts.ChunkSize, DefaultChunkItems)
		}
		if in.Start < -MaxID || in.End > MaxID {
			return invalid("input", "ids must lie within ±%d", int64(MaxID))
		}
		if in.End <= in.Start {
			return invalid("input.end", "id range [%d, %d) is empty", in.Start, in.End)
		}
		if in.Buckets != nil {
			if in.Buckets.Preset != "inverse-log" {
				return invalid("input.buckets.preset", "unknown preset %q (inverse-log)", in.Buckets.Preset)
			}
			if in.Buckets.Count < 1 || in.Buckets.Count > 100_000 {
				return invalid("input.buckets.count", "must be 1..100000")
			}
			chunks = int64(in.Buckets.Count)
		} else {
			chunks = ceilDiv(in.End-in.Start, j.ChunkSize)
		}
		if in.Key != "" || in.Items != nil || in.Spec != nil {
			return invalid("input", "ids input takes only start, end and buckets")
		}
	case job.InputItems:
		if j.ChunkSize == 0 {
			j.ChunkSize = pick(reg.opts.ChunkSize, DefaultChunkItems)
		}
		if len(in.Items) == 0 {
			return invalid("input.items", "is empty")
		}
		if len(in.Items) > MaxItems {
			return invalid("input.items", "more than %d items; upload them as an object and use lines input", MaxItems)
		}
		for i, it := range in.Items {
			if !json.Valid(it) {
				return invalid("input.items", "item %d is not valid JSON", i)
			}
		}
		chunks = ceilDiv(int64(len(in.Items)), j.ChunkSize)
		if in.Key != "" || in.Start != 0 || in.End != 0 || in.Spec != nil || in.Buckets != nil {
			return invalid("input", "items input takes only items")
		}
	case job.InputCustom:
		if j.ChunkSize == 0 {
			j.ChunkSize = pick(reg.opts.ChunkSize, DefaultChunkItems)
		}
		if reg.slice == nil {
			return invalid("input.type", "kind %s has no Slice of its own; use lines, ids or items", reg.kind)
		}
		if in.Spec != nil && !json.Valid(in.Spec) {
			return invalid("input.spec", "is not valid JSON")
		}
	case "":
		return invalid("input.type", "is required (lines, ids, items, custom)")
	default:
		return invalid("input.type", "unknown type %q (lines, ids, items, custom)", in.Type)
	}
	if chunks > MaxChunks {
		return invalid("chunk_size", "input would make %d chunks, more than %d; raise chunk_size", chunks, MaxChunks)
	}
	return nil
}

func compactArgs(raw json.RawMessage) json.RawMessage {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("{}")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return raw
	}
	return b.Bytes()
}

func pick(v, def int64) int64 {
	if v > 0 {
		return v
	}
	return def
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return 0
	}
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
