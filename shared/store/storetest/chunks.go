package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// testAccounting records a job's chunks as a queue with duplicate deliveries
// would: retries first, then every terminal outcome three times with some
// retries racing them, then late duplicates, all from 8 goroutines in
// random order. Counters must count each chunk exactly once and exactly the
// retries recorded before the chunk went terminal.
func testAccounting(t *testing.T, s store.Store) {
	ctx := context.Background()
	const (
		chunks  = 200
		workers = 8
		copies  = 3
	)
	j := newJob("storetest.accounting."+uniq(), time.Now())
	j.State = job.StateRunning
	create(t, s, j)

	type plan struct {
		retries int
		outcome job.Outcome
		items   int64
	}
	plans := make([]plan, chunks)
	var want job.Counters
	for i := range plans {
		p := plan{retries: i % 3, outcome: job.OutcomeSucceeded, items: int64(i%5 + 1)}
		if i%7 == 3 {
			p.outcome, p.items = job.OutcomeFailed, int64(i%4)
		}
		plans[i] = p
		if p.outcome == job.OutcomeSucceeded {
			want.ChunksDone++
			want.ItemsDone += p.items
		} else {
			want.ChunksFailed++
			want.ItemsFailed += p.items
		}
	}
	type op struct {
		index int64
		a     job.Attempt
	}
	started := time.Now().UTC()
	retry := func(i int, worker string) op {
		return op{int64(i), job.Attempt{
			Outcome: job.OutcomeRetry, Worker: worker, Started: started,
			Duration: time.Millisecond, Error: "temporary", RetryAfter: time.Second,
		}}
	}
	terminal := func(i, copy int) op {
		p := plans[i]
		return op{int64(i), job.Attempt{
			Outcome: p.outcome, Worker: fmt.Sprintf("terminal-%d", copy), Started: started,
			Duration: 2 * time.Millisecond, Items: p.items,
		}}
	}
	run := func(ops []op) []store.Recorded {
		rand.Shuffle(len(ops), func(a, b int) { ops[a], ops[b] = ops[b], ops[a] })
		res := make([]store.Recorded, len(ops))
		parallel(workers, len(ops), func(k int) {
			r, err := s.RecordAttempt(ctx, j.ID, ops[k].index, ops[k].a, nil, nil)
			if err != nil {
				t.Errorf("RecordAttempt(%d, %s): %v", ops[k].index, ops[k].a.Outcome, err)
			}
			res[k] = r
		})
		return res
	}

	// Phase 1: retries only. Every one applies.
	var ops []op
	for i, p := range plans {
		for r := range p.retries {
			ops = append(ops, retry(i, fmt.Sprintf("retry-%d", r)))
		}
	}
	for k, r := range run(ops) {
		if !r.Applied {
			t.Errorf("retry of pending chunk %d not applied", ops[k].index)
		}
	}
	want.Retries = int64(len(ops))
	if got := get(t, s, j.ID).Counters; got != (job.Counters{Retries: want.Retries}) {
		t.Errorf("counters after the retries = %+v, want only Retries %d", got, want.Retries)
	}

	// Phase 2: three copies of each terminal outcome, with a retry racing
	// them for every fourth chunk: it counts if it lands first.
	ops = ops[:0]
	for i := range plans {
		for c := range copies {
			ops = append(ops, terminal(i, c))
		}
		if i%4 == 0 {
			ops = append(ops, retry(i, "racing"))
		}
	}
	applied := make([]int, chunks)
	racingApplied := make([]int, chunks)
	for k, r := range run(ops) {
		o := ops[k]
		if r.Chunk == nil {
			t.Errorf("RecordAttempt(%d) returned no chunk", o.index)
			continue
		}
		if o.a.Outcome == job.OutcomeRetry {
			if r.Applied {
				racingApplied[o.index]++
				want.Retries++
			}
			continue
		}
		if r.Applied {
			applied[o.index]++
		}
		if !r.Chunk.State.Terminal() {
			t.Errorf("chunk %d after a terminal attempt: state %s", o.index, r.Chunk.State)
		}
	}
	for i, n := range applied {
		if n != 1 {
			t.Errorf("chunk %d: %d terminal attempts applied, want exactly 1", i, n)
		}
	}
	got := get(t, s, j.ID).Counters
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("counters after every chunk (-want +got):\n%s", d)
	}
	if got.Accounted() {
		t.Errorf("Accounted before SetSliced: %+v", got)
	}

	// Phase 3: late duplicates of every kind are not applied.
	ops = ops[:0]
	for i, p := range plans {
		ops = append(ops, retry(i, "late"), terminal(i, 9))
		flipped := terminal(i, 10)
		flipped.a.Outcome = map[job.Outcome]job.Outcome{job.OutcomeSucceeded: job.OutcomeFailed, job.OutcomeFailed: job.OutcomeSucceeded}[p.outcome]
		ops = append(ops, flipped)
	}
	for k, r := range run(ops) {
		if r.Applied {
			t.Errorf("late %s of terminal chunk %d applied", ops[k].a.Outcome, ops[k].index)
		}
	}
	if got := get(t, s, j.ID).Counters; got != want {
		t.Errorf("late duplicates moved the counters: %+v, want %+v", got, want)
	}

	// Every history: attempts 1..k, the retries first, one terminal last.
	var historyRetries int64
	for i, p := range plans {
		c := getChunk(t, s, j.ID, int64(i))
		wantState := job.ChunkSucceeded
		if p.outcome == job.OutcomeFailed {
			wantState = job.ChunkFailed
		}
		if c.State != wantState || c.Items != p.items {
			t.Errorf("chunk %d: state %s items %d, want %s %d", i, c.State, c.Items, wantState, p.items)
		}
		if n := len(c.Attempts); n != p.retries+racingApplied[i]+1 {
			t.Errorf("chunk %d: %d attempts, want %d retries + %d racing + 1 terminal", i, n, p.retries, racingApplied[i])
		}
		for k, a := range c.Attempts {
			if a.N != k+1 {
				t.Errorf("chunk %d: attempt %d has N %d", i, k+1, a.N)
			}
			last := k == len(c.Attempts)-1
			if last != (a.Outcome != job.OutcomeRetry) {
				t.Errorf("chunk %d: attempt %d of %d has outcome %s", i, a.N, len(c.Attempts), a.Outcome)
			}
			if a.Outcome == job.OutcomeRetry {
				historyRetries++
			}
		}
		if last := c.Attempts[len(c.Attempts)-1]; last.Outcome != p.outcome || last.Items != p.items {
			t.Errorf("chunk %d: terminal attempt %+v, want outcome %s items %d", i, last, p.outcome, p.items)
		}
	}
	if historyRetries != want.Retries {
		t.Errorf("histories hold %d retries, counters %d", historyRetries, want.Retries)
	}

	sliced, err := s.SetSliced(ctx, j.ID, chunks, want.ItemsDone+want.ItemsFailed)
	if err != nil {
		t.Fatalf("SetSliced: %v", err)
	}
	if !sliced.Counters.Accounted() {
		t.Errorf("not Accounted after SetSliced: %+v", sliced.Counters)
	}
}

