package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// childJobs returns n valid queued jobs of kind with parent, created now.
func childJobs(kind, parent string, n int) []*job.Job {
	out := make([]*job.Job, n)
	for i := range out {
		out[i] = newJob(kind, time.Now().UTC().Truncate(time.Millisecond))
		out[i].Parent = parent
	}
	return out
}

// success is a successful attempt with items.
func success(worker string, items int64) job.Attempt {
	return job.Attempt{Outcome: job.OutcomeSucceeded, Worker: worker, Started: time.Now().UTC(), Duration: time.Millisecond, Items: items}
}

// children lists every child of parent, newest first.
func children(t *testing.T, s store.Store, parent string) []*job.Job {
	t.Helper()
	return listAll(t, s, job.Query{Parent: parent, Limit: 1000}, 100)
}

// ids returns the ids of jobs, sorted.
func ids(jobs []*job.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	slices.Sort(out)
	return out
}

// testReplaceChunk: the chunk completes and the jobs exist, in one write;
// a second call for the terminal chunk (a duplicate delivery) writes
// nothing; the jobs are listed as the replacing job's children.
func testReplaceChunk(t *testing.T, s store.Store) {
	ctx := context.Background()
	u := uniq()
	parent := newJob("storetest.replace."+u, time.Now())
	parent.State = job.StateRunning
	create(t, s, parent)

	kind := "storetest.replace-child." + u
	jobs := childJobs(kind, parent.ID, 3)
	jobs[0].Tags = []string{"tag-" + u}
	jobs[1].UniqueKey = "unique-" + u
	jobs[2].Args = []byte(`{"n": 2}`)
	jobs[2].State = job.StateScheduled
	runAt := time.Now().UTC().Add(time.Hour).Truncate(time.Millisecond)
	jobs[2].RunAt = &runAt

	res, err := s.ReplaceChunk(ctx, parent.ID, 4, success("w1", 7), jobs)
	if err != nil {
		t.Fatalf("ReplaceChunk: %v", err)
	}
	if !res.Applied || res.Chunk == nil || res.Chunk.State != job.ChunkSucceeded || len(res.Existing) != 0 {
		t.Fatalf("ReplaceChunk = %+v, want applied, chunk succeeded, nothing existing", res)
	}
	if d := cmp.Diff(jobs, res.Created, cmpOpts, ignoreUpdated); d != "" {
		t.Errorf("created jobs (-given +returned):\n%s", d)
	}
	for _, j := range jobs {
		if d := cmp.Diff(j, get(t, s, j.ID), cmpOpts, ignoreUpdated); d != "" {
			t.Errorf("stored job %s (-given +stored):\n%s", j.ID, d)
		}
	}
	c := getChunk(t, s, parent.ID, 4)
	if c.State != job.ChunkSucceeded || c.Items != 7 || len(c.Attempts) != 1 || c.Attempts[0].N != 1 || c.Attempts[0].Worker != "w1" {
		t.Errorf("chunk = %+v, want succeeded with 7 items and attempt 1 by w1", c)
	}
	if got := get(t, s, parent.ID).Counters; got.ChunksDone != 1 || got.ItemsDone != 7 {
		t.Errorf("replacing job's counters = %+v, want 1 chunk and 7 items done", got)
	}
	if got := children(t, s, parent.ID); !slices.Equal(ids(got), ids(jobs)) {
		t.Errorf("children = %v, want %v", ids(got), ids(jobs))
	}
	if got := listAll(t, s, job.Query{Parent: parent.ID, Tag: "tag-" + u}, 10); len(got) != 1 || got[0].ID != jobs[0].ID {
		t.Errorf("children with the tag = %v, want %s", ids(got), jobs[0].ID)
	}

	// Duplicate deliveries: nothing more is written, whatever they carry.
	for _, tc := range []struct {
		name string
		a    job.Attempt
	}{
		{"SameAttempt", success("w1", 7)},
		{"OtherWorker", success("w2", 9)},
	} {
		again := childJobs(kind, parent.ID, 3)
		again[0].UniqueKey = "again-" + u + tc.name
		res, err := s.ReplaceChunk(ctx, parent.ID, 4, tc.a, again)
		if err != nil {
			t.Fatalf("%s: duplicate ReplaceChunk: %v", tc.name, err)
		}
		if res.Applied || len(res.Created) != 0 || res.Chunk == nil || res.Chunk.State != job.ChunkSucceeded {
			t.Errorf("%s: duplicate ReplaceChunk = %+v, want not applied and the succeeded chunk", tc.name, res)
		}
		for _, j := range again {
			if _, err := s.GetJob(ctx, j.ID); !errors.Is(err, job.ErrNotFound) {
				t.Errorf("%s: job %s of the duplicate: GetJob = %v, want ErrNotFound", tc.name, j.ID, err)
			}
		}
		// The unique key of a job that was not created stays free.
		free := newJob(kind, time.Now())
		free.UniqueKey = again[0].UniqueKey
		create(t, s, free)
	}
	if got := get(t, s, parent.ID).Counters; got.ChunksDone != 1 || got.ItemsDone != 7 {
		t.Errorf("counters after duplicates = %+v, want 1 chunk and 7 items done", got)
	}
	if got := children(t, s, parent.ID); len(got) != 3 {
		t.Errorf("%d children after duplicates, want 3", len(got))
	}
	// A RecordAttempt after it is a duplicate too.
	if rec, err := s.RecordAttempt(ctx, parent.ID, 4, success("w3", 1), nil, nil); err != nil || rec.Applied {
		t.Errorf("RecordAttempt after ReplaceChunk = %+v, %v; want not applied", rec, err)
	}
}

