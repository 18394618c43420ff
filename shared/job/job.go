// Package job holds the slicework data model: jobs, chunks, chunk tasks,
// attempts and the queries used to find them. It has no behaviour beyond
// validation and derived values, so every adapter and handler can share it.
package job

import (
	"encoding/json"
	"fmt"
	"time"
)

// State is the lifecycle state of a job.
type State string

// Job states. A job moves scheduled → queued → running → finishing → one of
// the terminal states; cancelled can be reached from any non-terminal state.
const (
	// StateScheduled: the job's RunAt is further away than the queue's
	// maximum delay; the sweeper releases it when due.
	StateScheduled State = "scheduled"
	// StateWaiting: the job waits for its dependencies.
	StateWaiting State = "waiting"
	// StateQueued: a slice task is on the slice queue.
	StateQueued State = "queued"
	// StateRunning: the slicer has started; chunks are being processed.
	StateRunning State = "running"
	// StateFinishing: every chunk is accounted; the finish step is pending.
	StateFinishing State = "finishing"
	// StateSucceeded: terminal; all chunks succeeded or failures were tolerated.
	StateSucceeded State = "succeeded"
	// StateFailed: terminal; too many chunks failed, or slicing or finishing failed.
	StateFailed State = "failed"
	// StateCancelled: terminal; cancelled by a user.
	StateCancelled State = "cancelled"
)

// AllStates lists every job state, in lifecycle order.
var AllStates = []State{StateScheduled, StateWaiting, StateQueued, StateRunning, StateFinishing, StateSucceeded, StateFailed, StateCancelled}

// Terminal reports whether s is a final state.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Valid reports whether s is one of the known states.
func (s State) Valid() bool {
	for _, v := range AllStates {
		if s == v {
			return true
		}
	}
	return false
}

