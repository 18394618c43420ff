package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// ReplaceChunk records the successful attempt a of chunk index of job jobID
// and creates jobs, in one transaction (BEGIN IMMEDIATE): the chunk is
// recorded as RecordAttempt records a success, each job is inserted as
// CreateJob inserts it. If the chunk is already terminal nothing is written
// and Applied is false. A job whose unique key another job holds is left
// out and that job is returned in Existing; the others are written.
//
// SQLite has no transaction size limit, but the port's budget
// (store.FitsReplace) is enforced all the same, so that a fan-out takes the
// same shape on every backend. a.Outcome other than succeeded, a negative
// index, a nil job, jobs over the budget, or repeated ids or unique keys
// yield job.ErrInvalid; a missing job jobID, job.ErrNotFound; an id that
// exists, job.ErrConflict. Nothing is written on error.
func (s *Store) ReplaceChunk(ctx context.Context, jobID string, index int64, a job.Attempt, jobs []*job.Job) (store.Replaced, error) {
	fail := func(format string, args ...any) (store.Replaced, error) {
		return store.Replaced{}, fmt.Errorf("sqlitestore: replace chunk %s/%d: "+format, append([]any{jobID, index}, args...)...)
	}
	if err := store.CheckReplace(a, index, jobs); err != nil {
		return fail("%w", err)
	}
	a.Started = norm(a.Started)
	var out store.Replaced
	err := s.tx(ctx, func(tx *sql.Tx) error {
		rec, err := s.recordTx(ctx, tx, jobID, index, a, job.ChunkSucceeded, nil, sql.NullString{})
		if err != nil {
			return err
		}
		out = store.Replaced{Applied: rec.Applied, Chunk: rec.Chunk}
		if !rec.Applied {
			return nil
		}
		for _, j := range jobs {
			created, err := insertJob(ctx, tx, j)
			switch {
			case errors.Is(err, job.ErrDuplicate):
				out.Existing = append(out.Existing, created)
			case err != nil:
				return err
			default:
				out.Created = append(out.Created, created)
			}
		}
		return nil
	})
	if err != nil {
		return fail("%w", err)
	}
	return out, nil
}