// testReplaceChunkAfterRetries: a chunk with a parked retry history is
// replaced: its attempts are numbered on, its parking is cleared, and a
// chunk already terminal by RecordAttempt cannot be replaced.
func testReplaceChunkAfterRetries(t *testing.T, s store.Store) {
	ctx := context.Background()
	u := uniq()
	parent := newJob("storetest.replace-retries."+u, time.Now())
	parent.State = job.StateRunning
	create(t, s, parent)
	retryAt := time.Now().UTC().Add(24 * time.Hour).Truncate(time.Millisecond)
	task := &job.ChunkTask{JobID: parent.ID, Kind: parent.Kind, Index: 17}
	for range 2 {
		a := job.Attempt{Outcome: job.OutcomeRetry, Worker: "w", Started: time.Now().UTC(), Error: "later", RetryAfter: 24 * time.Hour}
		if _, err := s.RecordAttempt(ctx, parent.ID, 17, a, &retryAt, task); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.ReplaceChunk(ctx, parent.ID, 17, success("w", 2), childJobs("storetest.replace-retries-child."+u, parent.ID, 2))
	if err != nil {
		t.Fatalf("ReplaceChunk: %v", err)
	}
	if !res.Applied || len(res.Created) != 2 {
		t.Fatalf("ReplaceChunk = %+v, want applied with 2 jobs", res)
	}
	c := getChunk(t, s, parent.ID, 17)
	if c.State != job.ChunkSucceeded || len(c.Attempts) != 3 || c.Attempts[2].N != 3 || c.RetryAt != nil || c.Task != nil {
		t.Errorf("chunk = %+v, want succeeded at attempt 3 and not parked", c)
	}
	if got := get(t, s, parent.ID).Counters; got.ChunksDone != 1 || got.ItemsDone != 2 || got.Retries != 2 {
		t.Errorf("counters = %+v, want 1 chunk, 2 items, 2 retries", got)
	}
	due, err := s.DueRetries(ctx, retryAt, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range due {
		if d.JobID == parent.ID {
			t.Errorf("replaced chunk still listed as a due retry: %+v", d)
		}
	}

	// A chunk failed by RecordAttempt is terminal: no replace.
	failed := job.Attempt{Outcome: job.OutcomeFailed, Worker: "w", Started: time.Now().UTC(), Error: "no"}
	if _, err := s.RecordAttempt(ctx, parent.ID, 18, failed, nil, nil); err != nil {
		t.Fatal(err)
	}
	late := childJobs("storetest.replace-retries-child."+u, parent.ID, 1)
	if res, err := s.ReplaceChunk(ctx, parent.ID, 18, success("w", 1), late); err != nil || res.Applied || res.Chunk.State != job.ChunkFailed {
		t.Errorf("ReplaceChunk of a failed chunk = %+v, %v; want not applied, chunk failed", res, err)
	}
	if _, err := s.GetJob(ctx, late[0].ID); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("job of a refused replace: GetJob = %v, want ErrNotFound", err)
	}
}

// testReplaceChunkUniqueHeld: a job whose unique key is held is left out
// and its holder returned; the rest is written.
func testReplaceChunkUniqueHeld(t *testing.T, s store.Store) {
	ctx := context.Background()
	u := uniq()
	parent := newJob("storetest.replace-held."+u, time.Now())
	parent.State = job.StateRunning
	create(t, s, parent)
	kind := "storetest.replace-held-child." + u
	holders := make([]*job.Job, 2)
	for i := range holders {
		h := newJob(kind, time.Now())
		h.UniqueKey = fmt.Sprintf("held-%d-%s", i, u)
		holders[i] = create(t, s, h)
	}
	jobs := childJobs(kind, parent.ID, 4)
	jobs[0].UniqueKey = holders[0].UniqueKey
	jobs[1].UniqueKey = "free-" + u
	jobs[3].UniqueKey = holders[1].UniqueKey
	res, err := s.ReplaceChunk(ctx, parent.ID, 0, success("w", 1), jobs)
	if err != nil {
		t.Fatalf("ReplaceChunk: %v", err)
	}
	if !res.Applied {
		t.Fatalf("ReplaceChunk not applied: %+v", res)
	}
	if got, want := ids(res.Created), ids([]*job.Job{jobs[1], jobs[2]}); !slices.Equal(got, want) {
		t.Errorf("created %v, want %v", got, want)
	}
	if got, want := ids(res.Existing), ids(holders); !slices.Equal(got, want) {
		t.Errorf("existing %v, want the holders %v", got, want)
	}
	for _, j := range []*job.Job{jobs[0], jobs[3]} {
		if _, err := s.GetJob(ctx, j.ID); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("job %s with a held key: GetJob = %v, want ErrNotFound", j.ID, err)
		}
	}
	if got := children(t, s, parent.ID); !slices.Equal(ids(got), ids(res.Created)) {
		t.Errorf("children %v, want %v", ids(got), ids(res.Created))
	}
	if got := get(t, s, parent.ID).Counters; got.ChunksDone != 1 {
		t.Errorf("counters = %+v, want the chunk done", got)
	}
}

