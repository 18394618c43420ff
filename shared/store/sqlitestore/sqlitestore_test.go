package sqlitestore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
	"github.com/slicework/slicework/shared/store/sqlitestore"
	"github.com/slicework/slicework/shared/store/storetest"
)

func open(t testing.TB, path string, opts ...sqlitestore.Option) *sqlitestore.Store {
	t.Helper()
	s, err := sqlitestore.Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return open(t, filepath.Join(t.TempDir(), "store.db"))
	})
}

// TestConformanceSharedFile runs the suite with every subtest on one file,
// as a shared backend would be.
func TestConformanceSharedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, path) })
}

func newJob(kind string) *job.Job {
	now := time.Now()
	return &job.Job{ID: job.NewID(now), Kind: kind, Channel: "default", State: job.StateRunning, CreatedAt: now, UpdatedAt: now}
}

func succeeded(items int64) job.Attempt {
	return job.Attempt{Outcome: job.OutcomeSucceeded, Worker: "w", Started: time.Now(), Items: items}
}

func TestReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sub", "store.db")
	s, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	j := newJob("reopen")
	j.UniqueKey = "reopen-key"
	j.Tags = []string{"t"}
	if _, err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordAttempt(ctx, j.ID, 0, succeeded(5), nil, nil); err != nil {
		t.Fatal(err)
	}
	retryAt := time.Now().Add(time.Hour)
	task := &job.ChunkTask{JobID: j.ID, Kind: j.Kind, Index: 1, Input: job.ChunkInput{Start: 10, End: 20}}
	if _, err := s.RecordAttempt(ctx, j.ID, 1, job.Attempt{Outcome: job.OutcomeRetry, Started: time.Now()}, &retryAt, task); err != nil {
		t.Fatal(err)
	}
	wantJob, err := s.SetSliced(ctx, j.ID, 2, 15)
	if err != nil {
		t.Fatal(err)
	}
	wantChunks, err := s.ListChunks(ctx, j.ID, job.ChunkQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetJob(ctx, j.ID); err == nil {
		t.Error("GetJob after Close succeeded")
	}

	s = open(t, path)
	gotJob, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantJob, gotJob); d != "" {
		t.Errorf("job after reopen (-want +got):\n%s", d)
	}
	gotChunks, err := s.ListChunks(ctx, j.ID, job.ChunkQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(wantChunks, gotChunks); d != "" {
		t.Errorf("chunks after reopen (-want +got):\n%s", d)
	}
	due, err := s.DueRetries(ctx, retryAt, 10)
	if err != nil || len(due) != 1 || due[0].Index != 1 || due[0].Task == nil {
		t.Errorf("DueRetries after reopen = %v, %v", due, err)
	}
	dup := newJob("reopen")
	dup.UniqueKey = "reopen-key"
	if _, err := s.CreateJob(ctx, dup); !errors.Is(err, job.ErrDuplicate) {
		t.Errorf("unique key after reopen: %v, want ErrDuplicate", err)
	}
}

