package dynamostore

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// maxRounds bounds the loops that retry a write whose precondition changed
// under it (a segment created or completed concurrently).
const maxRounds = 8

// RecordAttempt records one attempt of chunk index of job jobID, assigning
// a.N (1-based, no gaps) and setting the chunk's UpdatedAt to the clock's
// now; the job's UpdatedAt is not changed.
//
// If the chunk already has a terminal outcome nothing is written and the
// result has Applied false, whatever a's outcome. Otherwise:
//   - OutcomeSucceeded: one conditional UpdateItem of the chunk's segment
//     (plus, the first time the segment is written, a transaction that
//     creates and registers it; and, for a chunk with a retry history, an
//     UpdateItem of its record that clears any parking). The job's
//     ChunksDone grows by 1 and ItemsDone by a.Items.
//   - OutcomeFailed: a transaction of the segment and the chunk record; the
//     job's ChunksFailed grows by 1 and ItemsFailed by a.Items.
//   - OutcomeRetry: a transaction of the segment and the chunk record; the
//     job's Retries grows by 1.
//
// The segment that the attempt completes is rolled up afterwards. The
// chunk's parking is replaced by (retryAt, task), which may only be non-nil
// for OutcomeRetry, where a non-nil retryAt needs a task; any other applied
// attempt therefore clears it. A missing job yields job.ErrNotFound; a
// negative index, an unknown outcome, inconsistent parking arguments, a
// retry time outside 1970..2286 or an index at or beyond the sliced total,
// job.ErrInvalid.
func (s *Store) RecordAttempt(ctx context.Context, jobID string, index int64, a job.Attempt, retryAt *time.Time, task *job.ChunkTask) (store.Recorded, error) {
	fail := func(format string, args ...any) (store.Recorded, error) {
		return store.Recorded{}, fmt.Errorf("dynamostore: record attempt %s/%d: "+format, append([]any{jobID, index}, args...)...)
	}
	switch a.Outcome {
	case job.OutcomeSucceeded, job.OutcomeFailed, job.OutcomeRetry:
	default:
		return fail("unknown outcome %q: %w", a.Outcome, job.ErrInvalid)
	}
	switch {
	case index < 0:
		return fail("negative index: %w", job.ErrInvalid)
	case (retryAt != nil || task != nil) && a.Outcome != job.OutcomeRetry:
		return fail("retry time or task given for outcome %s: %w", a.Outcome, job.ErrInvalid)
	case retryAt != nil && task == nil:
		return fail("parked retry without a task: %w", job.ErrInvalid)
	case retryAt != nil && !keyTimeOK(*retryAt):
		return fail("retry time %v outside 1970..2286: %w", *retryAt, job.ErrInvalid)
	}
	a.N = 0
	a.Started = norm(a.Started)
	now := norm(s.clock.Now())
	var (
		rec store.Recorded
		err error
	)
	if a.Outcome == job.OutcomeSucceeded {
		rec, err = s.recordSuccess(ctx, jobID, index, a, now)
	} else {
		rec, err = s.recordHistory(ctx, jobID, index, a, retryAt, task, now)
	}
	if err != nil {
		return fail("%w", err)
	}
	return rec, nil
}

// notTerminal is the condition that slot x of a segment has no outcome and
// lies within the segment's size.
func notTerminal(x int) expression.ConditionBuilder {
	return expression.AttributeNotExists(expression.Name(runAttr(x))).
		And(expression.AttributeNotExists(expression.Name(failedAttr(x)))).
		And(expression.AttributeNotExists(expression.Name(attrSize)).Or(expression.Name(attrSize).GreaterThan(expression.Value(x))))
}