// testReplaceChunkBudget: the transaction budget is exact. 49 plain jobs
// (98 items) replace the first chunk of a segment (2 items): 100 items.
// One more job, or fewer jobs with more items each, is refused and
// nothing is written.
func testReplaceChunkBudget(t *testing.T, s store.Store) {
	ctx := context.Background()
	u := uniq()
	parent := newJob("storetest.replace-budget."+u, time.Now())
	parent.State = job.StateRunning
	create(t, s, parent)
	kind := "storetest.replace-budget-child." + u
	maxPlain := (store.MaxTransactItems - store.ReplaceChunkItems) / 2
	keyed := func(n int) []*job.Job {
		jobs := childJobs(kind, parent.ID, n)
		for i, j := range jobs {
			j.UniqueKey = fmt.Sprintf("budget-%d-%s", i, u)
		}
		return jobs
	}
	for _, tc := range []struct {
		name string
		jobs []*job.Job
	}{
		{"OneOver", childJobs(kind, parent.ID, maxPlain+1)},
		{"KeyedOver", keyed((store.MaxTransactItems-store.ReplaceChunkItems)/3 + 1)},
		{"TooManyBytes", func() []*job.Job {
			jobs := childJobs(kind, parent.ID, 3)
			for _, j := range jobs {
				j.Args = []byte(`"` + strings.Repeat("x", store.MaxReplaceBytes/3) + `"`)
			}
			return jobs
		}()},
	} {
		if _, err := s.ReplaceChunk(ctx, parent.ID, 0, success("w", 1), tc.jobs); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: ReplaceChunk(%d jobs) = %v, want ErrInvalid", tc.name, len(tc.jobs), err)
		}
	}
	if _, err := s.GetChunk(ctx, parent.ID, 0); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("refused replaces recorded the chunk: GetChunk = %v", err)
	}
	if got := children(t, s, parent.ID); len(got) != 0 {
		t.Errorf("refused replaces created %d jobs", len(got))
	}
	jobs := childJobs(kind, parent.ID, maxPlain)
	if !store.FitsReplace(jobs) {
		t.Fatalf("FitsReplace(%d plain jobs) = false", maxPlain)
	}
	res, err := s.ReplaceChunk(ctx, parent.ID, 0, success("w", 1), jobs)
	if err != nil || !res.Applied || len(res.Created) != maxPlain {
		t.Fatalf("ReplaceChunk(%d jobs) = %d created, applied %v, %v", maxPlain, len(res.Created), res.Applied, err)
	}
	if got := children(t, s, parent.ID); len(got) != maxPlain {
		t.Errorf("%d children, want %d", len(got), maxPlain)
	}
	keyedJobs := keyed((store.MaxTransactItems - store.ReplaceChunkItems) / 3)
	if res, err := s.ReplaceChunk(ctx, parent.ID, 1, success("w", 1), keyedJobs); err != nil || len(res.Created) != len(keyedJobs) {
		t.Errorf("ReplaceChunk(%d keyed jobs) = %d created, %v", len(keyedJobs), len(res.Created), err)
	}
}

