// Package storetest is the conformance suite every store.Store adapter
// passes: the embedded sqlitestore today, a DynamoDB adapter (run against
// emulators and DynamoDB itself) later.
//
// Conventions the suite holds adapters to, beyond the port's doc comments:
//
//   - Times come back as the same instant to within a millisecond (an
//     adapter may keep milliseconds, microseconds or nanoseconds) and in
//     UTC. Listing boundaries are tested with millisecond-aligned times,
//     which every adapter keeps exactly.
//   - CreateJob stores every field of job.Job as given, UpdatedAt and
//     Counters included.
//   - JSON fields (Args, Input.Items, Input.Spec, ChunkInput.Data) compare
//     as JSON, so an adapter may re-encode them; nil and empty slices are
//     equal.
//   - A retry attempt recorded after its chunk is terminal is a duplicate
//     delivery: not applied, not appended, not counted in Retries.
//   - A chunk's parking is replaced by each applied attempt: a terminal
//     attempt, or a retry without a retry time, clears it.
//   - GetChunk, ListChunks and ReleaseRetry report a missing job or an
//     unrecorded chunk as job.ErrNotFound.
//
// The suite needs the store's clock to read later than 2001: it checks that
// writes move UpdatedAt forward from a job created in 2001.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// Run runs the suite against the stores that newStore returns. Subtests run
// in parallel and each calls newStore once, so newStore may return a fresh
// store per subtest or handles on one shared backend: every subtest uses its
// own job ids, unique keys, kinds and tags and never assumes an empty store.
// newStore is responsible for closing what it returns (t.Cleanup).
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Helper()
	for _, st := range []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateGet", testCreateGet},
		{"CreateMinimal", testCreateMinimal},
		{"CreateExistingID", testCreateExistingID},
		{"UniqueKey", testUniqueKey},
		{"UniqueKeyRace", testUniqueKeyRace},
		{"Transition", testTransition},
		{"TransitionRace", testTransitionRace},
		{"Touch", testTouch},
		{"SetSliced", testSetSliced},
		{"Accounting", testAccounting},
		{"AccountedFlip", testAccountedFlip},
		{"ChunkDetails", testChunkDetails},
		{"ListChunks", testListChunks},
		{"ParkedRetries", testParkedRetries},
		{"Settle", testSettle},
		{"ListJobs", testListJobs},
		{"ListJobsPageSize", testListJobsPageSize},
		{"ListJobsBadCursor", testListJobsBadCursor},
		{"ReplaceChunk", testReplaceChunk},
		{"ReplaceChunkAfterRetries", testReplaceChunkAfterRetries},
		{"ReplaceChunkUniqueHeld", testReplaceChunkUniqueHeld},
		{"ReplaceChunkBudget", testReplaceChunkBudget},
		{"ReplaceChunkInvalid", testReplaceChunkInvalid},
		{"ReplaceChunkRace", testReplaceChunkRace},
		{"Dependencies", testDependencies},
		{"DependsOnInvalid", testDependsOnInvalid},
		{"ResolveRace", testResolveRace},
		{"FollowUps", testFollowUps},
		{"FollowUpCreated", testFollowUpCreated},
	} {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			st.fn(t, newStore(t))
		})
	}
}

// past is the CreatedAt and UpdatedAt of jobs whose UpdatedAt a test
// expects to move: any store clock reads later.
var past = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