// recordSuccess is the fast path: one UpdateItem of the segment.
func (s *Store) recordSuccess(ctx context.Context, jobID string, index int64, a job.Attempt, now time.Time) (store.Recorded, error) {
	k, x := segOf(index)
	entry := encodeRun(a, now)
	set := expression.Set(expression.Name(runAttr(x)), expression.Value(entry))
	for range maxRounds {
		cond := expression.AttributeExists(expression.Name(AttrPK)).And(notTerminal(x))
		item, err := s.updateItem(ctx, update{key: segKey(jobID, k), upd: set, cond: &cond, ret: types.ReturnValueAllNew})
		if err == nil {
			return s.afterSuccess(ctx, jobID, index, a, item, now)
		}
		old, ok := condFailed(err)
		if !ok {
			return store.Recorded{}, err
		}
		if len(old) == 0 {
			// DynamoDB returns the item when it exists; read it in case
			// the service did not.
			if old, err = s.getItem(ctx, segKey(jobID, k)); err != nil {
				return store.Recorded{}, err
			}
		}
		if len(old) > 0 {
			g, err := decodeSegment(old)
			if err != nil {
				return store.Recorded{}, err
			}
			switch {
			case g.runs[x] == entry:
				// Our own write, applied by an earlier try of this call
				// whose answer was lost.
				return s.afterSuccess(ctx, jobID, index, a, old, now)
			case g.terminal(x):
				return s.duplicate(ctx, jobID, index, g)
			case x >= g.size:
				return store.Recorded{}, fmt.Errorf("index beyond the sliced total (last segment holds %d chunks): %w", g.size, job.ErrInvalid)
			}
			continue // the condition failed on a state that has passed
		}
		res, _, err := s.segTx(ctx, jobID, k, x, set, true, nil)
		if err != nil {
			return store.Recorded{}, err
		}
		if res == txOK {
			created := segKey(jobID, k)
			created[runAttr(x)] = avS(entry)
			return s.afterSuccess(ctx, jobID, index, a, created, now)
		}
		// txSegExists: someone created it first; take the fast path again.
	}
	return store.Recorded{}, fmt.Errorf("segment %d kept changing", k)
}

// afterSuccess finishes an applied successful attempt from the segment as
// the write left it: it clears the parking of a chunk with a history and
// rolls the segment up if it is full.
func (s *Store) afterSuccess(ctx context.Context, jobID string, index int64, a job.Attempt, segItem map[string]types.AttributeValue, now time.Time) (store.Recorded, error) {
	k, x := segOf(index)
	g, err := decodeSegment(segItem)
	if err != nil {
		return store.Recorded{}, err
	}
	var r *record
	if g.hist[x] > 0 {
		if err := s.crashPoint("unpark"); err != nil {
			return store.Recorded{}, err
		}
		if r, err = s.unpark(ctx, jobID, index, job.ChunkSucceeded, a.Items, now); err != nil {
			return store.Recorded{}, err
		}
	}
	if g.full() {
		if err := s.rollUp(ctx, jobID, k, g); err != nil {
			return store.Recorded{}, err
		}
	}
	c, err := buildChunk(jobID, index, g, r)
	if err != nil {
		return store.Recorded{}, err
	}
	return store.Recorded{Applied: true, Chunk: c}, nil
}

// unpark marks the record of a chunk that became terminal with its state
// and items and clears its parking, returning the record.
func (s *Store) unpark(ctx context.Context, jobID string, index int64, state job.ChunkState, items int64, now time.Time) (*record, error) {
	upd := expression.Set(expression.Name(attrChunkState), expression.Value(string(state))).
		Set(expression.Name(attrItems), expression.Value(items)).
		Set(expression.Name(attrChunkUpdated), expression.Value(now.UnixMilli()))
	upd = removeParking(upd)
	cond := expression.AttributeExists(expression.Name(AttrPK))
	item, err := s.updateItem(ctx, update{key: recKey(jobID, index), upd: upd, cond: &cond, ret: types.ReturnValueAllNew})
	if _, ok := condFailed(err); ok {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("clear parking: %w", err)
	}
	return decodeRecord(item)
}

func removeParking(upd expression.UpdateBuilder) expression.UpdateBuilder {
	return upd.Remove(expression.Name(attrRetryAt)).Remove(expression.Name(attrTask)).
		Remove(expression.Name(AttrDuePK)).Remove(expression.Name(AttrDueSK))
}