// testReplaceChunkInvalid: bad arguments are refused and write nothing.
func testReplaceChunkInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	u := uniq()
	parent := newJob("storetest.replace-invalid."+u, time.Now())
	parent.State = job.StateRunning
	create(t, s, parent)
	kind := "storetest.replace-invalid-child." + u
	existing := create(t, s, newJob(kind, time.Now()))
	for _, tc := range []struct {
		name  string
		jobID string
		index int64
		a     job.Attempt
		jobs  func() []*job.Job
		want  error
	}{
		{"RetryOutcome", parent.ID, 0, job.Attempt{Outcome: job.OutcomeRetry, Started: time.Now()}, func() []*job.Job { return childJobs(kind, parent.ID, 1) }, job.ErrInvalid},
		{"FailedOutcome", parent.ID, 0, job.Attempt{Outcome: job.OutcomeFailed, Started: time.Now()}, func() []*job.Job { return childJobs(kind, parent.ID, 1) }, job.ErrInvalid},
		{"NegativeIndex", parent.ID, -1, success("w", 1), func() []*job.Job { return childJobs(kind, parent.ID, 1) }, job.ErrInvalid},
		{"NilJob", parent.ID, 0, success("w", 1), func() []*job.Job { return []*job.Job{nil} }, job.ErrInvalid},
		{"InvalidJob", parent.ID, 0, success("w", 1), func() []*job.Job { j := childJobs(kind, parent.ID, 1); j[0].Kind = ""; return j }, job.ErrInvalid},
		{"SameID", parent.ID, 0, success("w", 1), func() []*job.Job { j := childJobs(kind, parent.ID, 2); j[1].ID = j[0].ID; return j }, job.ErrInvalid},
		{"SameUniqueKey", parent.ID, 0, success("w", 1), func() []*job.Job {
			j := childJobs(kind, parent.ID, 2)
			j[0].UniqueKey, j[1].UniqueKey = "same-"+u, "same-"+u
			return j
		}, job.ErrInvalid},
		{"ExistingID", parent.ID, 0, success("w", 1), func() []*job.Job { j := childJobs(kind, parent.ID, 2); j[1].ID = existing.ID; return j }, job.ErrConflict},
		{"MissingJob", job.NewID(time.Now()), 0, success("w", 1), func() []*job.Job { return childJobs(kind, parent.ID, 1) }, job.ErrNotFound},
	} {
		jobs := tc.jobs()
		_, err := s.ReplaceChunk(ctx, tc.jobID, tc.index, tc.a, jobs)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: ReplaceChunk = %v, want %v", tc.name, err, tc.want)
		}
		for _, j := range jobs {
			if j == nil || j.ID == existing.ID || j.ID == "" {
				continue
			}
			if _, err := s.GetJob(ctx, j.ID); !errors.Is(err, job.ErrNotFound) {
				t.Errorf("%s: job %s written: GetJob = %v", tc.name, j.ID, err)
			}
		}
	}
	if _, err := s.GetChunk(ctx, parent.ID, 0); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("refused replaces recorded the chunk: GetChunk = %v", err)
	}
	if got := get(t, s, parent.ID).Counters; got != (job.Counters{}) {
		t.Errorf("refused replaces counted: %+v", got)
	}
	if got := get(t, s, existing.ID); got.Parent != "" {
		t.Errorf("existing job overwritten: %+v", got)
	}
}

// testReplaceChunkRace: concurrent deliveries of one chunk, each with its
// own jobs: exactly one applies, and exactly its jobs exist.
func testReplaceChunkRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 8
	u := uniq()
	parent := newJob("storetest.replace-race."+u, time.Now())
	parent.State = job.StateRunning
	create(t, s, parent)
	kind := "storetest.replace-race-child." + u
	sets := make([][]*job.Job, n)
	res := make([]store.Replaced, n)
	errs := make([]error, n)
	for i := range sets {
		sets[i] = childJobs(kind, parent.ID, 3)
	}
	parallel(n, n, func(i int) {
		res[i], errs[i] = s.ReplaceChunk(ctx, parent.ID, 33, success(fmt.Sprintf("w%d", i), 3), sets[i])
	})
	winner := -1
	for i := range n {
		if errs[i] != nil {
			t.Errorf("delivery %d: %v", i, errs[i])
			continue
		}
		if res[i].Applied {
			if winner >= 0 {
				t.Errorf("deliveries %d and %d both applied", winner, i)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatal("no delivery applied")
	}
	if got := children(t, s, parent.ID); !slices.Equal(ids(got), ids(sets[winner])) {
		t.Errorf("children %v, want the winner's %v", ids(got), ids(sets[winner]))
	}
	if got := get(t, s, parent.ID).Counters; got.ChunksDone != 1 || got.ItemsDone != 3 {
		t.Errorf("counters = %+v, want one chunk of 3 items", got)
	}
}