// testAccountedFlip checks that Accounted turns true with the last chunk
// when slicing ended first.
func testAccountedFlip(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := newJob("storetest.accounted."+uniq(), time.Now())
	j.State = job.StateRunning
	create(t, s, j)
	if got, err := s.SetSliced(ctx, j.ID, 3, 30); err != nil || got.Counters.Accounted() {
		t.Fatalf("SetSliced = %+v, %v; want not accounted", got, err)
	}
	steps := []struct {
		index     int64
		outcome   job.Outcome
		accounted bool
	}{
		{0, job.OutcomeSucceeded, false},
		{1, job.OutcomeFailed, false},
		{2, job.OutcomeRetry, false},
		{1, job.OutcomeSucceeded, false}, // duplicate
		{2, job.OutcomeSucceeded, true},
	}
	for _, st := range steps {
		if _, err := s.RecordAttempt(ctx, j.ID, st.index, job.Attempt{Outcome: st.outcome, Worker: "w", Started: time.Now(), Items: 10}, nil, nil); err != nil {
			t.Fatalf("RecordAttempt(%d, %s): %v", st.index, st.outcome, err)
		}
		if c := get(t, s, j.ID).Counters; c.Accounted() != st.accounted {
			t.Fatalf("after chunk %d %s: Accounted = %v, want %v (%+v)", st.index, st.outcome, c.Accounted(), st.accounted, c)
		}
	}

	empty := newJob("storetest.accounted."+uniq(), time.Now())
	create(t, s, empty)
	if got, err := s.SetSliced(ctx, empty.ID, 0, 0); err != nil || !got.Counters.Accounted() {
		t.Errorf("SetSliced(0 chunks) = %+v, %v; want accounted", got, err)
	}
}

