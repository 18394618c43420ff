package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/split"
)

// Args are a kind's typed job arguments. Kind names the registered kind the
// arguments belong to, so Submit(ctx, args) needs no kind string.
type Args interface {
	Kind() string
}

// Validator is implemented by Args that check themselves. A non-nil error
// rejects the submission with a 422 and nothing is written.
type Validator interface {
	Validate() error
}

// Handler processes one chunk of a job. Its return value decides the chunk's
// fate: nil completes it; an error retries it with back-off; RetryIn(d, err)
// retries after d; Permanent(err) fails it at once. A panic is recorded with
// its stack and retried.
type Handler[A Args] interface {
	Process(ctx context.Context, c *Chunk[A]) error
}

// Slicer is implemented by handlers whose kind cuts its own data space
// (input type "custom"). Slice calls emit once per chunk, in index order from
// 0, and must return emit's first error unchanged. It must be deterministic:
// a redelivered slice task runs it again, and so does the continuation of a
// slicer that ran out of budget (the chunks already sent are skipped).
type Slicer[A Args] interface {
	Slice(ctx context.Context, j *Job[A], emit func(in job.ChunkInput, items int64) error) error
}

// Finisher is implemented by handlers with a reduce step. Finish runs once
// every chunk is accounted, before the job reaches its terminal state. It may
// write one result object with Job.WriteResult. It must be idempotent: after a
// crash it runs again.
type Finisher[A Args] interface {
	Finish(ctx context.Context, j *Job[A], s Summary) error
}

// Options configure a kind. Zero fields take the defaults shown.
type Options struct {
	// Channel is the queue the kind's chunks go to ("default").
	Channel string
	// ChunkSize is items per chunk, or bytes per chunk for line objects
	// (1,000 items; 1 MiB).
	ChunkSize int64
	// MaxAttempts bounds the attempts per chunk (5).
	MaxAttempts int
	// Backoff between temporary failures (DefaultBackoff).
	Backoff Backoff
	// Timeout bounds one Process call (1 min).
	Timeout time.Duration
	// TolerateFailedPct is the share of chunks, in percent, that may fail
	// while the job still succeeds (0).
	TolerateFailedPct float64
}

// Defaults for Options.
const (
	DefaultChannel     = "default"
	DefaultChunkItems  = 1000
	DefaultChunkBytes  = 1 << 20
	DefaultMaxAttempts = 5
	DefaultTimeout     = time.Minute
)

// Summary is what Finish learns of the job's chunks.
type Summary struct {
	job.Counters
}

// Job is the typed view of a job that Slice and Finish receive.
type Job[A Args] struct {
	*job.Job
	Args  A
	blobs blob.Store
}

// Outputs calls fn with every chunk output written by Chunk.WriteOutput, in
// chunk index order. Each chunk's latest output counts once.
func (j *Job[A]) Outputs(ctx context.Context, fn func(index int64, r io.Reader) error) error {
	return eachOutput(ctx, j.blobs, j.ID, fn)
}

// WriteResult stores the job's result object under the job's result key and
// records it on the job. Calling it again replaces the object.
func (j *Job[A]) WriteResult(ctx context.Context, name string, r io.Reader) (string, error) {
	key := ResultKey(j.ID, name)
	if err := j.blobs.Put(ctx, key, r); err != nil {
		return "", fmt.Errorf("job %s: write result: %w", j.ID, err)
	}
	j.Result = key
	return key, nil
}

// Blobs returns the blob store, for kinds that read side data.
func (j *Job[A]) Blobs() blob.Store { return j.blobs }

// Chunk is one chunk handed to Process.
type Chunk[A Args] struct {
	// Job is the chunk's job (state as read before processing).
	Job *job.Job
	// Args are the job's typed arguments.
	Args A
	// Task is the chunk's queue message: index and input descriptor.
	Task job.ChunkTask
	// Attempt is the 1-based number of this attempt.
	Attempt int
	blobs   blob.Store
	items   int64
	itemsOK bool
}

// Index is the chunk's 0-based index in its job.
func (c *Chunk[A]) Index() int64 { return c.Task.Index }

// IDs returns the chunk's id range [start, end) (input type "ids").
func (c *Chunk[A]) IDs() (start, end int64) { return c.Task.Input.Start, c.Task.Input.End }

