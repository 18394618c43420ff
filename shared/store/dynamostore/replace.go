package dynamostore

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// ReplaceChunk records the successful attempt a of chunk index of job jobID
// and creates jobs in ONE TransactWriteItems:
//
//   - the chunk's segment: SET r<x> on condition that x is not terminal
//     (the same write as RecordAttempt's fast path), or, for the first
//     chunk of a segment, the segment's creation and its registration in
//     the accounting item: 1 or 2 items (store.ReplaceChunkItems);
//   - per job, the items CreateJob writes: the job item and the accounting
//     item, the unique-key item if it has a key, one item per distinct tag
//     (store.JobItems). The children index (ByParent) is a GSI on the job
//     item, so lineage costs no item.
//
// DynamoDB takes at most 100 items per transaction, so one call carries at
// most 49 jobs without unique keys or tags (98 items), 32 with a unique key
// each; callers size batches with store.FitsReplace, and a call over the
// budget yields job.ErrInvalid.
//
// The segment's condition guards the whole transaction: a duplicate
// delivery whose chunk is already terminal cancels it, writes nothing and
// gets Applied false. A request whose first try was applied but whose
// answer was lost finds its own run entry in the segment and counts as
// applied (the entry and the call's first job identify it). A job whose
// unique-key item is held is taken out and the transaction tried again
// without it; its holder is returned in Existing.
// After the commit, as after RecordAttempt's fast path, a chunk with a
// retry history has its record's parking cleared and a full segment is
// rolled up; Settle repairs either if the process dies first.
//
// A missing job jobID yields job.ErrNotFound; an id of jobs that exists,
// job.ErrConflict; invalid arguments (store.CheckReplace, and CreateJob's
// rules for each job), job.ErrInvalid.
func (s *Store) ReplaceChunk(ctx context.Context, jobID string, index int64, a job.Attempt, jobs []*job.Job) (store.Replaced, error) {
	fail := func(err error) (store.Replaced, error) {
		return store.Replaced{}, fmt.Errorf("dynamostore: replace chunk %s/%d: %w", jobID, index, err)
	}
	if err := store.CheckReplace(a, index, jobs); err != nil {
		return fail(err)
	}
	writes := make([]*newJob, len(jobs))
	for i, j := range jobs {
		w, err := s.jobWrites(j)
		if err != nil {
			return fail(err)
		}
		writes[i] = w
	}
	a.N = 0
	a.Started = norm(a.Started)
	now := norm(s.clock.Now())
	k, x := segOf(index)
	entry := encodeRun(a, now)
	set := expression.Set(expression.Name(runAttr(x)), expression.Value(entry))

	held := make([]bool, len(jobs))
	var existing []*job.Job
	create, applied := false, false
	for round := 0; round < maxRounds+len(jobs) && !applied; round++ {
		items, err := s.segWrites(jobID, k, x, set, create)
		if err != nil {
			return fail(err)
		}
		at := make([]int, len(jobs))
		for i, w := range writes {
			if !held[i] {
				at[i] = len(items)
				items = append(items, w.items...)
			}
		}
		if len(items) > store.MaxTransactItems {
			return fail(fmt.Errorf("%d transaction items, over %d: %w", len(items), store.MaxTransactItems, job.ErrInvalid))
		}
		reasons, err := s.transact(ctx, items)
		if err != nil {
			return fail(err)
		}
		if reasons == nil {
			applied = true
			break
		}
		if failedAt(reasons, 0) {
			if create {
				create = false // someone created the segment first
				continue
			}
			old := reasons[0].Item
			if len(old) == 0 {
				if old, err = s.getItem(ctx, segKey(jobID, k)); err != nil {
					return fail(err)
				}
			}
			if len(old) == 0 {
				create = true
				continue
			}
			g, err := decodeSegment(old)
			if err != nil {
				return fail(err)
			}
			mine, err := s.ownWrite(ctx, g, x, entry, jobs, held)
			if err != nil {
				return fail(err)
			}
			switch {
			case mine:
				// Applied by an earlier try of this call whose answer was
				// lost: the jobs not held were written with it.
				applied = true
			case g.terminal(x):
				rec, err := s.duplicate(ctx, jobID, index, g)
				if err != nil {
					return fail(err)
				}
				return store.Replaced{Applied: false, Chunk: rec.Chunk}, nil
			case x >= g.size:
				return fail(fmt.Errorf("index beyond the sliced total (last segment holds %d chunks): %w", g.size, job.ErrInvalid))
			}
			continue // applied, or the condition failed on a state that has passed
		}
		if create && failedAt(reasons, 1) {
			return fail(fmt.Errorf("job: %w", job.ErrNotFound))
		}
		progress := false
		for i, w := range writes {
			if held[i] {
				continue
			}
			if w.uniqueAt >= 0 && failedAt(reasons, at[i]+w.uniqueAt) {
				holder, err := s.uniqueHolder(ctx, jobs[i].UniqueKey, reasons[at[i]+w.uniqueAt].Item)
				if err != nil {
					return fail(err)
				}
				held[i], progress = true, true
				existing = append(existing, holder)
				continue
			}
			if failedAt(reasons, at[i]+w.jobAt) {
				return fail(fmt.Errorf("job %s: id exists: %w", jobs[i].ID, job.ErrConflict))
			}
		}
		if !progress {
			return fail(fmt.Errorf("transaction cancelled: %v", reasonCodes(reasons)))
		}
	}
	if !applied {
		return fail(fmt.Errorf("segment %d kept changing", k))
	}
	if err := s.crashPoint("replaced"); err != nil {
		return store.Replaced{}, err
	}
	segItem, err := s.getItem(ctx, segKey(jobID, k))
	if err != nil {
		return fail(fmt.Errorf("read back: %w", err))
	}
	rec, err := s.afterSuccess(ctx, jobID, index, a, segItem, now)
	if err != nil {
		return fail(err)
	}
	out := store.Replaced{Applied: true, Chunk: rec.Chunk, Existing: existing}
	for i, w := range writes {
		if held[i] {
			continue
		}
		j, err := w.created(jobs[i])
		if err != nil {
			return fail(err)
		}
		out.Created = append(out.Created, j)
	}
	return out, nil
}

// ownWrite reports whether slot x of segment g was made terminal by an
// earlier try of this very call: the slot holds this call's run entry and,
// if the call creates a job, the first of them exists (its id is this
// call's own, so a duplicate delivery with an identical entry is not taken
// for it).
func (s *Store) ownWrite(ctx context.Context, g *segment, x int, entry string, jobs []*job.Job, held []bool) (bool, error) {
	if g.runs[x] != entry {
		return false, nil
	}
	for i, j := range jobs {
		if held[i] {
			continue
		}
		item, err := s.getItem(ctx, jobKey(j.ID))
		if err != nil {
			return false, err
		}
		return item != nil, nil
	}
	return true, nil
}
