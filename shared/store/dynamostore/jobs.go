package dynamostore

import (
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// Limits that keep a CreateJob within one transaction and within
// DynamoDB's key sizes.
const (
	maxTags   = 90
	maxKeyLen = 1000
)

// CreateJob inserts j in one transaction: the job item, its accounting
// item, the unique-key item (conditional on attribute_not_exists) and one
// item per distinct tag. Every field is stored; times in UTC at millisecond
// precision; a zero UpdatedAt becomes CreatedAt. An empty UniqueKey means
// no key. j needs an ID without '#', a Kind, a valid State and a CreatedAt
// between 1970 and 2286, at most 90 tags, and ids, kinds, keys and tags of
// at most 1000 bytes, else job.ErrInvalid. If another job holds j.UniqueKey
// that job is returned with an error wrapping job.ErrDuplicate; if j.ID
// exists, job.ErrConflict. Nothing is written in either case.
func (s *Store) CreateJob(ctx context.Context, j *job.Job) (*job.Job, error) {
	w, err := s.jobWrites(j)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: create job: %w", err)
	}
	reasons, err := s.transact(ctx, w.items)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: create job %s: %w", j.ID, err)
	}
	if reasons != nil {
		if w.uniqueAt >= 0 && failedAt(reasons, w.uniqueAt) {
			existing, err := s.uniqueHolder(ctx, j.UniqueKey, reasons[w.uniqueAt].Item)
			if err != nil {
				return nil, fmt.Errorf("dynamostore: create job %s: %w", j.ID, err)
			}
			return existing, fmt.Errorf("dynamostore: create job %s: unique key %q held by job %s: %w", j.ID, j.UniqueKey, existing.ID, job.ErrDuplicate)
		}
		if failedAt(reasons, w.jobAt) {
			return nil, fmt.Errorf("dynamostore: create job %s: id exists: %w", j.ID, job.ErrConflict)
		}
		return nil, fmt.Errorf("dynamostore: create job %s: transaction cancelled: %v", j.ID, reasonCodes(reasons))
	}
	return w.created(j)
}

// newJob is the transaction items that create one job, as CreateJob
// writes them; ReplaceChunk appends them to its own transaction.
type newJob struct {
	items   []types.TransactWriteItem
	jobItem map[string]types.AttributeValue
	// jobAt and uniqueAt are the positions within items of the job item
	// and the unique-key item (-1 if the job has no key); both are
	// conditional on attribute_not_exists.
	jobAt, uniqueAt int
}

// created returns the job that w wrote, with j's counters.
func (w *newJob) created(j *job.Job) (*job.Job, error) {
	out, err := decodeJob(w.jobItem)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: create job %s: %w", j.ID, err)
	}
	out.Counters = j.Counters
	return out, nil
}