func testChunkDetails(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := newJob("storetest.chunk."+uniq(), time.Now())
	create(t, s, j)
	started := time.Date(2033, 3, 4, 5, 6, 7, 891234567, time.FixedZone("UTC-5", -5*60*60))
	attempts := []job.Attempt{
		{N: 99, Outcome: job.OutcomeRetry, Worker: "worker-a", Started: started, Duration: 1234567 * time.Nanosecond,
			Error: "throttled", RetryAfter: 2500 * time.Millisecond},
		{Outcome: job.OutcomeRetry, Worker: "worker-b", Started: started.Add(3 * time.Second), Duration: time.Second,
			Error: "panic: boom", Stack: "goroutine 1 [running]:\nmain.main()\n\t/x.go:1 +0x1d", RetryAfter: time.Minute},
		{Outcome: job.OutcomeSucceeded, Worker: "worker-c", Started: started.Add(time.Hour), Duration: 987654321 * time.Nanosecond, Items: 42},
	}
	states := []job.ChunkState{job.ChunkRetrying, job.ChunkRetrying, job.ChunkSucceeded}
	want := &job.Chunk{JobID: j.ID, Index: 5}
	for k, a := range attempts {
		r, err := s.RecordAttempt(ctx, j.ID, 5, a, nil, nil)
		if err != nil || !r.Applied {
			t.Fatalf("RecordAttempt %d = %+v, %v", k+1, r, err)
		}
		a.N = k + 1
		want.Attempts = append(want.Attempts, a)
		want.State = states[k]
		if a.Outcome == job.OutcomeSucceeded {
			want.Items = a.Items
		}
		if d := cmp.Diff(want, r.Chunk, cmpOpts, ignoreUpdated); d != "" {
			t.Errorf("Recorded.Chunk after attempt %d (-want +got):\n%s", k+1, d)
		}
		if r.Chunk.UpdatedAt.IsZero() {
			t.Errorf("chunk UpdatedAt not set")
		}
	}
	got := getChunk(t, s, j.ID, 5)
	if d := cmp.Diff(want, got, cmpOpts, ignoreUpdated); d != "" {
		t.Errorf("GetChunk (-want +got):\n%s", d)
	}
	checkChunkUTC(t, got)

	failed := job.Attempt{Outcome: job.OutcomeFailed, Worker: "worker-d", Started: started, Items: 7, Error: "bad input"}
	r, err := s.RecordAttempt(ctx, j.ID, 6, failed, nil, nil)
	if err != nil {
		t.Fatalf("RecordAttempt(failed): %v", err)
	}
	failed.N = 1
	wantFailed := &job.Chunk{JobID: j.ID, Index: 6, State: job.ChunkFailed, Items: 7, Attempts: []job.Attempt{failed}}
	if d := cmp.Diff(wantFailed, r.Chunk, cmpOpts, ignoreUpdated); d != "" {
		t.Errorf("failed chunk (-want +got):\n%s", d)
	}

	for _, tc := range []struct {
		name  string
		jobID string
		index int64
	}{{"Unrecorded", j.ID, 7}, {"UnrecordedZero", j.ID, 0}, {"MissingJob", job.NewID(time.Now()), 5}} {
		if c, err := s.GetChunk(ctx, tc.jobID, tc.index); !errors.Is(err, job.ErrNotFound) || c != nil {
			t.Errorf("GetChunk %s = %v, %v; want nil, ErrNotFound", tc.name, c, err)
		}
	}
	_, err = s.RecordAttempt(ctx, job.NewID(time.Now()), 0, job.Attempt{Outcome: job.OutcomeSucceeded, Started: started}, nil, nil)
	if !errors.Is(err, job.ErrNotFound) {
		t.Errorf("RecordAttempt(missing job) = %v, want ErrNotFound", err)
	}
}