func testCreateGet(t *testing.T, s store.Store) {
	ctx := context.Background()
	u := uniq()
	loc := time.FixedZone("UTC+2", 2*60*60)
	created := time.Date(2031, 5, 6, 7, 8, 9, 123456789, loc)
	at := func(d time.Duration) *time.Time { v := created.Add(d); return &v }
	full := &job.Job{
		ID:   job.NewID(created),
		Kind: "storetest.full." + u,
		Args: []byte(`{"b": [1, 2.5, "x"], "a": {"nested": null}}`),
		Input: job.Input{
			Type:    job.InputLines,
			Key:     "inputs/" + u + ".csv",
			Format:  job.FormatCSV,
			Start:   3,
			End:     1 << 40,
			Buckets: &job.Buckets{Preset: "inverse-log", Count: 12},
			Items:   []json.RawMessage{[]byte(`{"id": 1}`), []byte(`"two"`), []byte(`3`)},
			Spec:    []byte(`{"custom": true}`),
		},
		Channel:           "channel-" + u,
		UniqueKey:         "unique-" + u,
		Tags:              []string{"tag-a-" + u, "tag-b-" + u},
		ChunkSize:         1000,
		MaxAttempts:       5,
		TolerateFailedPct: 2.5,
		DependsOn:         []string{job.NewID(created.Add(-2 * time.Hour)), job.NewID(created.Add(-3 * time.Hour))},
		RunAnyway:         true,
		CallbackURL:       "https://example.com/" + u,
		DepsPending:       2,
		DepFailure:        "dependency x failed: " + u,
		FollowUp:          "token-" + u,
		State:             job.StateRunning,
		RunAt:             at(time.Minute),
		Parent:            job.NewID(created.Add(-time.Hour)),
		Counters: job.Counters{
			Sliced: true, ChunksTotal: 11, ItemsTotal: 10500,
			ChunksDone: 4, ChunksFailed: 1, ItemsDone: 4000, ItemsFailed: 900, Retries: 7,
		},
		Error:      "something broke: ünïcödé ✓",
		Result:     "results/" + u + ".json",
		CreatedAt:  created,
		UpdatedAt:  *at(2 * time.Minute),
		StartedAt:  at(3 * time.Minute),
		SlicedAt:   at(4 * time.Minute),
		FinishedAt: at(5 * time.Minute),
	}
	if zero := zeroFields(full); len(zero) > 0 {
		t.Fatalf("suite bug: the round-trip job leaves fields zero: %v", zero)
	}
	got, err := s.CreateJob(ctx, full)
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	if d := cmp.Diff(full, got, cmpOpts); d != "" {
		t.Errorf("CreateJob returned (-want +got):\n%s", d)
	}
	got, err = s.GetJob(ctx, full.ID)
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	if d := cmp.Diff(full, got, cmpOpts); d != "" {
		t.Errorf("GetJob (-want +got):\n%s", d)
	}
	checkUTC(t, got)

	missing := job.NewID(time.Now())
	if got, err := s.GetJob(ctx, missing); !errors.Is(err, job.ErrNotFound) || got != nil {
		t.Errorf("GetJob(missing) = %v, %v; want nil, ErrNotFound", got, err)
	}
}

func testCreateMinimal(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.minimal." + uniq()
	// Two jobs without a unique key: an empty key is no key.
	for range 2 {
		j := &job.Job{
			ID: job.NewID(time.Now()), Kind: kind, Input: job.Input{Type: job.InputCustom},
			State: job.StateQueued, CreatedAt: past, UpdatedAt: past,
		}
		if _, err := s.CreateJob(ctx, j); err != nil {
			t.Fatalf("CreateJob: %v", err)
		}
		got, err := s.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatalf("GetJob: %v", err)
		}
		if d := cmp.Diff(j, got, cmpOpts); d != "" {
			t.Errorf("GetJob (-want +got):\n%s", d)
		}
		if got.RunAt != nil || got.StartedAt != nil || got.SlicedAt != nil || got.FinishedAt != nil {
			t.Errorf("nil times came back set: %+v", got)
		}
	}
}

func testCreateExistingID(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := newJob("storetest.existing."+uniq(), time.Now())
	create(t, s, j)
	for _, uk := range []string{"", "fresh-" + uniq()} {
		again := *j
		again.Kind = "storetest.other." + uniq()
		again.UniqueKey = uk
		if _, err := s.CreateJob(ctx, &again); !errors.Is(err, job.ErrConflict) {
			t.Errorf("CreateJob(existing id, unique key %q) = %v, want ErrConflict", uk, err)
		}
	}
	got := get(t, s, j.ID)
	if d := cmp.Diff(j, got, cmpOpts); d != "" {
		t.Errorf("job changed by conflicting CreateJob (-want +got):\n%s", d)
	}
}