// TestTwoStoresOneFile races RecordAttempt through two *Store values on one
// file, as two processes would, with every terminal outcome delivered to both.
func TestTwoStoresOneFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "store.db")
	stores := []*sqlitestore.Store{open(t, path), open(t, path)}
	j := newJob("two-stores")
	if _, err := stores[0].CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	const chunks = 100
	var (
		mu      sync.Mutex
		applied = map[int64]int{}
		retries int64
		wg      sync.WaitGroup
	)
	for si, s := range stores {
		for w := range 4 {
			wg.Go(func() {
				for i := int64(w); i < chunks; i += 4 {
					if (i+int64(si))%3 == 0 {
						r, err := s.RecordAttempt(ctx, j.ID, i, job.Attempt{Outcome: job.OutcomeRetry, Started: time.Now()}, nil, nil)
						if err != nil {
							t.Error(err)
							return
						}
						if r.Applied {
							mu.Lock()
							retries++
							mu.Unlock()
						}
					}
					r, err := s.RecordAttempt(ctx, j.ID, i, succeeded(i), nil, nil)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Applied {
						mu.Lock()
						applied[i]++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	var wantItems int64
	for i := range int64(chunks) {
		wantItems += i
		if applied[i] != 1 {
			t.Errorf("chunk %d applied %d times", i, applied[i])
		}
	}
	for _, s := range stores {
		got, err := s.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := job.Counters{ChunksDone: chunks, ItemsDone: wantItems, Retries: retries}
		if got.Counters != want {
			t.Errorf("counters = %+v, want %+v", got.Counters, want)
		}
	}
}

func TestClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := clock.NewFake(time.Date(2040, 1, 2, 3, 4, 5, 0, time.UTC))
	s := open(t, filepath.Join(t.TempDir(), "store.db"), sqlitestore.WithClock(fake))
	j := newJob("clock")
	if _, err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	check := func(what string, got time.Time) {
		t.Helper()
		if !got.Equal(fake.Now()) {
			t.Errorf("%s = %v, want the fake now %v", what, got, fake.Now())
		}
	}
	fake.Advance(time.Minute)
	got, err := s.Transition(ctx, j.ID, []job.State{job.StateRunning}, job.StateRunning, store.Patch{})
	if err != nil {
		t.Fatal(err)
	}
	check("UpdatedAt after Transition", got.UpdatedAt)
	fake.Advance(time.Minute)
	if err := s.Touch(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	got, _ = s.GetJob(ctx, j.ID)
	check("UpdatedAt after Touch", got.UpdatedAt)
	fake.Advance(time.Minute)
	if got, err = s.SetSliced(ctx, j.ID, 1, 1); err != nil {
		t.Fatal(err)
	}
	check("UpdatedAt after SetSliced", got.UpdatedAt)
	if got.SlicedAt == nil {
		t.Fatal("SlicedAt not set")
	}
	check("SlicedAt", *got.SlicedAt)
	fake.Advance(time.Minute)
	r, err := s.RecordAttempt(ctx, j.ID, 0, job.Attempt{Outcome: job.OutcomeRetry}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	check("chunk UpdatedAt", r.Chunk.UpdatedAt)
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "store.db"))
	j := newJob("invalid")
	if _, err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	task := &job.ChunkTask{JobID: j.ID}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"NilJob", func() error { _, err := s.CreateJob(ctx, nil); return err }},
		{"NoID", func() error { x := newJob("k"); x.ID = ""; _, err := s.CreateJob(ctx, x); return err }},
		{"NoKind", func() error { x := newJob(""); _, err := s.CreateJob(ctx, x); return err }},
		{"BadState", func() error { x := newJob("k"); x.State = "bogus"; _, err := s.CreateJob(ctx, x); return err }},
		{"NoCreatedAt", func() error { x := newJob("k"); x.CreatedAt = time.Time{}; _, err := s.CreateJob(ctx, x); return err }},
		{"BadArgs", func() error { x := newJob("k"); x.Args = []byte("{"); _, err := s.CreateJob(ctx, x); return err }},
		{"TransitionNoFrom", func() error { _, err := s.Transition(ctx, j.ID, nil, job.StateQueued, store.Patch{}); return err }},
		{"TransitionBadTo", func() error {
			_, err := s.Transition(ctx, j.ID, []job.State{job.StateRunning}, "bogus", store.Patch{})
			return err
		}},
		{"TransitionBadFrom", func() error {
			_, err := s.Transition(ctx, j.ID, []job.State{"bogus"}, job.StateQueued, store.Patch{})
			return err
		}},
		{"NegativeTotals", func() error { _, err := s.SetSliced(ctx, j.ID, -1, 0); return err }},
		{"NegativeIndex", func() error { _, err := s.RecordAttempt(ctx, j.ID, -1, succeeded(1), nil, nil); return err }},
		{"BadOutcome", func() error {
			_, err := s.RecordAttempt(ctx, j.ID, 0, job.Attempt{Outcome: "maybe"}, nil, nil)
			return err
		}},
		{"ParkTerminal", func() error { _, err := s.RecordAttempt(ctx, j.ID, 0, succeeded(1), &now, task); return err }},
		{"ParkWithoutTask", func() error {
			_, err := s.RecordAttempt(ctx, j.ID, 0, job.Attempt{Outcome: job.OutcomeRetry}, &now, nil)
			return err
		}},
		{"NegativeLimit", func() error { _, err := s.ListJobs(ctx, job.Query{Limit: -1}); return err }},
		{"NegativeChunkLimit", func() error { _, err := s.ListChunks(ctx, j.ID, job.ChunkQuery{Limit: -1}); return err }},
		{"BadChunkState", func() error { _, err := s.ListChunks(ctx, j.ID, job.ChunkQuery{State: "bogus"}); return err }},
		{"NegativeChunkCursor", func() error {
			// base64url("c1:-5")
			_, err := s.ListChunks(ctx, j.ID, job.ChunkQuery{Cursor: "YzE6LTU"})
			return err
		}},
		{"EmptyJobCursor", func() error { _, err := s.ListJobs(ctx, job.Query{Cursor: "ajE6"}); return err }}, // base64url("j1:")
		{"NegativeDueLimit", func() error { _, err := s.DueRetries(ctx, now, -1); return err }},
	} {
		if err := tc.call(); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.name, err)
		}
	}
	if _, err := s.GetChunk(ctx, j.ID, 0); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("an invalid RecordAttempt wrote a chunk: %v", err)
	}
}