// duplicate answers an attempt of a chunk that is already terminal.
func (s *Store) duplicate(ctx context.Context, jobID string, index int64, g *segment) (store.Recorded, error) {
	var r *record
	_, x := segOf(index)
	if _, failed := g.failed[x]; failed || g.hist[x] > 0 {
		item, err := s.getItem(ctx, recKey(jobID, index))
		if err != nil {
			return store.Recorded{}, err
		}
		if r, err = decodeRecord(item); err != nil {
			return store.Recorded{}, err
		}
	}
	c, err := buildChunk(jobID, index, g, r)
	if err != nil {
		return store.Recorded{}, err
	}
	return store.Recorded{Applied: false, Chunk: c}, nil
}

// recordHistory records a retry or a failed outcome: a transaction of the
// segment (the not-terminal condition, and the count) and the chunk record
// (the attempt and its parking).
func (s *Store) recordHistory(ctx context.Context, jobID string, index int64, a job.Attempt, retryAt *time.Time, task *job.ChunkTask, now time.Time) (store.Recorded, error) {
	k, x := segOf(index)
	enc, err := encodeAttempt(a)
	if err != nil {
		return store.Recorded{}, fmt.Errorf("encode attempt: %v: %w", err, job.ErrInvalid)
	}
	state := job.ChunkRetrying
	segUpd := expression.Add(expression.Name(retriesAttr(x)), expression.Value(1))
	if a.Outcome == job.OutcomeFailed {
		state = job.ChunkFailed
		segUpd = expression.Set(expression.Name(failedAttr(x)), expression.Value(a.Items))
	}
	empty := expression.Value(&types.AttributeValueMemberL{Value: []types.AttributeValue{}})
	appended := expression.Value(&types.AttributeValueMemberL{Value: []types.AttributeValue{avS(enc)}})
	recUpd := expression.Set(expression.Name(attrAttempts), expression.ListAppend(expression.IfNotExists(expression.Name(attrAttempts), empty), appended)).
		Set(expression.Name(attrChunkState), expression.Value(string(state))).
		Set(expression.Name(attrChunkUpdated), expression.Value(now.UnixMilli()))
	if state == job.ChunkFailed {
		recUpd = recUpd.Set(expression.Name(attrItems), expression.Value(a.Items))
	}
	if retryAt != nil {
		t, err := json.Marshal(task)
		if err != nil {
			return store.Recorded{}, fmt.Errorf("encode task: %v: %w", err, job.ErrInvalid)
		}
		at := norm(*retryAt)
		recUpd = recUpd.Set(expression.Name(attrRetryAt), expression.Value(at.UnixMilli())).
			Set(expression.Name(attrTask), expression.Value(string(t))).
			Set(expression.Name(AttrDuePK), expression.Value(dueRetries)).
			Set(expression.Name(AttrDueSK), expression.Value(dueRetrySK(at, jobID, index)))
	} else {
		recUpd = removeParking(recUpd)
	}
	recTx, err := s.txUpdate(update{key: recKey(jobID, index), upd: recUpd})
	if err != nil {
		return store.Recorded{}, err
	}
	create := false
	applied := false
	for round := 0; round < maxRounds && !applied; round++ {
		res, g, err := s.segTx(ctx, jobID, k, x, segUpd, create, []types.TransactWriteItem{recTx})
		if err != nil {
			return store.Recorded{}, err
		}
		switch res {
		case txOK:
			applied = true
		case txSegMissing:
			create = true
		case txSegExists:
			create = false
		case txTerminal:
			return s.duplicate(ctx, jobID, index, g)
		case txBeyond:
			return store.Recorded{}, fmt.Errorf("index beyond the sliced total (last segment holds %d chunks): %w", g.size, job.ErrInvalid)
		}
	}
	if !applied {
		return store.Recorded{}, fmt.Errorf("segment %d kept changing", k)
	}
	items, err := s.batchGet(ctx, []map[string]types.AttributeValue{segKey(jobID, k), recKey(jobID, index)})
	if err != nil {
		return store.Recorded{}, fmt.Errorf("read back: %w", err)
	}
	g, err := decodeSegment(items[keyString(segKey(jobID, k))])
	if err != nil {
		return store.Recorded{}, err
	}
	r, err := decodeRecord(items[keyString(recKey(jobID, index))])
	if err != nil {
		return store.Recorded{}, err
	}
	if state == job.ChunkFailed && g.full() {
		if err := s.rollUp(ctx, jobID, k, g); err != nil {
			return store.Recorded{}, err
		}
	}
	c, err := buildChunk(jobID, index, g, r)
	if err != nil {
		return store.Recorded{}, err
	}
	return store.Recorded{Applied: true, Chunk: c}, nil
}