// jobWrites checks j against CreateJob's rules and returns the items that
// create it: the job item, its accounting item, the unique-key item and
// one item per distinct tag (store.JobItems counts them).
func (s *Store) jobWrites(j *job.Job) (*newJob, error) {
	if j == nil {
		return nil, fmt.Errorf("nil job: %w", job.ErrInvalid)
	}
	tags := slices.Compact(slices.Sorted(slices.Values(j.Tags)))
	switch {
	case j.ID == "" || strings.Contains(j.ID, "#") || j.Kind == "" || !j.State.Valid() || j.CreatedAt.IsZero():
		return nil, fmt.Errorf("job %q: id without '#', kind, valid state and created_at are required: %w", j.ID, job.ErrInvalid)
	case !keyTimeOK(j.CreatedAt) || (j.RunAt != nil && j.State == job.StateScheduled && !keyTimeOK(*j.RunAt)):
		return nil, fmt.Errorf("job %s: created_at or run_at outside 1970..2286: %w", j.ID, job.ErrInvalid)
	case len(tags) > maxTags:
		return nil, fmt.Errorf("job %s: %d tags, at most %d: %w", j.ID, len(tags), maxTags, job.ErrInvalid)
	case len(j.ID) > maxKeyLen || len(j.Kind) > maxKeyLen || len(j.UniqueKey) > maxKeyLen || len(j.Parent) > maxKeyLen:
		return nil, fmt.Errorf("job %s: id, kind, unique key or parent over %d bytes: %w", j.ID, maxKeyLen, job.ErrInvalid)
	}
	for _, tag := range tags {
		if tag == "" || len(tag) > maxKeyLen {
			return nil, fmt.Errorf("job %s: empty tag or tag over %d bytes: %w", j.ID, maxKeyLen, job.ErrInvalid)
		}
	}
	if err := store.CheckDependsOn(j); err != nil {
		return nil, err
	}
	jobItem, acctItem, err := jobItems(j)
	if err == nil {
		err = putFlow(jobItem, j)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: encode: %v: %w", j.ID, err, job.ErrInvalid)
	}
	notExists, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(AttrPK))).Build()
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", j.ID, err)
	}
	put := func(item map[string]types.AttributeValue, conditional bool) types.TransactWriteItem {
		p := &types.Put{TableName: aws.String(s.table), Item: item}
		if conditional {
			p.ConditionExpression, p.ExpressionAttributeNames = notExists.Condition(), notExists.Names()
			p.ReturnValuesOnConditionCheckFailure = types.ReturnValuesOnConditionCheckFailureAllOld
		}
		return types.TransactWriteItem{Put: p}
	}
	w := &newJob{items: []types.TransactWriteItem{put(jobItem, true), put(acctItem, false)}, jobItem: jobItem, jobAt: 0, uniqueAt: -1}
	if j.UniqueKey != "" {
		u := uniqueKey(j.UniqueKey)
		u[attrJob] = avS(j.ID)
		w.uniqueAt = len(w.items)
		w.items = append(w.items, put(u, true))
	}
	lsk := getS(jobItem, AttrListKey)
	for _, tag := range tags {
		w.items = append(w.items, put(map[string]types.AttributeValue{
			AttrPK: avS(tagPK(tag)), AttrSK: avS(lsk), attrID: avS(j.ID), attrTagKind: avS(j.Kind),
		}, false))
	}
	w.items = append(w.items, s.edgePuts(j)...)
	return w, nil
}

// uniqueHolder returns the job holding unique key key, given the key item
// that a failed condition returned (nil if the service returned none).
func (s *Store) uniqueHolder(ctx context.Context, key string, item map[string]types.AttributeValue) (*job.Job, error) {
	holder := getS(item, attrJob)
	if holder == "" {
		item, err := s.getItem(ctx, uniqueKey(key))
		if err != nil {
			return nil, fmt.Errorf("read unique key: %w", err)
		}
		holder = getS(item, attrJob)
	}
	existing, err := s.GetJob(ctx, holder)
	if err != nil {
		return nil, fmt.Errorf("unique key %q held by job %q: %w", key, holder, err)
	}
	return existing, nil
}

func reasonCodes(reasons []types.CancellationReason) []string {
	out := make([]string, len(reasons))
	for i, r := range reasons {
		out[i] = aws.ToString(r.Code)
	}
	return out
}

// GetJob returns the job with its current counters: the accounting item's
// plus every open segment's, read consistently (see the package comment),
// or an error wrapping job.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (*job.Job, error) {
	jobs, err := s.loadJobs(ctx, []string{id})
	if err != nil {
		return nil, fmt.Errorf("dynamostore: get job %s: %w", id, err)
	}
	j, ok := jobs[id]
	if !ok {
		return nil, fmt.Errorf("dynamostore: get job %s: %w", id, job.ErrNotFound)
	}
	return j, nil
}

// maxLoadRounds bounds how often loadJobs re-reads a job whose open
// segments were rolled up while it read them.
const maxLoadRounds = 32