// killEnv names the database file when the test binary runs as the child
// of TestKilledMidWrite.
const killEnv = "SQLITESTORE_KILL_DB"

// TestKilledMidWrite kills a process with SIGKILL while it records attempts
// as fast as it can, then checks that the file is consistent: every chunk
// record is matched by exactly its share of the job's counters.
func TestKilledMidWrite(t *testing.T) {
	if path := os.Getenv(killEnv); path != "" {
		writeForever(path)
		return
	}
	if testing.Short() {
		t.Skip("spawns a process")
	}
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "store.db")
	s := open(t, path)
	j := newJob("killed")
	if _, err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledMidWrite$")
	cmd.Env = append(os.Environ(), killEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	// Kill once the child reports that it has written for a while.
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "busy" {
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	s = open(t, path)
	got, err := s.GetJob(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	var want job.Counters
	q := job.ChunkQuery{Limit: job.MaxPageSize}
	for {
		page, err := s.ListChunks(ctx, j.ID, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page.Chunks {
			for _, a := range c.Attempts {
				switch a.Outcome {
				case job.OutcomeRetry:
					want.Retries++
				case job.OutcomeSucceeded:
					want.ChunksDone++
					want.ItemsDone += a.Items
				}
			}
		}
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	if want.ChunksDone < 100 {
		t.Fatalf("child recorded only %d chunks before it was killed", want.ChunksDone)
	}
	if got.Counters != want {
		t.Errorf("counters %+v, chunk records say %+v", got.Counters, want)
	}
}

// writeForever records a retry and a success for chunk after chunk of the
// only job in the file at path, reporting "busy" on stdout after 100 chunks,
// until it is killed (or, should the parent have died, for a minute).
func writeForever(path string) {
	ctx := context.Background()
	s, err := sqlitestore.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	page, err := s.ListJobs(ctx, job.Query{Kind: "killed"})
	if err != nil || len(page.Jobs) != 1 {
		fmt.Fprintln(os.Stderr, "no job:", err)
		os.Exit(2)
	}
	id := page.Jobs[0].ID
	stop := time.Now().Add(time.Minute)
	for i := int64(0); time.Now().Before(stop); i++ {
		if _, err := s.RecordAttempt(ctx, id, i, job.Attempt{Outcome: job.OutcomeRetry, Started: time.Now()}, nil, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if _, err := s.RecordAttempt(ctx, id, i, succeeded(i%10+1), nil, nil); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if i == 100 {
			fmt.Println("busy")
		}
	}
}

// BenchmarkRecordAttempt records one succeeded attempt per chunk, each on a
// new chunk of one job, and reports chunks per second.
func BenchmarkRecordAttempt(b *testing.B) {
	ctx := context.Background()
	s := open(b, filepath.Join(b.TempDir(), "store.db"))
	j := newJob("bench")
	if _, err := s.CreateJob(ctx, j); err != nil {
		b.Fatal(err)
	}
	a := succeeded(10)
	var i int64
	for b.Loop() {
		if _, err := s.RecordAttempt(ctx, j.ID, i, a, nil, nil); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "chunks/s")
}
