// Package store is the port for durable job state: jobs, unique keys and the
// per-chunk outcome records that make accounting exactly-once.
// Adapters: sqlitestore (embedded) and, for AWS, DynamoDB.
//
// The contract is shaped for DynamoDB: every method is one conditional write
// (or one transaction of at most 100 items) or a read, and no method needs a
// scan. Adapters must not put every chunk's completion on one hot record: a
// job's Counters may be kept in several records (per chunk segment, say) and
// added up when the job is read. RecordAttempt does not change the job's
// UpdatedAt.
package store

import (
	"context"
	"time"

	"github.com/slicework/slicework/shared/job"
)

// Patch holds the fields a transition may change alongside the state.
// Nil fields are left as they are.
type Patch struct {
	Error      *string
	Result     *string
	RunAt      *time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
}

// Recorded is the store's answer to RecordAttempt.
type Recorded struct {
	// Applied is false when the chunk already had a terminal outcome: the
	// attempt was a duplicate delivery and nothing was written.
	Applied bool
	// Chunk is the chunk record after the call.
	Chunk *job.Chunk
}

// Store holds job state. Implementations are safe for concurrent use by
// many processes sharing the same backend.
type Store interface {
	// CreateJob inserts j, whose ID, State and CreatedAt are set by the caller.
	// If j.UniqueKey is held by another job (in any state), nothing is written
	// and the existing job is returned with an error wrapping job.ErrDuplicate.
	// An existing id yields job.ErrConflict.
	CreateJob(ctx context.Context, j *job.Job) (*job.Job, error)

	// GetJob returns the job with its current counters, or job.ErrNotFound.
	GetJob(ctx context.Context, id string) (*job.Job, error)

	// ListJobs returns jobs matching q, newest first, one page at a time.
	// Every filter of q is served by an index (Parent by a children index),
	// never by a scan. A malformed cursor yields job.ErrInvalid.
	ListJobs(ctx context.Context, q job.Query) (job.Page, error)

	// Transition moves job id to state to if its current state is one of
	// from, applying p and setting UpdatedAt, atomically. If the state is
	// not in from, nothing is written and the current job is returned with
	// an error wrapping job.ErrConflict. A transition to a terminal state
	// also sets a new FollowUp token, in the same write (see Flow).
	Transition(ctx context.Context, id string, from []job.State, to job.State, p Patch) (*job.Job, error)

	// Touch sets UpdatedAt to now without other changes (the sweeper uses it
	// to mark a job it has just re-driven). job.ErrNotFound if missing.
	Touch(ctx context.Context, id string) error

	// SetSliced records that slicing has emitted every chunk: chunks and
	// items become the job's totals and Counters.Sliced turns true. Calling
	// it again with the same totals is a no-op; different totals yield
	// job.ErrConflict. Returns the job after the call.
	SetSliced(ctx context.Context, id string, chunks, items int64) (*job.Job, error)

	// RecordAttempt records one attempt of chunk index of job jobID,
	// assigning a.N. For a terminal outcome (succeeded or failed) it writes
	// the chunk's outcome and moves the job's counters, exactly once: if the
	// chunk is already terminal nothing is written and Applied is false. For
	// OutcomeRetry it appends to the attempt history and counts a retry;
	// retryAt and task, when retryAt is non-nil, park the chunk until the
	// sweeper releases it (delays past the queue's visibility limit).
	RecordAttempt(ctx context.Context, jobID string, index int64, a job.Attempt, retryAt *time.Time, task *job.ChunkTask) (Recorded, error)

	// Settle makes sure that chunk index's recorded outcome is reflected in
	// the job's counters and returns the job. Adapters that derive counters
	// in a second write (DynamoDB's per-segment roll-up) repair here what a
	// crash between the two writes left behind; it is idempotent. The engine
	// calls it when a duplicate delivery finds the chunk already accounted.
	Settle(ctx context.Context, jobID string, index int64) (*job.Job, error)

	// GetChunk returns one chunk record, or job.ErrNotFound if no attempt
	// of it has been recorded.
	GetChunk(ctx context.Context, jobID string, index int64) (*job.Chunk, error)

	// ListChunks lists a job's chunk records in index order.
	ListChunks(ctx context.Context, jobID string, q job.ChunkQuery) (job.ChunkPage, error)

	// DueRetries returns up to limit parked chunks whose RetryAt is at or
	// before now, oldest first.
	DueRetries(ctx context.Context, now time.Time, limit int) ([]*job.Chunk, error)

	// Replacer: ReplaceChunk completes a chunk and creates jobs atomically
	// (REPLACE; see replace.go).
	Replacer

	// Flow: dependency edges and durable follow-up work (see flow.go).
	Flow

	// ReleaseRetry clears a parked chunk's RetryAt and Task once the sweeper
	// has re-enqueued it. job.ErrConflict if it is no longer parked.
	ReleaseRetry(ctx context.Context, jobID string, index int64) error

	// Close releases resources.
	Close() error
}