// Job is one submitted unit of work: a kind, its arguments, and the data
// space (Input) that the slicer cuts into chunks.
type Job struct {
	ID        string          `json:"id"`
	Kind      string          `json:"kind"`
	Args      json.RawMessage `json:"args,omitempty"`
	Input     Input           `json:"input"`
	Channel   string          `json:"channel"`
	UniqueKey string          `json:"unique_key,omitempty"`
	Tags      []string        `json:"tags,omitempty"`
	// ChunkSize is the number of items (or bytes, for byte-range input) per chunk.
	ChunkSize int64 `json:"chunk_size"`
	// MaxAttempts is how many times a chunk is tried before it fails for good.
	MaxAttempts int `json:"max_attempts"`
	// TolerateFailedPct is the percentage of chunks that may fail while the job still succeeds.
	TolerateFailedPct float64 `json:"tolerate_failed_pct,omitempty"`
	// DependsOn lists the jobs this job waits for (fan-in): it stays
	// waiting until every one of them has reached a terminal state.
	DependsOn []string `json:"depends_on,omitempty"`
	// RunAnyway runs the job when a dependency fails or is cancelled;
	// without it the job then fails with DepFailure.
	RunAnyway bool `json:"run_anyway,omitempty"`
	// CallbackURL, if set, receives the completion event as a POST.
	CallbackURL string `json:"callback_url,omitempty"`
	// DepsPending counts the dependencies that have not finished yet; the
	// store keeps it (see store.Flow).
	DepsPending int `json:"deps_pending,omitempty"`
	// DepFailure describes the first dependency that failed or was
	// cancelled ("dependency <id> failed: <its error>").
	DepFailure string `json:"dependency_failure,omitempty"`
	// FollowUp is the token of follow-up work the engine still owes the
	// job (created waiting: count the dependencies that finished before it
	// existed; terminal: its dependants, completion event and callback);
	// empty when none. It is written in the same write as the change that
	// causes the work, so a crash cannot lose it (see store.Flow).
	FollowUp string `json:"-"`

	State    State      `json:"state"`
	RunAt    *time.Time `json:"run_at,omitempty"`
	Parent   string     `json:"parent,omitempty"`
	Counters Counters   `json:"counters"`
	// Error explains a failed or cancelled job.
	Error string `json:"error,omitempty"`
	// Result is the blob key of the object the kind's Finish step wrote, if any.
	Result string `json:"result,omitempty"`

	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	SlicedAt   *time.Time `json:"sliced_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Counters are a job's accounting. Chunk and item counts change exactly once
// per chunk, whatever the number of deliveries.
type Counters struct {
	// Sliced is true once the slicer has emitted every chunk; ChunksTotal is
	// final from then on.
	Sliced      bool  `json:"sliced"`
	ChunksTotal int64 `json:"chunks_total"`
	// ItemsTotal is known at slice time for id ranges and item lists; for
	// byte ranges it stays 0 (the master does not scan) and ItemsDone tells
	// how many lines the workers read.
	ItemsTotal   int64 `json:"items_total"`
	ChunksDone   int64 `json:"chunks_done"`
	ChunksFailed int64 `json:"chunks_failed"`
	ItemsDone    int64 `json:"items_done"`
	ItemsFailed  int64 `json:"items_failed"`
	// Retries counts attempts that ended in a temporary failure.
	Retries int64 `json:"retries"`
}

// Accounted reports whether every chunk of a fully sliced job has an outcome.
func (c Counters) Accounted() bool {
	return c.Sliced && c.ChunksDone+c.ChunksFailed >= c.ChunksTotal
}

// InputType names the shape of a job's data space.
type InputType string

// Input types.
const (
	// InputLines: a line-oriented object in the blob store, split by byte ranges.
	InputLines InputType = "lines"
	// InputIDRange: the integer ids [Start, End), split by Step or by buckets.
	InputIDRange InputType = "ids"
	// InputItems: an explicit list of items, written as data blocks.
	InputItems InputType = "items"
	// InputCustom: the kind's own Slice decides.
	InputCustom InputType = "custom"
)

// Format names the encoding of a line-oriented object.
type Format string

// Line formats.
const (
	FormatNDJSON Format = "ndjson"
	FormatCSV    Format = "csv"
	FormatText   Format = "text"
)

// Input describes a job's data space. Exactly the fields of its Type are used.
type Input struct {
	Type InputType `json:"type"`
	// Key is the blob key of a line-oriented object (InputLines).
	Key    string `json:"key,omitempty"`
	Format Format `json:"format,omitempty"`
	// Start and End bound an id range [Start, End) (InputIDRange).
	Start int64 `json:"start,omitempty"`
	End   int64 `json:"end,omitempty"`
	// Buckets, if set, splits an id range into uneven buckets instead of by ChunkSize.
	Buckets *Buckets `json:"buckets,omitempty"`
	// Items is an explicit list (InputItems).
	Items []json.RawMessage `json:"items,omitempty"`
	// Spec is free-form input for a kind's own Slice (InputCustom).
	Spec json.RawMessage `json:"spec,omitempty"`
}

// Buckets asks for uneven id buckets.
type Buckets struct {
	// Preset is "inverse-log": large buckets of old (low) ids, small buckets
	// of new (high) ids. Kinds may instead supply a weight function in code.
	Preset string `json:"preset"`
	// Count is the number of buckets.
	Count int `json:"count"`
}

// ChunkTask is the message body of one chunk on a channel queue. It carries
// everything the worker needs, so processing a chunk reads no job state
// beyond a cancellation check.
type ChunkTask struct {
	JobID string `json:"job"`
	Kind  string `json:"kind"`
	Index int64  `json:"i"`
	// Items is the number of items in the chunk when known at slice time, else 0.
	Items int64      `json:"n,omitempty"`
	Input ChunkInput `json:"in"`
}

// ChunkInput describes one chunk's slice of the data space.
type ChunkInput struct {
	// Key is the blob key of the object (lines) or data block (items).
	Key    string `json:"key,omitempty"`
	Format Format `json:"fmt,omitempty"`
	// Start and End are a byte range for lines, an id range for ids.
	Start int64 `json:"s"`
	End   int64 `json:"e"`
	// HeaderEnd is the byte length of a CSV header line (0 for none).
	HeaderEnd int64 `json:"h,omitempty"`
	// Data is free-form input emitted by a kind's own Slice.
	Data json.RawMessage `json:"d,omitempty"`
}

// ControlTask is a message on the slice (control) queue.
type ControlTask struct {
	// Op is "slice" or "finish".
	Op    string `json:"op"`
	JobID string `json:"job"`
	// From is the first chunk index a slice task emits; a slicer that runs
	// out of budget enqueues a task that continues from where it stopped.
	From int64 `json:"from,omitempty"`
	// Items counts the items of the chunks before From.
	Items int64 `json:"items,omitempty"`
	// To, when above 0, makes this a sub-slice task: it covers only the
	// chunk indices [From, To) of a plan-based input, whose totals the job's
	// first slice task has already recorded (recursive slicing).
	To int64 `json:"to,omitempty"`
}

// Control operations.
const (
	OpSlice  = "slice"
	OpFinish = "finish"
)

// ChunkState is the state of one chunk record.
type ChunkState string

// Chunk states. A chunk with no record yet is pending.
const (
	ChunkPending   ChunkState = "pending"
	ChunkRetrying  ChunkState = "retrying"
	ChunkSucceeded ChunkState = "succeeded"
	ChunkFailed    ChunkState = "failed"
)

// Terminal reports whether s is final.
func (s ChunkState) Terminal() bool { return s == ChunkSucceeded || s == ChunkFailed }

// Chunk is the record of one chunk: its outcome and every attempt.
type Chunk struct {
	JobID    string     `json:"job_id"`
	Index    int64      `json:"index"`
	State    ChunkState `json:"state"`
	Items    int64      `json:"items"`
	Attempts []Attempt  `json:"attempts"`
	// RetryAt is when a retry longer than the queue's visibility limit is due.
	RetryAt *time.Time `json:"retry_at,omitempty"`
	// Task is kept while a long retry waits in the store.
	Task      *ChunkTask `json:"task,omitempty"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// Outcome is what one attempt of a chunk came to.
type Outcome string

// Attempt outcomes.
const (
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeRetry: temporary failure; the chunk will be tried again.
	OutcomeRetry Outcome = "retry"
	// OutcomeFailed: permanent failure, or out of attempts.
	OutcomeFailed Outcome = "failed"
)

// Attempt is one run of a chunk handler.
type Attempt struct {
	// N is the 1-based attempt number, assigned by the store.
	N       int       `json:"n"`
	Outcome Outcome   `json:"outcome"`
	Worker  string    `json:"worker"`
	Started time.Time `json:"started"`
	// Duration of the handler call.
	Duration time.Duration `json:"duration_ns"`
	// Items processed by a successful attempt; for a failed attempt, the
	// chunk's item count when known at slice time (it feeds ItemsFailed).
	Items int64  `json:"items,omitempty"`
	Error string `json:"error,omitempty"`
	// Stack is set when the handler panicked.
	Stack string `json:"stack,omitempty"`
	// RetryAfter is the delay before the next attempt (OutcomeRetry).
	RetryAfter time.Duration `json:"retry_after_ns,omitempty"`
}

// Query selects jobs for listing. Zero fields do not filter.
type Query struct {
	Kind  string
	State State
	Tag   string
	// Parent selects the children of one job: the jobs whose Parent is
	// this id (jobs submitted by its Replace, or with parent set).
	Parent string
	// CreatedAfter and CreatedBefore bound CreatedAt (inclusive, exclusive).
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// RunAtBefore selects jobs whose RunAt is at or before the instant (for the sweeper).
	RunAtBefore time.Time
	// UpdatedBefore selects jobs last updated before the instant (for the sweeper).
	UpdatedBefore time.Time
	// Limit is the page size; adapters cap it at MaxPageSize and default to DefaultPageSize.
	Limit int
	// Cursor continues a previous page; it is opaque.
	Cursor string
}

// Page sizes for listings.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// PageSize applies the listing defaults and cap to a requested limit: 0
// means DefaultPageSize, more than MaxPageSize means MaxPageSize, and a
// negative limit is an error wrapping ErrInvalid.
func PageSize(limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, fmt.Errorf("negative limit %d: %w", limit, ErrInvalid)
	case limit == 0:
		return DefaultPageSize, nil
	case limit > MaxPageSize:
		return MaxPageSize, nil
	}
	return limit, nil
}

// Page is one page of jobs, newest first. Next is empty on the last page.
type Page struct {
	Jobs []*Job `json:"jobs"`
	Next string `json:"next,omitempty"`
}

// ChunkQuery selects chunk records of one job. Only recorded chunks (those
// with at least one finished attempt) are listed, in index order.
type ChunkQuery struct {
	State  ChunkState
	Limit  int
	Cursor string
}

// ChunkPage is one page of chunk records. Next is empty on the last page.
type ChunkPage struct {
	Chunks []*Chunk `json:"chunks"`
	Next   string   `json:"next,omitempty"`
}