func testUniqueKey(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.unique." + uniq()
	key := "key-" + uniq()
	first := newJob(kind, time.Now())
	first.UniqueKey = key
	create(t, s, first)

	check := func(t *testing.T) {
		t.Helper()
		dup := newJob(kind, time.Now())
		dup.UniqueKey = key
		got, err := s.CreateJob(ctx, dup)
		if !errors.Is(err, job.ErrDuplicate) {
			t.Fatalf("CreateJob(same unique key) error = %v, want ErrDuplicate", err)
		}
		if got == nil || got.ID != first.ID || got.UniqueKey != key {
			t.Fatalf("CreateJob(same unique key) returned %+v, want the existing job %s", got, first.ID)
		}
		if _, err := s.GetJob(ctx, dup.ID); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("GetJob(duplicate's id) = %v, want ErrNotFound: nothing may be written", err)
		}
	}
	check(t)
	// The key stays held whatever the holder's state.
	if _, err := s.Transition(ctx, first.ID, []job.State{job.StateQueued}, job.StateCancelled, store.Patch{}); err != nil {
		t.Fatalf("Transition: %v", err)
	}
	check(t)

	other := newJob(kind, time.Now())
	other.UniqueKey = "key-" + uniq()
	create(t, s, other)
}

func testUniqueKeyRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 16
	kind := "storetest.unique-race." + uniq()
	key := "key-" + uniq()
	jobs := make([]*job.Job, n)
	got := make([]*job.Job, n)
	errs := make([]error, n)
	for i := range jobs {
		jobs[i] = newJob(kind, time.Now())
		jobs[i].UniqueKey = key
	}
	parallel(n, n, func(i int) { got[i], errs[i] = s.CreateJob(ctx, jobs[i]) })

	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("jobs %s and %s both created with unique key %q", jobs[winner].ID, jobs[i].ID, key)
			}
			winner = i
		}
	}
	if winner < 0 {
		t.Fatalf("no CreateJob won; errors: %v", errs)
	}
	for i, err := range errs {
		if i == winner {
			continue
		}
		if !errors.Is(err, job.ErrDuplicate) {
			t.Errorf("loser %d: error %v, want ErrDuplicate", i, err)
		} else if got[i] == nil || got[i].ID != jobs[winner].ID {
			t.Errorf("loser %d: returned %+v, want the winner %s", i, got[i], jobs[winner].ID)
		}
		if _, err := s.GetJob(ctx, jobs[i].ID); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("loser %d: GetJob = %v, want ErrNotFound", i, err)
		}
	}
}