// txResult is the outcome of segTx.
type txResult int

const (
	txOK         txResult = iota
	txSegMissing          // the segment does not exist (create was false)
	txSegExists           // the segment exists (create was true)
	txTerminal            // the chunk is already terminal
	txBeyond              // the chunk lies beyond the last segment's size
)

// segTx applies segUpd to segment k of job jobID in a transaction with
// extra items. With create false it requires the segment to exist and
// chunk slot x not to be terminal; with create true it requires the
// segment not to exist and registers it in the accounting item (in the open
// map o, and its block in hb), which requires the job.
// A missing job yields job.ErrNotFound.
func (s *Store) segTx(ctx context.Context, jobID string, k int64, x int, segUpd expression.UpdateBuilder, create bool, extra []types.TransactWriteItem) (txResult, *segment, error) {
	for range maxRounds {
		items, err := s.segWrites(jobID, k, x, segUpd, create)
		if err != nil {
			return 0, nil, err
		}
		items = append(items, extra...)
		reasons, err := s.transact(ctx, items)
		if err != nil {
			return 0, nil, err
		}
		if reasons == nil {
			return txOK, nil, nil
		}
		if failedAt(reasons, 0) {
			if create {
				return txSegExists, nil, nil
			}
			old := reasons[0].Item
			if len(old) == 0 {
				if old, err = s.getItem(ctx, segKey(jobID, k)); err != nil {
					return 0, nil, err
				}
			}
			if len(old) == 0 {
				return txSegMissing, nil, nil
			}
			g, err := decodeSegment(old)
			if err != nil {
				return 0, nil, err
			}
			switch {
			case g.terminal(x):
				return txTerminal, g, nil
			case x >= g.size:
				return txBeyond, g, nil
			}
			continue // the condition failed on a state that has passed
		}
		if create && failedAt(reasons, 1) {
			return 0, nil, fmt.Errorf("job: %w", job.ErrNotFound)
		}
		return 0, nil, fmt.Errorf("segment %d: transaction cancelled: %v", k, reasonCodes(reasons))
	}
	return 0, nil, fmt.Errorf("segment %d kept changing", k)
}

// segWrites returns the transaction items that apply segUpd to slot x of
// segment k of job jobID. With create false: one update of the segment,
// conditional on its existence and on x not being terminal. With create
// true: the segment's creation, conditional on its absence, and its
// registration in the accounting item (open map o, block set hb),
// conditional on the job. store.ReplaceChunkItems counts them.
func (s *Store) segWrites(jobID string, k int64, x int, segUpd expression.UpdateBuilder, create bool) ([]types.TransactWriteItem, error) {
	cond := expression.AttributeExists(expression.Name(AttrPK)).And(notTerminal(x))
	if create {
		cond = expression.AttributeNotExists(expression.Name(AttrPK))
	}
	segItem, err := s.txUpdate(update{key: segKey(jobID, k), upd: segUpd, cond: &cond})
	if err != nil {
		return nil, err
	}
	items := []types.TransactWriteItem{segItem}
	if create {
		upd := expression.Set(openName(k), expression.Value(1)).
			Add(expression.Name(attrBlocks), expression.Value(&types.AttributeValueMemberNS{Value: []string{strconv.FormatInt(k/blockSize, 10)}}))
		acond := expression.AttributeExists(expression.Name(AttrPK))
		acctItem, err := s.txUpdate(update{key: acctKey(jobID), upd: upd, cond: &acond})
		if err != nil {
			return nil, err
		}
		items = append(items, acctItem)
	}
	return items, nil
}