// loadJobs reads jobs ids with their counters. Missing jobs are absent from
// the result. For each job it reads the job and accounting items, then the
// open segments, then the open map again; a job one of whose summed
// segments left the open map in between (it was rolled up, so its counts
// may be in the accounting item read, or not) is read again.
func (s *Store) loadJobs(ctx context.Context, ids []string) (map[string]*job.Job, error) {
	out := make(map[string]*job.Job, len(ids))
	pending := slices.Compact(slices.Sorted(slices.Values(ids)))
	for round := 0; len(pending) > 0; round++ {
		if round == maxLoadRounds {
			return nil, fmt.Errorf("counters of %d jobs kept changing under %d reads", len(pending), round)
		}
		if round > 0 {
			if err := sleep(ctx, round-1); err != nil {
				return nil, err
			}
		}
		keys := make([]map[string]types.AttributeValue, 0, 2*len(pending))
		for _, id := range pending {
			keys = append(keys, jobKey(id), acctKey(id))
		}
		items, err := s.batchGet(ctx, keys)
		if err != nil {
			return nil, err
		}
		type loaded struct {
			j *job.Job
			a *acct
		}
		got := map[string]loaded{}
		var segKeys, recheck []map[string]types.AttributeValue
		for _, id := range pending {
			ji, ai := items[keyString(jobKey(id))], items[keyString(acctKey(id))]
			if ji == nil || ai == nil {
				continue
			}
			j, err := decodeJob(ji)
			if err != nil {
				return nil, err
			}
			a, err := decodeAcct(ai)
			if err != nil {
				return nil, fmt.Errorf("decode accounting of job %s: %w", id, err)
			}
			got[id] = loaded{j, a}
			for _, k := range a.open {
				segKeys = append(segKeys, segKey(id, k))
			}
			if len(a.open) > 0 {
				recheck = append(recheck, acctKey(id))
			}
		}
		segs, err := s.batchGet(ctx, segKeys)
		if err != nil {
			return nil, err
		}
		var again map[string]map[string]types.AttributeValue
		if len(recheck) > 0 {
			if again, err = s.batchGet(ctx, recheck, attrOpen); err != nil {
				return nil, err
			}
		}
		var next []string
		for _, id := range pending {
			l, ok := got[id]
			if !ok {
				continue
			}
			if len(l.a.open) > 0 {
				still, err := openSet(again[keyString(acctKey(id))])
				if err != nil {
					return nil, err
				}
				if !containsAll(still, l.a.open) {
					next = append(next, id)
					continue
				}
			}
			c := l.a.c
			for _, k := range l.a.open {
				g, err := decodeSegment(segs[keyString(segKey(id, k))])
				if err != nil {
					return nil, fmt.Errorf("decode segment %s/%d: %w", id, k, err)
				}
				sc, err := g.counters()
				if err != nil {
					return nil, fmt.Errorf("segment %s/%d: %w", id, k, err)
				}
				addCounters(&c, sc)
			}
			l.j.Counters = c
			out[id] = l.j
		}
		pending = next
	}
	return out, nil
}

// containsAll reports whether sorted have holds every element of sorted want.
func containsAll(have, want []int64) bool {
	for _, w := range want {
		if _, ok := slices.BinarySearch(have, w); !ok {
			return false
		}
	}
	return true
}

