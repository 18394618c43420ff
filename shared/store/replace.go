package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/slicework/slicework/shared/job"
)

// Replaced is the store's answer to ReplaceChunk.
type Replaced struct {
	// Applied is false when the chunk already had a terminal outcome: the
	// call was a duplicate delivery and nothing was written, no job created.
	Applied bool
	// Chunk is the chunk record after the call.
	Chunk *job.Chunk
	// Created are the jobs created, in the order given, as GetJob would
	// return them. Empty when Applied is false.
	Created []*job.Job
	// Existing holds, for every given job whose unique key another job
	// already held, that other job; the given job was not created. Empty
	// when Applied is false.
	Existing []*job.Job
}

// Replacer is the store side of REPLACE: a chunk completes and new jobs
// come into being in one atomic write.
type Replacer interface {
	// ReplaceChunk records the successful attempt a (a.Outcome must be
	// OutcomeSucceeded) of chunk index of job jobID and creates jobs, in
	// one transaction: either the chunk's outcome and every job are
	// written, or nothing is.
	//
	// The chunk's not-yet-terminal condition guards the whole write: if
	// the chunk already has a terminal outcome nothing is written and
	// Applied is false, so a duplicate delivery creates no job twice.
	// Otherwise the chunk becomes succeeded and counts exactly as
	// RecordAttempt counts it, and each job is created as CreateJob
	// creates it (its ID, State and CreatedAt set by the caller). A job
	// whose unique key is held by another job is not created; the holder
	// is returned in Existing and the rest is written.
	//
	// jobs must fit one transaction (FitsReplace), have distinct ids and
	// distinct non-empty unique keys, else job.ErrInvalid and nothing is
	// written. A missing job jobID yields job.ErrNotFound; an id of jobs
	// that exists, job.ErrConflict.
	ReplaceChunk(ctx context.Context, jobID string, index int64, a job.Attempt, jobs []*job.Job) (Replaced, error)
}

// Transaction budget of ReplaceChunk. The port is shaped for DynamoDB,
// whose TransactWriteItems takes at most 100 items and 4 MB; every adapter
// holds callers to the same budget so that a fan-out behaves the same on
// every backend.
const (
	// MaxTransactItems is the most items one transaction writes.
	MaxTransactItems = 100
	// ReplaceChunkItems is what ReplaceChunk reserves for the chunk's own
	// writes: its segment and, when the segment is new, its registration
	// in the job's accounting item.
	ReplaceChunkItems = 2
	// MaxReplaceBytes bounds the JobBytes of the jobs of one ReplaceChunk,
	// well within DynamoDB's 4 MB per transaction.
	MaxReplaceBytes = 2 << 20
)

// JobItems is how many transaction items creating j costs: its job and
// accounting items, its unique-key item if it has a key, and one item per
// distinct tag and per dependency. An adapter that writes more for a job must raise this
// count with it: ReplaceChunk's callers size their batches by it.
func JobItems(j *job.Job) int {
	n := 2 + len(slices.Compact(slices.Sorted(slices.Values(j.Tags))))
	if j.UniqueKey != "" {
		n++
	}
	// One edge item per dependency (see Flow).
	return n + len(j.DependsOn)
}

// JobBytes estimates the bytes that creating j adds to a transaction: its
// arguments, input and tags plus a fixed allowance for the other
// attributes and the item keys.
func JobBytes(j *job.Job) int {
	n := 1024 + len(j.Args) + len(j.Input.Spec) + len(j.Input.Key) + len(j.UniqueKey)
	for _, it := range j.Input.Items {
		n += len(it)
	}
	for _, t := range j.Tags {
		n += 2*len(t) + 64
	}
	return n
}

// FitsReplace reports whether jobs fit one ReplaceChunk: at most
// MaxTransactItems - ReplaceChunkItems items by JobItems and at most
// MaxReplaceBytes by JobBytes. No jobs fit.
func FitsReplace(jobs []*job.Job) bool {
	items, bytes := 0, 0
	for _, j := range jobs {
		items += JobItems(j)
		bytes += JobBytes(j)
	}
	return items <= MaxTransactItems-ReplaceChunkItems && bytes <= MaxReplaceBytes
}

// CheckReplace checks ReplaceChunk's arguments against the port's
// contract: a succeeded attempt, a non-negative index, and non-nil jobs
// with distinct ids and distinct unique keys that fit one transaction. It
// returns an error wrapping job.ErrInvalid, or nil.
func CheckReplace(a job.Attempt, index int64, jobs []*job.Job) error {
	switch {
	case a.Outcome != job.OutcomeSucceeded:
		return fmt.Errorf("outcome %q, want %q: %w", a.Outcome, job.OutcomeSucceeded, job.ErrInvalid)
	case index < 0:
		return fmt.Errorf("negative index: %w", job.ErrInvalid)
	}
	ids, keys := map[string]bool{}, map[string]bool{}
	for i, j := range jobs {
		switch {
		case j == nil:
			return fmt.Errorf("job %d is nil: %w", i, job.ErrInvalid)
		case ids[j.ID]:
			return fmt.Errorf("job id %s given twice: %w", j.ID, job.ErrInvalid)
		case j.UniqueKey != "" && keys[j.UniqueKey]:
			return fmt.Errorf("unique key %q given twice: %w", j.UniqueKey, job.ErrInvalid)
		}
		ids[j.ID], keys[j.UniqueKey] = true, true
	}
	if !FitsReplace(jobs) {
		return fmt.Errorf("%d jobs exceed one transaction (%d items, %d bytes): %w",
			len(jobs), MaxTransactItems-ReplaceChunkItems, MaxReplaceBytes, job.ErrInvalid)
	}
	return nil
}