// Settle repairs what a crash between two writes can leave behind for
// chunk index and returns the job (job.ErrNotFound if it is missing): it
// rolls up the chunk's segment if it is full and not rolled up yet, and
// clears the parking of a terminal chunk whose record still has it. A
// segment is registered in the same transaction that creates it, so there
// is never an unregistered one to repair. Settle is idempotent and writes
// nothing when there is nothing to repair.
func (s *Store) Settle(ctx context.Context, jobID string, index int64) (*job.Job, error) {
	if index < 0 {
		return nil, fmt.Errorf("dynamostore: settle %s/%d: negative index: %w", jobID, index, job.ErrInvalid)
	}
	g, r, err := s.readChunk(ctx, jobID, index)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: settle %s/%d: %w", jobID, index, err)
	}
	if err := s.repair(ctx, jobID, index, g, r); err != nil {
		return nil, fmt.Errorf("dynamostore: settle %s/%d: %w", jobID, index, err)
	}
	if g.full() {
		k, _ := segOf(index)
		if err := s.rollUp(ctx, jobID, k, g); err != nil {
			return nil, fmt.Errorf("dynamostore: settle %s/%d: %w", jobID, index, err)
		}
	}
	j, err := s.GetJob(ctx, jobID)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: settle: %w", err)
	}
	return j, nil
}

// repair clears the parking of a chunk whose segment says it is terminal
// but whose record is still parked (a crash before unpark).
func (s *Store) repair(ctx context.Context, jobID string, index int64, g *segment, r *record) error {
	_, x := segOf(index)
	if r == nil || (r.retryAt == nil && r.task == nil) || !g.terminal(x) {
		return nil
	}
	c, err := buildChunk(jobID, index, g, nil)
	if err != nil {
		return err
	}
	_, err = s.unpark(ctx, jobID, index, c.State, c.Items, norm(s.clock.Now()))
	return err
}

// readChunk reads chunk index's segment and record, consistently.
func (s *Store) readChunk(ctx context.Context, jobID string, index int64) (*segment, *record, error) {
	k, _ := segOf(index)
	items, err := s.batchGet(ctx, []map[string]types.AttributeValue{segKey(jobID, k), recKey(jobID, index)})
	if err != nil {
		return nil, nil, err
	}
	g, err := decodeSegment(items[keyString(segKey(jobID, k))])
	if err != nil {
		return nil, nil, err
	}
	r, err := decodeRecord(items[keyString(recKey(jobID, index))])
	if err != nil {
		return nil, nil, err
	}
	return g, r, nil
}

// GetChunk returns the record of chunk index of job jobID, merged from its
// segment and its chunk record, or an error wrapping job.ErrNotFound if the
// job does not exist or no attempt of the chunk has been recorded.
func (s *Store) GetChunk(ctx context.Context, jobID string, index int64) (*job.Chunk, error) {
	if index < 0 {
		return nil, fmt.Errorf("dynamostore: get chunk %s/%d: %w", jobID, index, job.ErrNotFound)
	}
	g, r, err := s.readChunk(ctx, jobID, index)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: get chunk %s/%d: %w", jobID, index, err)
	}
	c, err := buildChunk(jobID, index, g, r)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: get chunk %s/%d: %w", jobID, index, err)
	}
	if c == nil {
		return nil, fmt.Errorf("dynamostore: get chunk %s/%d: %w", jobID, index, job.ErrNotFound)
	}
	return c, nil
}