// Transition moves job id to state to if its state is one of from, applying
// p and setting UpdatedAt to the clock's now, in one conditional UpdateItem
// (state IN from). If the state is not in from, nothing is written and the
// current job is returned with an error wrapping job.ErrConflict. A missing
// job yields job.ErrNotFound; an empty from or an unknown state,
// job.ErrInvalid. An empty patched Error or Result is stored as absent,
// which reads back as "".
func (s *Store) Transition(ctx context.Context, id string, from []job.State, to job.State, p store.Patch) (*job.Job, error) {
	if len(from) == 0 || !to.Valid() {
		return nil, fmt.Errorf("dynamostore: transition job %s to %q: need a valid target and source states: %w", id, to, job.ErrInvalid)
	}
	for _, f := range from {
		if !f.Valid() {
			return nil, fmt.Errorf("dynamostore: transition job %s: unknown source state %q: %w", id, f, job.ErrInvalid)
		}
	}
	if p.RunAt != nil && to == job.StateScheduled && !keyTimeOK(*p.RunAt) {
		return nil, fmt.Errorf("dynamostore: transition job %s: run_at outside 1970..2286: %w", id, job.ErrInvalid)
	}
	now := norm(s.clock.Now())
	// patch builds the update afresh: an UpdateBuilder's copies share state.
	patch := func() expression.UpdateBuilder {
		upd := expression.Set(expression.Name(AttrState), expression.Value(string(to))).
			Set(expression.Name(attrUpdated), expression.Value(now.UnixMilli()))
		for name, v := range map[string]*string{attrError: p.Error, attrResult: p.Result} {
			switch {
			case v == nil:
			case *v == "":
				upd = upd.Remove(expression.Name(name))
			default:
				upd = upd.Set(expression.Name(name), expression.Value(*v))
			}
		}
		for name, t := range map[string]*time.Time{attrRunAt: p.RunAt, attrStarted: p.StartedAt, attrFinished: p.FinishedAt} {
			if t != nil {
				upd = upd.Set(expression.Name(name), expression.Value(t.UnixMilli()))
			}
		}
		return upd
	}
	froms := make([]expression.OperandBuilder, len(from))
	for i, f := range from {
		froms[i] = expression.Value(string(f))
	}
	// The write carries a token of this call. If the SDK retries a write
	// whose first attempt was applied but whose answer was lost, the retry
	// fails its condition and the old item shows our own token: the
	// transition happened, and is reported as done rather than as a conflict.
	token := rand.Text()
	for round := 0; ; round++ {
		cond := expression.AttributeExists(expression.Name(AttrPK)).And(expression.Name(AttrState).In(froms[0], froms[1:]...))
		upd := patch().Set(expression.Name(attrTransition), expression.Value(token))
		if to.Terminal() {
			upd = setFollowUp(upd, id, token, now)
		}
		// The due index entry follows the state: only a scheduled job with
		// a RunAt carries it. Its sort key holds the RunAt, so moving to
		// scheduled without a new RunAt needs the current one, read first
		// and made a condition of the write.
		var runAt *int64
		if p.RunAt != nil {
			v := p.RunAt.UnixMilli()
			runAt = &v
		} else if to == job.StateScheduled {
			item, err := s.getItem(ctx, jobKey(id))
			if err != nil {
				return nil, fmt.Errorf("dynamostore: transition job %s: %w", id, err)
			}
			if v, ok, err := getN(item, attrRunAt); err != nil {
				return nil, fmt.Errorf("dynamostore: transition job %s: %w", id, err)
			} else if ok {
				if v < 0 || v > maxKeyTime {
					return nil, fmt.Errorf("dynamostore: transition job %s: run_at outside 1970..2286: %w", id, job.ErrInvalid)
				}
				runAt = &v
				cond = cond.And(expression.Name(attrRunAt).Equal(expression.Value(v)))
			} else {
				cond = cond.And(expression.AttributeNotExists(expression.Name(attrRunAt)))
			}
		}
		if to == job.StateScheduled && runAt != nil {
			upd = upd.Set(expression.Name(AttrDuePK), expression.Value(dueJobs)).
				Set(expression.Name(AttrDueSK), expression.Value(key13(*runAt)+"#"+id))
		} else {
			upd = upd.Remove(expression.Name(AttrDuePK)).Remove(expression.Name(AttrDueSK))
		}
		_, err := s.updateItem(ctx, update{key: jobKey(id), upd: upd, cond: &cond})
		if old, ok := condFailed(err); ok && getS(old, attrTransition) == token {
			break // applied by an attempt whose answer was lost
		}
		if _, ok := condFailed(err); ok {
			cur, gerr := s.GetJob(ctx, id)
			if gerr != nil {
				return nil, fmt.Errorf("dynamostore: transition job %s: %w", id, gerr)
			}
			if slices.Contains(from, cur.State) && p.RunAt == nil && to == job.StateScheduled && round < maxRounds {
				continue // only the RunAt read changed under the write
			}
			return cur, fmt.Errorf("dynamostore: transition job %s from %s to %s: not in %v: %w", id, cur.State, to, from, job.ErrConflict)
		}
		if err != nil {
			return nil, fmt.Errorf("dynamostore: transition job %s: %w", id, err)
		}
		break
	}
	j, err := s.GetJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: transition job %s: %w", id, err)
	}
	return j, nil
}