func testTransition(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.transition." + uniq()
	ptr := func(v string) *string { return &v }
	at := func(d time.Duration) *time.Time {
		v := time.Date(2032, 1, 2, 3, 4, 5, 678000000, time.UTC).Add(d)
		return &v
	}
	nonTerminal := []job.State{job.StateScheduled, job.StateWaiting, job.StateQueued, job.StateRunning, job.StateFinishing}
	for _, tc := range []struct {
		name  string
		start job.State
		from  []job.State
		to    job.State
		patch store.Patch
		// conflict: the transition is not allowed.
		conflict bool
	}{
		{name: "Start", start: job.StateQueued, from: []job.State{job.StateQueued}, to: job.StateRunning,
			patch: store.Patch{StartedAt: at(0)}},
		{name: "OneOfMany", start: job.StateWaiting, from: []job.State{job.StateScheduled, job.StateWaiting, job.StateQueued}, to: job.StateQueued,
			patch: store.Patch{RunAt: at(time.Hour)}},
		{name: "FullPatch", start: job.StateFinishing, from: []job.State{job.StateFinishing}, to: job.StateFailed,
			patch: store.Patch{Error: ptr("too many failed chunks"), Result: ptr("results/x"), RunAt: at(1), StartedAt: at(2), FinishedAt: at(3)}},
		{name: "EmptyPatch", start: job.StateRunning, from: []job.State{job.StateRunning}, to: job.StateFinishing},
		{name: "EmptyStrings", start: job.StateRunning, from: []job.State{job.StateRunning}, to: job.StateSucceeded,
			patch: store.Patch{Error: ptr(""), Result: ptr("")}},
		{name: "SameState", start: job.StateRunning, from: []job.State{job.StateRunning}, to: job.StateRunning,
			patch: store.Patch{Result: ptr("partial")}},
		{name: "Disallowed", start: job.StateQueued, from: []job.State{job.StateRunning, job.StateFinishing}, to: job.StateFailed,
			patch: store.Patch{Error: ptr("x"), FinishedAt: at(0)}, conflict: true},
		{name: "FromTerminal", start: job.StateSucceeded, from: nonTerminal, to: job.StateCancelled,
			patch: store.Patch{Error: ptr("cancelled")}, conflict: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := newJob(kind, past)
			j.State = tc.start
			j.Error, j.Result = "old error", "old result"
			j.RunAt, j.StartedAt = at(-time.Hour), at(-time.Minute)
			before := create(t, s, j)

			got, err := s.Transition(ctx, j.ID, tc.from, tc.to, tc.patch)
			if tc.conflict {
				if !errors.Is(err, job.ErrConflict) {
					t.Fatalf("Transition = %v, want ErrConflict", err)
				}
				if d := cmp.Diff(before, got, cmpOpts); d != "" {
					t.Errorf("Transition did not return the current job (-want +got):\n%s", d)
				}
				if d := cmp.Diff(before, get(t, s, j.ID), cmpOpts); d != "" {
					t.Errorf("refused Transition wrote (-before +after):\n%s", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("Transition: %v", err)
			}
			want := *before
			want.State = tc.to
			if p := tc.patch; p.Error != nil {
				want.Error = *p.Error
			}
			if p := tc.patch; p.Result != nil {
				want.Result = *p.Result
			}
			if p := tc.patch; p.RunAt != nil {
				want.RunAt = p.RunAt
			}
			if p := tc.patch; p.StartedAt != nil {
				want.StartedAt = p.StartedAt
			}
			if p := tc.patch; p.FinishedAt != nil {
				want.FinishedAt = p.FinishedAt
			}
			if tc.to.Terminal() {
				// A terminal transition owes follow-up work: a fresh token.
				if got.FollowUp == "" {
					t.Errorf("Transition to %s set no follow-up token", tc.to)
				}
				want.FollowUp = got.FollowUp
			}
			if d := cmp.Diff(&want, got, cmpOpts, ignoreUpdated); d != "" {
				t.Errorf("Transition returned (-want +got):\n%s", d)
			}
			if !got.UpdatedAt.After(before.UpdatedAt) {
				t.Errorf("UpdatedAt = %v, want later than %v", got.UpdatedAt, before.UpdatedAt)
			}
			if d := cmp.Diff(got, get(t, s, j.ID), cmpOpts); d != "" {
				t.Errorf("GetJob differs from Transition's answer (-returned +stored):\n%s", d)
			}
		})
	}

	t.Run("Missing", func(t *testing.T) {
		t.Parallel()
		_, err := s.Transition(ctx, job.NewID(time.Now()), []job.State{job.StateQueued}, job.StateRunning, store.Patch{})
		if !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Transition(missing) = %v, want ErrNotFound", err)
		}
	})
}

func testTransitionRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	const n = 16
	j := newJob("storetest.transition-race."+uniq(), time.Now())
	j.State = job.StateRunning
	create(t, s, j)
	got := make([]*job.Job, n)
	errs := make([]error, n)
	parallel(n, n, func(i int) {
		got[i], errs[i] = s.Transition(ctx, j.ID, []job.State{job.StateRunning}, job.StateFinishing, store.Patch{})
	})
	wins := 0
	for i, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, job.ErrConflict):
			t.Errorf("Transition %d: %v, want nil or ErrConflict", i, err)
		case got[i] == nil || got[i].State != job.StateFinishing:
			t.Errorf("Transition %d: conflict returned %+v, want the job in state finishing", i, got[i])
		}
	}
	if wins != 1 {
		t.Errorf("%d racing transitions succeeded, want exactly 1", wins)
	}
	if st := get(t, s, j.ID).State; st != job.StateFinishing {
		t.Errorf("state = %s, want finishing", st)
	}
}

