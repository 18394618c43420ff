package dynamostore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/slicework/slicework/shared/job"
)

// dueCap is how many due scheduled jobs ListJobs reads through the Due
// index before it falls back to the ByState partition.
const dueCap = 2000

// ListJobs returns the jobs matching q, newest (highest lsk: CreatedAt,
// then id) first, at most q.Limit per page (DefaultPageSize if 0, capped at
// MaxPageSize), with their current counters. It queries the index that
// serves q best (see the package comment), never scans, and checks every
// job it returns against q after reading it consistently. Next is the
// cursor of the following page, empty on the last. A malformed cursor or a
// negative limit yields job.ErrInvalid.
func (s *Store) ListJobs(ctx context.Context, q job.Query) (job.Page, error) {
	fail := func(err error) (job.Page, error) { return job.Page{}, fmt.Errorf("dynamostore: list jobs: %w", err) }
	limit, err := job.PageSize(q.Limit)
	if err != nil {
		return fail(err)
	}
	r := lskRange{}
	if q.Cursor != "" {
		if r.upper, err = decodeJobCursor(q.Cursor); err != nil {
			return fail(err)
		}
	}
	if !q.CreatedBefore.IsZero() {
		switch ms := ceilMs(q.CreatedBefore); {
		case ms <= 0:
			return job.Page{}, nil
		case ms <= maxKeyTime && (r.upper == "" || key13(ms) < r.upper):
			r.upper = key13(ms)
		}
	}
	if !q.CreatedAfter.IsZero() {
		switch ms := ceilMs(q.CreatedAfter); {
		case ms > maxKeyTime:
			return job.Page{}, nil
		case ms > 0:
			r.lower = key13(ms)
		}
	}
	if r.lower != "" && r.upper != "" && r.lower >= r.upper {
		return job.Page{}, nil
	}
	pageLimit := int32(min(job.MaxPageSize, limit+1))

	var src *merged
	if q.State == job.StateScheduled && !q.RunAtBefore.IsZero() {
		if src, err = s.dueSource(ctx, q, r); err != nil {
			return fail(err)
		}
	}
	if src == nil {
		if src, err = s.indexSource(q, r, pageLimit); err != nil {
			return fail(err)
		}
	}

	var page job.Page
	seen := map[string]bool{}
	last := ""
	for len(page.Jobs) < limit {
		want := min(limit-len(page.Jobs), 100)
		var batch []candidate
		for len(batch) < want {
			c, err := src.next(ctx, s)
			if err != nil {
				return fail(err)
			}
			if c == nil {
				break
			}
			if !seen[c.id] {
				seen[c.id] = true
				batch = append(batch, *c)
			}
		}
		if len(batch) == 0 {
			return page, nil
		}
		ids := make([]string, len(batch))
		for i, c := range batch {
			ids[i] = c.id
		}
		jobs, err := s.loadJobs(ctx, ids)
		if err != nil {
			return fail(err)
		}
		for _, c := range batch {
			last = c.lsk
			if j := jobs[c.id]; j != nil && matches(q, j) {
				page.Jobs = append(page.Jobs, j)
			}
		}
	}
	more, err := src.more(ctx, s)
	if err != nil {
		return fail(err)
	}
	if more {
		page.Next = encodeJobCursor(last)
	}
	return page, nil
}

// lskRange bounds lsk: lower inclusive, upper exclusive; "" is unbounded.
type lskRange struct{ lower, upper string }

func (r lskRange) contains(lsk string) bool {
	return (r.lower == "" || lsk >= r.lower) && (r.upper == "" || lsk < r.upper)
}

// ceilMs is t in epoch milliseconds, rounded up: a stored (millisecond)
// time v is at or after t exactly when v >= ceilMs(t).
func ceilMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// matches is the full semantics of q, applied to a job read consistently.
func matches(q job.Query, j *job.Job) bool {
	switch {
	case q.Kind != "" && j.Kind != q.Kind,
		q.State != "" && j.State != q.State,
		q.Tag != "" && !slices.Contains(j.Tags, q.Tag),
		q.Parent != "" && j.Parent != q.Parent,
		!q.CreatedAfter.IsZero() && j.CreatedAt.Before(q.CreatedAfter),
		!q.CreatedBefore.IsZero() && !j.CreatedAt.Before(q.CreatedBefore),
		!q.RunAtBefore.IsZero() && (j.RunAt == nil || j.RunAt.After(q.RunAtBefore)),
		!q.UpdatedBefore.IsZero() && !j.UpdatedAt.Before(q.UpdatedBefore):
		return false
	}
	return true
}