// Touch sets the job's UpdatedAt to the clock's now and changes nothing
// else, in one conditional UpdateItem. A missing job yields job.ErrNotFound.
func (s *Store) Touch(ctx context.Context, id string) error {
	cond := expression.AttributeExists(expression.Name(AttrPK))
	_, err := s.updateItem(ctx, update{
		key:  jobKey(id),
		upd:  expression.Set(expression.Name(attrUpdated), expression.Value(norm(s.clock.Now()).UnixMilli())),
		cond: &cond,
	})
	if _, ok := condFailed(err); ok {
		return fmt.Errorf("dynamostore: touch job %s: %w", id, job.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("dynamostore: touch job %s: %w", id, err)
	}
	return nil
}

// SetSliced sets the job's ChunksTotal and ItemsTotal, turns Sliced true
// and sets SlicedAt and UpdatedAt to the clock's now, in one transaction
// that also sets the size of the last segment when it is partial (and
// registers it as open, creating it if no chunk of it is recorded yet).
// If that segment is then complete it is rolled up. If the job is already
// sliced with the same totals nothing is written; with different totals the
// current job is returned with an error wrapping job.ErrConflict. Negative
// totals yield job.ErrInvalid, a missing job job.ErrNotFound. Returns the
// job after the call.
func (s *Store) SetSliced(ctx context.Context, id string, chunks, items int64) (*job.Job, error) {
	if chunks < 0 || items < 0 {
		return nil, fmt.Errorf("dynamostore: set sliced %s: negative totals %d, %d: %w", id, chunks, items, job.ErrInvalid)
	}
	same := func(cur *job.Job) (*job.Job, error) {
		if c := cur.Counters; c.ChunksTotal != chunks || c.ItemsTotal != items {
			return cur, fmt.Errorf("dynamostore: set sliced %s: already sliced with %d chunks, %d items, not %d, %d: %w",
				id, c.ChunksTotal, c.ItemsTotal, chunks, items, job.ErrConflict)
		}
		return cur, nil
	}
	cur, err := s.GetJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: set sliced: %w", err)
	}
	if cur.Counters.Sliced {
		return same(cur)
	}
	now := norm(s.clock.Now()).UnixMilli()
	exists := expression.AttributeExists(expression.Name(AttrPK))
	jobUpd, err := s.txUpdate(update{
		key:  jobKey(id),
		upd:  expression.Set(expression.Name(attrSlicedAt), expression.Value(now)).Set(expression.Name(attrUpdated), expression.Value(now)),
		cond: &exists,
	})
	if err != nil {
		return nil, fmt.Errorf("dynamostore: set sliced %s: %w", id, err)
	}
	lastK, size := chunks/SegmentSize, int(chunks%SegmentSize)
	acctUpd := expression.Set(expression.Name(attrSliced), expression.Value(true)).
		Set(expression.Name(attrChunksTotal), expression.Value(chunks)).
		Set(expression.Name(attrItemsTotal), expression.Value(items))
	if size > 0 {
		acctUpd = acctUpd.Set(openName(lastK), expression.Value(1))
	}
	notSliced := exists.And(expression.Name(attrSliced).Equal(expression.Value(false)))
	acctTx, err := s.txUpdate(update{key: acctKey(id), upd: acctUpd, cond: &notSliced})
	if err != nil {
		return nil, fmt.Errorf("dynamostore: set sliced %s: %w", id, err)
	}
	tx := []types.TransactWriteItem{jobUpd, acctTx}
	if size > 0 {
		sizeCond := expression.AttributeNotExists(expression.Name(attrSize)).Or(expression.Name(attrSize).Equal(expression.Value(size)))
		segTx, err := s.txUpdate(update{key: segKey(id, lastK), upd: expression.Set(expression.Name(attrSize), expression.Value(size)), cond: &sizeCond})
		if err != nil {
			return nil, fmt.Errorf("dynamostore: set sliced %s: %w", id, err)
		}
		tx = append(tx, segTx)
	}
	reasons, err := s.transact(ctx, tx)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: set sliced %s: %w", id, err)
	}
	switch {
	case reasons == nil:
	case failedAt(reasons, 0):
		return nil, fmt.Errorf("dynamostore: set sliced %s: %w", id, job.ErrNotFound)
	case failedAt(reasons, 1):
		// Sliced concurrently: the same totals are fine.
		cur, err := s.GetJob(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("dynamostore: set sliced: %w", err)
		}
		return same(cur)
	default:
		cur, err := s.GetJob(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("dynamostore: set sliced: %w", err)
		}
		return cur, fmt.Errorf("dynamostore: set sliced %s: last segment %d already has another size than %d: %w", id, lastK, size, job.ErrConflict)
	}
	if size > 0 {
		if err := s.crashPoint("sliced"); err != nil {
			return nil, err
		}
		if err := s.rollUpIfFull(ctx, id, lastK); err != nil {
			return nil, fmt.Errorf("dynamostore: set sliced %s: %w", id, err)
		}
	}
	j, err := s.GetJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("dynamostore: set sliced: %w", err)
	}
	return j, nil
}