func testListChunks(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := newJob("storetest.list-chunks."+uniq(), time.Now())
	create(t, s, j)
	const n = 30
	// Indexes with gaps, recorded out of order.
	indexes := make([]int64, n)
	for i := range indexes {
		indexes[i] = int64(i*3 + 1)
	}
	outcomes := []job.Outcome{job.OutcomeSucceeded, job.OutcomeFailed, job.OutcomeRetry}
	stateOf := map[job.Outcome]job.ChunkState{job.OutcomeSucceeded: job.ChunkSucceeded, job.OutcomeFailed: job.ChunkFailed, job.OutcomeRetry: job.ChunkRetrying}
	byState := map[job.ChunkState][]int64{}
	for _, i := range rand.Perm(n) {
		o := outcomes[i%3]
		if _, err := s.RecordAttempt(ctx, j.ID, indexes[i], job.Attempt{Outcome: o, Worker: "w", Started: time.Now(), Items: 3}, nil, nil); err != nil {
			t.Fatalf("RecordAttempt: %v", err)
		}
	}
	for i, idx := range indexes {
		st := stateOf[outcomes[i%3]]
		byState[st] = append(byState[st], idx)
	}

	list := func(t *testing.T, q job.ChunkQuery) []int64 {
		t.Helper()
		var got []int64
		for range 2*n + 2 {
			page, err := s.ListChunks(ctx, j.ID, q)
			if err != nil {
				t.Fatalf("ListChunks(%+v): %v", q, err)
			}
			if q.Limit > 0 && len(page.Chunks) > q.Limit {
				t.Fatalf("page of %d chunks, limit %d", len(page.Chunks), q.Limit)
			}
			for _, c := range page.Chunks {
				if c.JobID != j.ID || len(c.Attempts) != 1 {
					t.Fatalf("listed chunk %+v", c)
				}
				if q.State != "" && c.State != q.State {
					t.Fatalf("listed chunk %d in state %s, filter %s", c.Index, c.State, q.State)
				}
				got = append(got, c.Index)
			}
			if page.Next == "" {
				return got
			}
			q.Cursor = page.Next
		}
		t.Fatalf("ListChunks(%+v) did not end", q)
		return nil
	}
	for _, tc := range []struct {
		name string
		q    job.ChunkQuery
		want []int64
	}{
		{"All7", job.ChunkQuery{Limit: 7}, indexes},
		{"AllDefault", job.ChunkQuery{}, indexes},
		{"All1", job.ChunkQuery{Limit: 1}, indexes},
		{"Failed4", job.ChunkQuery{State: job.ChunkFailed, Limit: 4}, byState[job.ChunkFailed]},
		{"Retrying", job.ChunkQuery{State: job.ChunkRetrying}, byState[job.ChunkRetrying]},
		{"Succeeded3", job.ChunkQuery{State: job.ChunkSucceeded, Limit: 3}, byState[job.ChunkSucceeded]},
		{"Pending", job.ChunkQuery{State: job.ChunkPending}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := cmp.Diff(tc.want, list(t, tc.q), cmpOpts); d != "" {
				t.Errorf("listed indexes (-want +got):\n%s", d)
			}
		})
	}
	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		for _, c := range badCursors {
			if _, err := s.ListChunks(ctx, j.ID, job.ChunkQuery{Cursor: c}); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("ListChunks(cursor %q) = %v, want ErrInvalid", c, err)
			}
		}
		if _, err := s.ListChunks(ctx, job.NewID(time.Now()), job.ChunkQuery{}); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("ListChunks(missing job) = %v, want ErrNotFound", err)
		}
	})
}

// badCursors are malformed in any encoding an adapter might choose.
var badCursors = []string{"!!not a cursor!!", "{", "\x00\xff", "%%%%"}