// Lines calls fn for every line of the chunk's byte range (input type
// "lines"), by the line-alignment rule of split.Lines. The lines delivered
// are counted as the chunk's items unless SetItems overrides them.
func (c *Chunk[A]) Lines(ctx context.Context, fn func(line []byte) error) (int64, error) {
	in := c.Task.Input
	info, err := c.blobs.Head(ctx, in.Key)
	if err != nil {
		return 0, fmt.Errorf("chunk %d: %w", c.Task.Index, err)
	}
	n, err := split.Lines(ctx, split.Opener(c.blobs, in.Key), info.Size, split.Range{Start: in.Start, End: in.End}, fn)
	c.items += n
	return n, err
}

// Header returns the CSV header line of the chunk's object, or nil for
// formats without one.
func (c *Chunk[A]) Header(ctx context.Context) ([]byte, error) {
	if c.Task.Input.HeaderEnd == 0 {
		return nil, nil
	}
	return split.Header(ctx, split.Opener(c.blobs, c.Task.Input.Key), c.Task.Input.HeaderEnd)
}

// Items returns the chunk's items (input type "items"), read from its data block.
func (c *Chunk[A]) Items(ctx context.Context) ([]json.RawMessage, error) {
	items, err := split.ReadBlock(ctx, c.blobs, c.Task.Input.Key)
	if err != nil {
		return nil, fmt.Errorf("chunk %d: %w", c.Task.Index, err)
	}
	c.items += int64(len(items))
	return items, nil
}

// SetItems sets how many items the chunk processed, overriding the count
// that Lines, Items or the id range would give.
func (c *Chunk[A]) SetItems(n int64) { c.items, c.itemsOK = n, true }

// WriteOutput stores this chunk's partial output for the Finish step. A retry
// replaces the previous attempt's output, so each chunk counts once.
func (c *Chunk[A]) WriteOutput(ctx context.Context, r io.Reader) error {
	if err := c.blobs.Put(ctx, OutputKey(c.Task.JobID, c.Task.Index), r); err != nil {
		return fmt.Errorf("chunk %d: write output: %w", c.Task.Index, err)
	}
	return nil
}

// WriteOutputJSON is WriteOutput of v encoded as JSON.
func (c *Chunk[A]) WriteOutputJSON(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("chunk %d: encode output: %w", c.Task.Index, err)
	}
	return c.WriteOutput(ctx, bytes.NewReader(b))
}

// itemCount is what the engine records as the chunk's items.
func (c *Chunk[A]) itemCount() int64 {
	if c.itemsOK || c.items > 0 {
		return c.items
	}
	if c.Task.Items > 0 {
		return c.Task.Items
	}
	return 0
}

// Blob keys of a job's data.
func jobPrefix(id string) string { return "jobs/" + id }

// BlocksPrefix is where an item list's data blocks live.
func BlocksPrefix(id string) string { return jobPrefix(id) + "/blocks" }

// OutputKey is where chunk index's output lives.
func OutputKey(id string, index int64) string {
	return fmt.Sprintf("%s/out/%010d", jobPrefix(id), index)
}

// ResultKey is where a job's result object named name lives.
func ResultKey(id, name string) string { return jobPrefix(id) + "/result/" + name }