// openName is the path of segment k in the accounting item's open map.
func openName(k int64) expression.NameBuilder {
	return expression.Name(attrOpen).AppendName(expression.NameNoDotSplit(strconv.FormatInt(k, 10)))
}

// rollUpIfFull reads segment k of job id and rolls it up if it is full.
func (s *Store) rollUpIfFull(ctx context.Context, id string, k int64) error {
	item, err := s.getItem(ctx, segKey(id, k))
	if err != nil {
		return err
	}
	g, err := decodeSegment(item)
	if err != nil {
		return fmt.Errorf("segment %d: %w", k, err)
	}
	if g.full() {
		return s.rollUp(ctx, id, k, g)
	}
	return nil
}

// rollUp moves the counts of full segment k into the accounting item and
// closes it, in one UpdateItem conditional on k being open. A full segment
// never changes, so whoever computes the counts computes the same ones; if
// k is no longer open it has been rolled up already and nothing is done.
func (s *Store) rollUp(ctx context.Context, id string, k int64, g *segment) error {
	if err := s.crashPoint("rollup"); err != nil {
		return err
	}
	c, err := g.counters()
	if err != nil {
		return fmt.Errorf("roll up segment %d: %w", k, err)
	}
	upd := expression.Add(expression.Name(attrChunksDone), expression.Value(c.ChunksDone)).
		Add(expression.Name(attrChunksFailed), expression.Value(c.ChunksFailed)).
		Add(expression.Name(attrItemsDone), expression.Value(c.ItemsDone)).
		Add(expression.Name(attrItemsFailed), expression.Value(c.ItemsFailed)).
		Add(expression.Name(attrRetries), expression.Value(c.Retries)).
		Add(expression.Name(attrRV), expression.Value(1)).
		Remove(openName(k))
	cond := expression.AttributeExists(openName(k))
	_, err = s.updateItem(ctx, update{key: acctKey(id), upd: upd, cond: &cond})
	if _, ok := condFailed(err); ok {
		return nil
	}
	if err != nil {
		return fmt.Errorf("roll up segment %d: %w", k, err)
	}
	return nil
}