func testTouch(t *testing.T, s store.Store) {
	ctx := context.Background()
	before := create(t, s, newJob("storetest.touch."+uniq(), past))
	if err := s.Touch(ctx, before.ID); err != nil {
		t.Fatalf("Touch: %v", err)
	}
	after := get(t, s, before.ID)
	if !after.UpdatedAt.After(before.UpdatedAt) {
		t.Errorf("UpdatedAt = %v, want later than %v", after.UpdatedAt, before.UpdatedAt)
	}
	if d := cmp.Diff(before, after, cmpOpts, ignoreUpdated); d != "" {
		t.Errorf("Touch changed more than UpdatedAt (-before +after):\n%s", d)
	}
	if err := s.Touch(ctx, job.NewID(time.Now())); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Touch(missing) = %v, want ErrNotFound", err)
	}
}

func testSetSliced(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := newJob("storetest.sliced."+uniq(), past)
	j.State = job.StateRunning
	before := create(t, s, j)

	got, err := s.SetSliced(ctx, j.ID, 10, 1234)
	if err != nil {
		t.Fatalf("SetSliced: %v", err)
	}
	want := before.Counters
	want.Sliced, want.ChunksTotal, want.ItemsTotal = true, 10, 1234
	if d := cmp.Diff(want, got.Counters); d != "" {
		t.Errorf("counters after SetSliced (-want +got):\n%s", d)
	}
	if d := cmp.Diff(before, got, cmpOpts, ignoreUpdated, cmpopts.IgnoreFields(job.Job{}, "Counters", "SlicedAt")); d != "" {
		t.Errorf("SetSliced changed more than the slicing fields (-before +after):\n%s", d)
	}
	sliced := get(t, s, j.ID)
	if d := cmp.Diff(got, sliced, cmpOpts); d != "" {
		t.Errorf("GetJob differs from SetSliced's answer (-returned +stored):\n%s", d)
	}

	again, err := s.SetSliced(ctx, j.ID, 10, 1234)
	if err != nil {
		t.Fatalf("SetSliced again with the same totals: %v", err)
	}
	if d := cmp.Diff(sliced, again, cmpOpts); d != "" {
		t.Errorf("SetSliced again returned (-want +got):\n%s", d)
	}
	for _, tc := range []struct {
		name          string
		chunks, items int64
	}{{"Chunks", 11, 1234}, {"Items", 10, 1235}, {"Both", 0, 0}} {
		if _, err := s.SetSliced(ctx, j.ID, tc.chunks, tc.items); !errors.Is(err, job.ErrConflict) {
			t.Errorf("SetSliced with different totals (%s) = %v, want ErrConflict", tc.name, err)
		}
	}
	if d := cmp.Diff(sliced, get(t, s, j.ID), cmpOpts); d != "" {
		t.Errorf("no-op or refused SetSliced wrote (-before +after):\n%s", d)
	}
	if _, err := s.SetSliced(ctx, job.NewID(time.Now()), 1, 1); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("SetSliced(missing) = %v, want ErrNotFound", err)
	}
}

// Settle reflects every recorded outcome in the job's counters, however
// often it is called, and reports a missing job.
func testSettle(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := newJob("storetest.settle."+uniq(), time.Now())
	j.State = job.StateRunning
	create(t, s, j)
	for i := int64(0); i < 3; i++ {
		a := job.Attempt{Outcome: job.OutcomeSucceeded, Worker: "w", Started: time.Now().UTC(), Items: 2}
		if _, err := s.RecordAttempt(ctx, j.ID, i, a, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.SetSliced(ctx, j.ID, 3, 6); err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		for i := int64(0); i < 3; i++ {
			got, err := s.Settle(ctx, j.ID, i)
			if err != nil {
				t.Fatal(err)
			}
			if got.Counters.ChunksDone != 3 || got.Counters.ItemsDone != 6 || !got.Counters.Accounted() {
				t.Fatalf("Settle(%d) round %d: counters %+v, want 3 chunks and 6 items accounted", i, round, got.Counters)
			}
		}
	}
	if _, err := s.Settle(ctx, job.NewID(time.Now()), 0); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Settle(missing job) = %v, want ErrNotFound", err)
	}
}