// ListChunks lists the recorded chunks of job jobID in index order, only
// those in q.State if it is set, at most q.Limit per page (DefaultPageSize
// if 0, capped at MaxPageSize). It reads the segments from the cursor on,
// up to the last sliced one (or, while slicing goes on, to the end of the
// highest block of 256 segments with one created), and the records of the
// chunks that have a history. A missing job yields job.ErrNotFound;
// a malformed cursor, a negative limit or an unknown state, job.ErrInvalid.
func (s *Store) ListChunks(ctx context.Context, jobID string, q job.ChunkQuery) (job.ChunkPage, error) {
	fail := func(err error) (job.ChunkPage, error) {
		return job.ChunkPage{}, fmt.Errorf("dynamostore: list chunks %s: %w", jobID, err)
	}
	limit, err := job.PageSize(q.Limit)
	if err != nil {
		return fail(err)
	}
	after := int64(-1)
	if q.Cursor != "" {
		if after, err = decodeChunkCursor(q.Cursor); err != nil {
			return fail(err)
		}
	}
	switch q.State {
	case "", job.ChunkPending, job.ChunkRetrying, job.ChunkSucceeded, job.ChunkFailed:
	default:
		return fail(fmt.Errorf("unknown state %q: %w", q.State, job.ErrInvalid))
	}
	ai, err := s.getItem(ctx, acctKey(jobID))
	if err != nil {
		return fail(err)
	}
	if ai == nil {
		return fail(job.ErrNotFound)
	}
	a, err := decodeAcct(ai)
	if err != nil {
		return fail(err)
	}
	var page job.ChunkPage
	if q.State == job.ChunkPending {
		return page, nil // a recorded chunk is never pending
	}
	last := a.last
	window := min(int64(100), int64(limit)/SegmentSize+2)
	for k := (after + 1) / SegmentSize; k <= last && len(page.Chunks) <= limit; k += window {
		end := min(k+window-1, last)
		var keys []map[string]types.AttributeValue
		for kk := k; kk <= end; kk++ {
			keys = append(keys, segKey(jobID, kk))
		}
		segItems, err := s.batchGet(ctx, keys)
		if err != nil {
			return fail(err)
		}
		segs := map[int64]*segment{}
		var recKeys []map[string]types.AttributeValue
		for kk := k; kk <= end; kk++ {
			g, err := decodeSegment(segItems[keyString(segKey(jobID, kk))])
			if err != nil {
				return fail(err)
			}
			segs[kk] = g
			for x := 0; g != nil && x < SegmentSize; x++ {
				_, failed := g.failed[x]
				if i := kk*SegmentSize + int64(x); i > after && (failed || g.hist[x] > 0) {
					recKeys = append(recKeys, recKey(jobID, i))
				}
			}
		}
		recItems, err := s.batchGet(ctx, recKeys)
		if err != nil {
			return fail(err)
		}
		for kk := k; kk <= end; kk++ {
			g := segs[kk]
			for x := 0; g != nil && x < SegmentSize; x++ {
				i := kk*SegmentSize + int64(x)
				if i <= after || !g.recorded(x) {
					continue
				}
				r, err := decodeRecord(recItems[keyString(recKey(jobID, i))])
				if err != nil {
					return fail(err)
				}
				c, err := buildChunk(jobID, i, g, r)
				if err != nil {
					return fail(err)
				}
				if c != nil && (q.State == "" || c.State == q.State) {
					page.Chunks = append(page.Chunks, c)
				}
			}
		}
	}
	if len(page.Chunks) > limit {
		page.Chunks = page.Chunks[:limit]
		page.Next = encodeChunkCursor(page.Chunks[limit-1].Index)
	}
	return page, nil
}