// candidate is one index entry: a job's lsk and id.
type candidate struct{ lsk, id string }

// stream reads one index partition newest first, a page at a time.
type stream struct {
	in   *dynamodb.QueryInput
	attr string // the attribute holding the lsk
	skip string // an lsk to leave out (the exclusive upper bound of BETWEEN)
	buf  []candidate
	done bool
}

func (st *stream) peek(ctx context.Context, s *Store) (*candidate, error) {
	for len(st.buf) == 0 && !st.done {
		res, err := s.db.Query(ctx, st.in)
		if err != nil {
			return nil, err
		}
		for _, item := range res.Items {
			lsk := getS(item, st.attr)
			if id, ok := idOfListKey(lsk); ok && lsk != st.skip {
				st.buf = append(st.buf, candidate{lsk, id})
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			st.done = true
		} else {
			st.in.ExclusiveStartKey = res.LastEvaluatedKey
		}
	}
	if len(st.buf) == 0 {
		return nil, nil
	}
	return &st.buf[0], nil
}

// merged yields the candidates of several streams, highest lsk first.
type merged struct{ streams []*stream }

func (m *merged) next(ctx context.Context, s *Store) (*candidate, error) {
	var best *stream
	var top *candidate
	for _, st := range m.streams {
		c, err := st.peek(ctx, s)
		if err != nil {
			return nil, err
		}
		if c != nil && (top == nil || c.lsk > top.lsk) {
			best, top = st, c
		}
	}
	if best == nil {
		return nil, nil
	}
	c := *top
	best.buf = best.buf[1:]
	return &c, nil
}

func (m *merged) more(ctx context.Context, s *Store) (bool, error) {
	for _, st := range m.streams {
		c, err := st.peek(ctx, s)
		if err != nil || c != nil {
			return c != nil, err
		}
	}
	return false, nil
}

// indexSource plans the query of q over the base table or an index.
func (s *Store) indexSource(q job.Query, r lskRange, pageLimit int32) (*merged, error) {
	// Filters on projected attributes, for the indexes that project them.
	var extra []expression.ConditionBuilder
	if !q.UpdatedBefore.IsZero() {
		extra = append(extra, expression.Name(attrUpdated).LessThan(expression.Value(ceilMs(q.UpdatedBefore))))
	}
	if !q.RunAtBefore.IsZero() {
		extra = append(extra, expression.Name(attrRunAt).LessThanEqual(expression.Value(q.RunAtBefore.UnixMilli())))
	}
	byState := func(state job.State) (*stream, error) {
		f := extra
		if q.Kind != "" {
			f = append(slices.Clone(f), expression.Name(AttrKind).Equal(expression.Value(q.Kind)))
		}
		return s.stream(IndexByState, AttrState, string(state), AttrListKey, r, f, pageLimit)
	}
	var streams []*stream
	switch {
	case q.Parent != "":
		f := extra
		if q.Kind != "" {
			f = append(slices.Clone(f), expression.Name(AttrKind).Equal(expression.Value(q.Kind)))
		}
		if q.State != "" {
			f = append(slices.Clone(f), expression.Name(AttrState).Equal(expression.Value(string(q.State))))
		}
		st, err := s.stream(IndexByParent, AttrParent, q.Parent, AttrListKey, r, f, pageLimit)
		if err != nil {
			return nil, err
		}
		streams = append(streams, st)
	case q.Tag != "":
		var f []expression.ConditionBuilder
		if q.Kind != "" {
			f = append(f, expression.Name(attrTagKind).Equal(expression.Value(q.Kind)))
		}
		st, err := s.stream("", AttrPK, tagPK(q.Tag), AttrSK, r, f, pageLimit)
		if err != nil {
			return nil, err
		}
		streams = append(streams, st)
	case q.State != "" && !q.State.Terminal():
		st, err := byState(q.State)
		if err != nil {
			return nil, err
		}
		streams = append(streams, st)
	case q.Kind != "":
		f := extra
		if q.State != "" {
			f = append(slices.Clone(f), expression.Name(AttrState).Equal(expression.Value(string(q.State))))
		}
		st, err := s.stream(IndexByKind, AttrKind, q.Kind, AttrListKey, r, f, pageLimit)
		if err != nil {
			return nil, err
		}
		streams = append(streams, st)
	case q.State != "":
		st, err := byState(q.State)
		if err != nil {
			return nil, err
		}
		streams = append(streams, st)
	default:
		for _, state := range job.AllStates {
			st, err := byState(state)
			if err != nil {
				return nil, err
			}
			streams = append(streams, st)
		}
	}
	return &merged{streams: streams}, nil
}

// stream builds a newest-first query of the partition pkAttr = pk of index
// (the base table if ""), whose lsk is in attribute lskAttr, within r and
// filtered by the conjunction of filters.
func (s *Store) stream(index, pkAttr, pk, lskAttr string, r lskRange, filters []expression.ConditionBuilder, pageLimit int32) (*stream, error) {
	st := &stream{attr: lskAttr}
	kc := expression.Key(pkAttr).Equal(expression.Value(pk))
	switch sk := expression.Key(lskAttr); {
	case r.lower != "" && r.upper != "":
		kc, st.skip = kc.And(sk.Between(expression.Value(r.lower), expression.Value(r.upper))), r.upper
	case r.upper != "":
		kc = kc.And(sk.LessThan(expression.Value(r.upper)))
	case r.lower != "":
		kc = kc.And(sk.GreaterThanEqual(expression.Value(r.lower)))
	}
	b := expression.NewBuilder().WithKeyCondition(kc)
	switch len(filters) {
	case 0:
	case 1:
		b = b.WithFilter(filters[0])
	default:
		b = b.WithFilter(expression.And(filters[0], filters[1], filters[2:]...))
	}
	ex, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("build query: %w", err)
	}
	st.in = &dynamodb.QueryInput{
		TableName: aws.String(s.table), KeyConditionExpression: ex.KeyCondition(), FilterExpression: ex.Filter(),
		ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
		ScanIndexForward: aws.Bool(false), Limit: aws.Int32(pageLimit),
	}
	if index != "" {
		st.in.IndexName = aws.String(index)
	} else {
		st.in.ConsistentRead = aws.Bool(true)
	}
	return st, nil
}

