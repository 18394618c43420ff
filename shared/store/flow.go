package store

import (
	"context"
	"fmt"
	"time"

	"github.com/slicework/slicework/shared/job"
)

// MaxDependsOn is the most dependencies one job may have. CreateJob writes
// one edge item per dependency in the job's creation transaction, which
// DynamoDB bounds at MaxTransactItems items; 50 leaves room for the job's
// own items and tags.
const MaxDependsOn = 50

// Edge is one dependency edge, seen from the dependency: Dependant waits for
// the job whose Dependants listed it.
type Edge struct {
	// Dependant is the id of the waiting job.
	Dependant string `json:"dependant"`
	// Resolved is true once the dependency's terminal state has been counted
	// in the dependant's DepsPending (see ResolveDependency).
	Resolved bool `json:"resolved"`
}

// Resolution is the store's answer to ResolveDependency.
type Resolution struct {
	// Applied is false when the edge was resolved already: nothing was
	// written.
	Applied bool
	// Job is the dependant after the call.
	Job *job.Job
}

// Flow is the part of the store behind dependencies (fan-in) and the
// durable follow-up work of jobs: releasing a job whose dependencies are
// done, and for a terminal job counting it in its dependants, publishing
// its completion event and calling its callback. Nothing here decides from
// an eventually consistent read.
//
// Every job carries a FollowUp token while the engine owes it work. The
// store sets it in the same write as the change that causes the work:
// CreateJob stores j.FollowUp as given, as set at j.CreatedAt (the engine
// sets one on a job created waiting, whose dependencies it must check once
// the job exists), and Transition to a terminal state sets a new token. The engine clears a
// token with ClearFollowUp once the work is done; a crash before that
// leaves it, and FollowUps finds it again.
//
// Dependency edges are written by CreateJob, in the job's own write: for
// every id in j.DependsOn one unresolved edge, and DepsPending is set to
// len(j.DependsOn) whatever j says. DependsOn must hold at most
// MaxDependsOn distinct, non-empty ids other than j.ID (CheckDependsOn),
// else job.ErrInvalid. The store does not check that the dependencies
// exist (the engine does).
type Flow interface {
	// ResolveDependency counts dependency dep's terminal state in job
	// dependant, exactly once per edge: one atomic write marks the edge
	// resolved, decrements the dependant's DepsPending and, if failure is
	// non-empty and the dependant has no DepFailure yet, sets DepFailure to
	// failure. If the edge is resolved already nothing is written and
	// Applied is false. Returns the dependant after the call. A missing
	// edge or dependant yields job.ErrNotFound.
	ResolveDependency(ctx context.Context, dependant, dep, failure string) (Resolution, error)

	// Dependants lists the edges of the jobs that depend on job id, in
	// dependant id order, read consistently (never from an index). No
	// dependants is an empty list, not an error.
	Dependants(ctx context.Context, id string) ([]Edge, error)

	// FollowUps returns up to limit jobs (0 means job.DefaultPageSize,
	// capped at job.MaxPageSize) whose FollowUp token was set at or before
	// before, oldest first, each read consistently and still carrying a
	// token. A negative limit yields job.ErrInvalid. It may read an
	// eventually consistent index to find them: a token set very recently
	// may be missed until the next call.
	FollowUps(ctx context.Context, before time.Time, limit int) ([]*job.Job, error)

	// ClearFollowUp removes job id's FollowUp token if it is token. If the
	// job has another token (newer work) or none, nothing is written and
	// the error wraps job.ErrConflict; a missing job yields
	// job.ErrNotFound.
	ClearFollowUp(ctx context.Context, id, token string) error
}

// CheckDependsOn reports, wrapping job.ErrInvalid, what makes j.DependsOn
// unacceptable to CreateJob: more than MaxDependsOn ids, an empty id, a
// duplicate, or j's own id. Adapters call it before writing anything.
func CheckDependsOn(j *job.Job) error {
	if len(j.DependsOn) > MaxDependsOn {
		return fmt.Errorf("job %s: %d dependencies, at most %d: %w", j.ID, len(j.DependsOn), MaxDependsOn, job.ErrInvalid)
	}
	seen := make(map[string]bool, len(j.DependsOn))
	for _, d := range j.DependsOn {
		switch {
		case d == "":
			return fmt.Errorf("job %s: empty dependency id: %w", j.ID, job.ErrInvalid)
		case d == j.ID:
			return fmt.Errorf("job %s: depends on itself: %w", j.ID, job.ErrInvalid)
		case seen[d]:
			return fmt.Errorf("job %s: dependency %s listed twice: %w", j.ID, d, job.ErrInvalid)
		}
		seen[d] = true
	}
	return nil
}