// DueRetries returns up to limit parked chunks whose RetryAt is at or before
// now, oldest RetryAt first (limit 0 means DefaultPageSize; it is capped at
// MaxPageSize). It queries the Due index and reads each chunk consistently,
// skipping entries the index still shows after a chunk was released or
// completed. A negative limit yields job.ErrInvalid.
func (s *Store) DueRetries(ctx context.Context, now time.Time, limit int) ([]*job.Chunk, error) {
	fail := func(err error) ([]*job.Chunk, error) {
		return nil, fmt.Errorf("dynamostore: due retries: %w", err)
	}
	n, err := job.PageSize(limit)
	if err != nil {
		return fail(err)
	}
	nowMs := now.UnixMilli()
	if nowMs < 0 {
		return nil, nil
	}
	in, err := s.queryBefore(IndexDue, AttrDuePK, dueRetries, AttrDueSK, nowMs, n)
	if err != nil {
		return fail(err)
	}
	var out []*job.Chunk
	for len(out) < n {
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return fail(err)
		}
		type ref struct {
			jobID string
			index int64
		}
		var refs []ref
		var keys []map[string]types.AttributeValue
		for _, item := range res.Items {
			jobID, okJ := strings.CutPrefix(getS(item, AttrPK), "J#")
			idx, okI := strings.CutPrefix(getS(item, AttrSK), "C#")
			i, err := strconv.ParseInt(idx, 10, 64)
			if !okJ || !okI || err != nil {
				continue
			}
			k, _ := segOf(i)
			refs = append(refs, ref{jobID, i})
			keys = append(keys, segKey(jobID, k), recKey(jobID, i))
		}
		items, err := s.batchGet(ctx, keys)
		if err != nil {
			return fail(err)
		}
		for _, rf := range refs {
			k, _ := segOf(rf.index)
			g, err := decodeSegment(items[keyString(segKey(rf.jobID, k))])
			if err != nil {
				return fail(err)
			}
			r, err := decodeRecord(items[keyString(recKey(rf.jobID, rf.index))])
			if err != nil {
				return fail(err)
			}
			if err := s.repair(ctx, rf.jobID, rf.index, g, r); err != nil {
				return fail(err)
			}
			c, err := buildChunk(rf.jobID, rf.index, g, r)
			if err != nil {
				return fail(err)
			}
			if c == nil || c.State != job.ChunkRetrying || c.RetryAt == nil || c.Task == nil || c.RetryAt.After(now) {
				continue
			}
			if out = append(out, c); len(out) == n {
				break
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
	return out, nil
}

// ReleaseRetry clears the parked chunk's RetryAt and Task and sets its
// UpdatedAt, in one UpdateItem conditional on the parking it read. A chunk
// that is recorded but not parked (or parked again meanwhile, or terminal)
// yields job.ErrConflict; one that is not recorded, job.ErrNotFound.
func (s *Store) ReleaseRetry(ctx context.Context, jobID string, index int64) error {
	fail := func(err error) error {
		return fmt.Errorf("dynamostore: release retry %s/%d: %w", jobID, index, err)
	}
	if index < 0 {
		return fail(job.ErrNotFound)
	}
	g, r, err := s.readChunk(ctx, jobID, index)
	if err != nil {
		return fail(err)
	}
	c, err := buildChunk(jobID, index, g, r)
	if err != nil {
		return fail(err)
	}
	if c == nil {
		return fail(job.ErrNotFound)
	}
	if c.State.Terminal() {
		if err := s.repair(ctx, jobID, index, g, r); err != nil {
			return fail(err)
		}
		return fail(fmt.Errorf("chunk is %s: %w", c.State, job.ErrConflict))
	}
	if r == nil || r.retryAt == nil {
		return fail(fmt.Errorf("not parked: %w", job.ErrConflict))
	}
	cond := expression.Name(attrRetryAt).Equal(expression.Value(r.retryAt.UnixMilli()))
	upd := removeParking(expression.Set(expression.Name(attrChunkUpdated), expression.Value(norm(s.clock.Now()).UnixMilli())))
	_, err = s.updateItem(ctx, update{key: recKey(jobID, index), upd: upd, cond: &cond})
	if _, ok := condFailed(err); ok {
		return fail(fmt.Errorf("parking changed: %w", job.ErrConflict))
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// Cursors are base64url (unpadded) of a tag and the last key of the page:
// "l1:<lsk>" for jobs, "c1:<index>" for chunks.
const (
	jobCursorTag   = "l1:"
	chunkCursorTag = "c1:"
)

func encodeJobCursor(lsk string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(jobCursorTag + lsk))
}

func decodeJobCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	lsk, ok := strings.CutPrefix(string(b), jobCursorTag)
	if err == nil && ok {
		if _, valid := idOfListKey(lsk); valid {
			return lsk, nil
		}
	}
	return "", fmt.Errorf("malformed cursor %q: %w", c, job.ErrInvalid)
}

func encodeChunkCursor(index int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(chunkCursorTag + strconv.FormatInt(index, 10)))
}

func decodeChunkCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	s, ok := strings.CutPrefix(string(b), chunkCursorTag)
	if err != nil || !ok {
		return 0, fmt.Errorf("malformed cursor %q: %w", c, job.ErrInvalid)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("malformed cursor %q: %w", c, job.ErrInvalid)
	}
	return n, nil
}