func testParkedRetries(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := newJob("storetest.parked."+uniq(), time.Now())
	create(t, s, j)
	// Parking times in the 1990s, unique to this run, so that due chunks of
	// other runs on a shared backend rarely sort before ours.
	t0 := time.Date(1995, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rand.Int64N(int64(5 * 365 * 24 * time.Hour)))).Truncate(time.Millisecond)
	t1 := t0.Add(time.Second)
	task := func(i int64) *job.ChunkTask {
		return &job.ChunkTask{JobID: j.ID, Kind: j.Kind, Index: i, Items: 10, Input: job.ChunkInput{
			Key: "data/" + j.ID, Format: job.FormatNDJSON, Start: i * 100, End: i*100 + 100, HeaderEnd: 12, Data: []byte(`{"k": [1, 2]}`),
		}}
	}
	retry := job.Attempt{Outcome: job.OutcomeRetry, Worker: "w", Started: time.Now(), Error: "slow down", RetryAfter: 20 * time.Minute}
	park := func(i int64, at time.Time) {
		t.Helper()
		r, err := s.RecordAttempt(ctx, j.ID, i, retry, &at, task(i))
		if err != nil || !r.Applied {
			t.Fatalf("RecordAttempt(park %d) = %+v, %v", i, r, err)
		}
		if r.Chunk.RetryAt == nil || !r.Chunk.RetryAt.Equal(at) {
			t.Errorf("chunk %d RetryAt = %v, want %v", i, r.Chunk.RetryAt, at)
		}
		if d := cmp.Diff(task(i), r.Chunk.Task, cmpOpts); d != "" {
			t.Errorf("chunk %d Task (-want +got):\n%s", i, d)
		}
	}
	due := func(now time.Time) []int64 {
		t.Helper()
		chunks, err := s.DueRetries(ctx, now, job.MaxPageSize)
		if err != nil {
			t.Fatalf("DueRetries: %v", err)
		}
		var out []int64
		for _, c := range chunks {
			if c.RetryAt == nil || c.RetryAt.After(now) {
				t.Errorf("DueRetries(%v) returned chunk %s/%d with RetryAt %v", now, c.JobID, c.Index, c.RetryAt)
			}
			if c.JobID != j.ID {
				continue
			}
			if d := cmp.Diff(task(c.Index), c.Task, cmpOpts); d != "" {
				t.Errorf("due chunk %d Task (-want +got):\n%s", c.Index, d)
			}
			if len(c.Attempts) == 0 || c.State != job.ChunkRetrying {
				t.Errorf("due chunk %d: %+v", c.Index, c)
			}
			checkChunkUTC(t, c)
			out = append(out, c.Index)
		}
		return out
	}
	checkDue := func(now time.Time, want ...int64) {
		t.Helper()
		if d := cmp.Diff(want, due(now), cmpOpts); d != "" {
			t.Errorf("DueRetries(%v) for this job (-want +got):\n%s", now, d)
		}
	}
	release := func(i int64, want error) {
		t.Helper()
		err := s.ReleaseRetry(ctx, j.ID, i)
		if !errors.Is(err, want) {
			t.Errorf("ReleaseRetry(%d) = %v, want %v", i, err, want)
		}
	}

	park(4, t0)
	park(5, t1)
	if r, err := s.RecordAttempt(ctx, j.ID, 6, retry, nil, nil); err != nil || r.Chunk.RetryAt != nil || r.Chunk.Task != nil {
		t.Fatalf("RecordAttempt(unparked retry) = %+v, %v", r, err)
	}
	checkDue(t0.Add(-time.Millisecond))
	checkDue(t0, 4)
	checkDue(t1, 4, 5)
	checkDue(t1.Add(time.Hour), 4, 5)
	if chunks, err := s.DueRetries(ctx, t1, 1); err != nil || len(chunks) != 1 {
		t.Errorf("DueRetries(limit 1) = %d chunks, %v; want 1", len(chunks), err)
	}

	release(4, nil)
	c := getChunk(t, s, j.ID, 4)
	if c.RetryAt != nil || c.Task != nil || c.State != job.ChunkRetrying || len(c.Attempts) != 1 {
		t.Errorf("released chunk: %+v", c)
	}
	checkDue(t1, 5)
	release(4, job.ErrConflict)
	release(6, job.ErrConflict)
	release(7, job.ErrNotFound)

	// A terminal attempt clears parking; a parked retry after it is a
	// duplicate and parks nothing.
	r, err := s.RecordAttempt(ctx, j.ID, 5, job.Attempt{Outcome: job.OutcomeSucceeded, Worker: "w", Started: time.Now(), Items: 10}, nil, nil)
	if err != nil || !r.Applied || r.Chunk.RetryAt != nil || r.Chunk.Task != nil {
		t.Errorf("terminal attempt of parked chunk = %+v, %v; want applied, unparked", r, err)
	}
	if r, err := s.RecordAttempt(ctx, j.ID, 5, retry, &t0, task(5)); err != nil || r.Applied {
		t.Errorf("parked retry of terminal chunk = %+v, %v; want not applied", r, err)
	}
	checkDue(t1)
	release(5, job.ErrConflict)

	// A released chunk may be parked again, and a plain retry unparks it.
	park(4, t1)
	checkDue(t1, 4)
	if _, err := s.RecordAttempt(ctx, j.ID, 4, retry, nil, nil); err != nil {
		t.Fatalf("RecordAttempt: %v", err)
	}
	checkDue(t1)
	if c := getChunk(t, s, j.ID, 4); len(c.Attempts) != 3 || c.RetryAt != nil || c.Task != nil {
		t.Errorf("chunk 4 after park, release, park, retry: %+v", c)
	}
	if j := get(t, s, j.ID); j.Counters.Retries != 5 || j.Counters.ChunksDone != 1 {
		t.Errorf("counters = %+v, want 5 retries, 1 chunk done", j.Counters)
	}
}