// dueSource serves state scheduled with RunAtBefore from the Due index:
// it reads every due scheduled job (they are few: the sweeper releases them
// each minute) and sorts them newest first. It returns nil if there are
// more than s.dueCap, for the caller to use the ByState partition instead.
func (s *Store) dueSource(ctx context.Context, q job.Query, r lskRange) (*merged, error) {
	ms := q.RunAtBefore.UnixMilli()
	if ms < 0 {
		return &merged{}, nil
	}
	in, err := s.queryBefore(IndexDue, AttrDuePK, dueJobs, AttrDueSK, ms, 0)
	if err != nil {
		return nil, err
	}
	all := &stream{done: true}
	for read := 0; ; {
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, item := range res.Items {
			lsk := getS(item, AttrListKey)
			id, ok := idOfListKey(lsk)
			if !ok || !r.contains(lsk) || (q.Kind != "" && getS(item, AttrKind) != q.Kind) {
				continue
			}
			if !q.UpdatedBefore.IsZero() {
				if v, _, err := getN(item, attrUpdated); err != nil || v >= ceilMs(q.UpdatedBefore) {
					continue
				}
			}
			all.buf = append(all.buf, candidate{lsk, id})
		}
		if read += len(res.Items); read > s.dueCap {
			return nil, nil
		}
		if len(res.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
	slices.SortFunc(all.buf, func(a, b candidate) int { return strings.Compare(b.lsk, a.lsk) })
	return &merged{streams: []*stream{all}}, nil
}