func eachOutput(ctx context.Context, blobs blob.Store, id string, fn func(int64, io.Reader) error) error {
	infos, err := blobs.List(ctx, jobPrefix(id)+"/out/")
	if err != nil {
		return fmt.Errorf("job %s: list outputs: %w", id, err)
	}
	for _, info := range infos {
		var idx int64
		if _, err := fmt.Sscanf(info.Key[len(jobPrefix(id))+5:], "%d", &idx); err != nil {
			return fmt.Errorf("job %s: output key %s: %w", id, info.Key, err)
		}
		rc, err := blobs.Get(ctx, info.Key)
		if err != nil {
			return fmt.Errorf("job %s: read output %d: %w", id, idx, err)
		}
		err = fn(idx, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// registration is the untyped face of a registered kind.
type registration struct {
	kind    string
	opts    Options
	decode  func(raw json.RawMessage) (Args, error)
	process func(ctx context.Context, blobs blob.Store, j *job.Job, a Args, t job.ChunkTask, attempt int) (int64, error)
	slice   func(ctx context.Context, blobs blob.Store, j *job.Job, a Args, emit func(job.ChunkInput, int64) error) error
	finish  func(ctx context.Context, blobs blob.Store, j *job.Job, a Args, s Summary) (string, error)
}

// Registry maps kind names to handlers. It is safe for concurrent use;
// register every kind before starting the engine.
type Registry struct {
	mu    sync.RWMutex
	kinds map[string]*registration
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{kinds: map[string]*registration{}} }

var kindName = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// ValidName reports whether s may name a kind or a channel: lower-case
// letters, digits, '_', '.', '-', starting with a letter, at most 64 bytes.
func ValidName(s string) bool { return kindName.MatchString(s) }

// ErrKindRegistered is returned when a kind is registered twice.
var ErrKindRegistered = errors.New("kind already registered")

// Register adds h as the handler of A's kind with opts. It fails if the kind
// name is invalid or already registered.
func Register[A Args](r *Registry, h Handler[A], opts Options) error {
	var zero A
	name := zero.Kind()
	if !ValidName(name) {
		return fmt.Errorf("register kind %q: invalid name: %w", name, job.ErrInvalid)
	}
	if opts.Channel == "" {
		opts.Channel = DefaultChannel
	}
	if !ValidName(opts.Channel) {
		return fmt.Errorf("register kind %q: invalid channel %q: %w", name, opts.Channel, job.ErrInvalid)
	}
	if opts.MaxAttempts <= 0 {
		opts.MaxAttempts = DefaultMaxAttempts
	}
	if opts.Backoff == (Backoff{}) {
		opts.Backoff = DefaultBackoff
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.TolerateFailedPct < 0 || opts.TolerateFailedPct > 100 {
		return fmt.Errorf("register kind %q: tolerated failure %v%% not in [0, 100]: %w", name, opts.TolerateFailedPct, job.ErrInvalid)
	}
	reg := &registration{
		kind: name,
		opts: opts,
		decode: func(raw json.RawMessage) (Args, error) {
			var a A
			if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
				raw = json.RawMessage("{}")
			}
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&a); err != nil {
				return nil, &ValidationError{Field: "args", Msg: fmt.Sprintf("kind %s: %v", name, err)}
			}
			if dec.More() {
				return nil, &ValidationError{Field: "args", Msg: fmt.Sprintf("kind %s: trailing data", name)}
			}
			if v, ok := any(a).(Validator); ok {
				if err := v.Validate(); err != nil {
					return nil, &ValidationError{Field: "args", Msg: fmt.Sprintf("kind %s: %v", name, err)}
				}
			}
			return a, nil
		},
		process: func(ctx context.Context, blobs blob.Store, j *job.Job, a Args, t job.ChunkTask, attempt int) (int64, error) {
			c := &Chunk[A]{Job: j, Args: a.(A), Task: t, Attempt: attempt, blobs: blobs}
			err := h.Process(ctx, c)
			return c.itemCount(), err
		},
	}
	if s, ok := h.(Slicer[A]); ok {
		reg.slice = func(ctx context.Context, blobs blob.Store, j *job.Job, a Args, emit func(job.ChunkInput, int64) error) error {
			return s.Slice(ctx, &Job[A]{Job: j, Args: a.(A), blobs: blobs}, emit)
		}
	}
	if f, ok := h.(Finisher[A]); ok {
		reg.finish = func(ctx context.Context, blobs blob.Store, j *job.Job, a Args, s Summary) (string, error) {
			tj := &Job[A]{Job: j, Args: a.(A), blobs: blobs}
			err := f.Finish(ctx, tj, s)
			return tj.Result, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.kinds[name]; ok {
		return fmt.Errorf("register kind %q: %w", name, ErrKindRegistered)
	}
	r.kinds[name] = reg
	return nil
}

// MustRegister is Register that panics on error, for program start-up.
func MustRegister[A Args](r *Registry, h Handler[A], opts Options) {
	if err := Register(r, h, opts); err != nil {
		panic(err)
	}
}

// lookup returns the registration of kind: r's own, else a built-in one
// (FanoutKind), which every engine runs without listing it in Kinds.
func (r *Registry) lookup(kind string) (*registration, bool) {
	r.mu.RLock()
	k, ok := r.kinds[kind]
	r.mu.RUnlock()
	if !ok && r != builtins {
		return builtins.lookup(kind)
	}
	return k, ok
}

// Kinds returns the registered kind names, sorted.
func (r *Registry) Kinds() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.kinds))
	for k := range r.kinds {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Channels returns the channels the registered kinds use, sorted.
func (r *Registry) Channels() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := map[string]bool{DefaultChannel: true}
	for _, k := range r.kinds {
		seen[k.opts.Channel] = true
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}
