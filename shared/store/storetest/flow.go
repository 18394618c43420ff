package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// edges returns the dependants of id, failing the test on error.
func edges(t *testing.T, s store.Store, id string) []store.Edge {
	t.Helper()
	got, err := s.Dependants(context.Background(), id)
	if err != nil {
		t.Fatalf("Dependants(%s): %v", id, err)
	}
	return got
}

func testDependencies(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.deps." + uniq()
	a, b := create(t, s, newJob(kind, time.Now())), create(t, s, newJob(kind, time.Now()))
	x := newJob(kind, time.Now())
	x.State = job.StateWaiting
	x.DependsOn = []string{a.ID, b.ID}
	x.RunAnyway = true
	x.CallbackURL = "https://example.com/hook?job=1"
	x.DepsPending = 7 // the store counts the edges instead
	want := *x
	want.DepsPending = 2
	got := create(t, s, x)
	if d := cmp.Diff(&want, got, cmpOpts); d != "" {
		t.Fatalf("CreateJob with dependencies returned (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&want, get(t, s, x.ID), cmpOpts); d != "" {
		t.Fatalf("GetJob (-want +got):\n%s", d)
	}
	for _, dep := range []string{a.ID, b.ID} {
		if d := cmp.Diff([]store.Edge{{Dependant: x.ID}}, edges(t, s, dep)); d != "" {
			t.Errorf("Dependants(%s) (-want +got):\n%s", dep, d)
		}
	}
	if got := edges(t, s, x.ID); len(got) != 0 {
		t.Errorf("Dependants of a job nobody depends on = %v, want none", got)
	}

	steps := []struct {
		name    string
		dep     string
		failure string
		applied bool
		pending int
		failed  string
	}{
		{"First", a.ID, "", true, 1, ""},
		{"Again", a.ID, "dependency a failed: late", false, 1, ""},
		{"FailedDependency", b.ID, "dependency b failed: boom", true, 0, "dependency b failed: boom"},
		{"AgainFailed", b.ID, "dependency b failed: other", false, 0, "dependency b failed: boom"},
	}
	for _, st := range steps {
		r, err := s.ResolveDependency(ctx, x.ID, st.dep, st.failure)
		if err != nil {
			t.Fatalf("%s: ResolveDependency: %v", st.name, err)
		}
		if r.Applied != st.applied || r.Job == nil || r.Job.DepsPending != st.pending || r.Job.DepFailure != st.failed {
			t.Fatalf("%s: ResolveDependency = applied %v, job %+v; want applied %v, %d pending, failure %q",
				st.name, r.Applied, r.Job, st.applied, st.pending, st.failed)
		}
		if g := get(t, s, x.ID); g.DepsPending != st.pending || g.DepFailure != st.failed || g.State != job.StateWaiting {
			t.Fatalf("%s: GetJob: %d pending, failure %q, state %s", st.name, g.DepsPending, g.DepFailure, g.State)
		}
	}
	if d := cmp.Diff([]store.Edge{{Dependant: x.ID, Resolved: true}}, edges(t, s, a.ID)); d != "" {
		t.Errorf("Dependants after resolving (-want +got):\n%s", d)
	}

	// The first failure stays; one job may be depended on by many.
	y := newJob(kind, time.Now())
	y.State = job.StateWaiting
	y.DependsOn = []string{b.ID, a.ID}
	create(t, s, y)
	want2 := []store.Edge{{Dependant: x.ID, Resolved: true}, {Dependant: y.ID}}
	slices.SortFunc(want2, func(p, q store.Edge) int { return cmpString(p.Dependant, q.Dependant) })
	if d := cmp.Diff(want2, edges(t, s, b.ID)); d != "" {
		t.Errorf("Dependants of a job with two dependants (-want +got):\n%s", d)
	}
	for i, dep := range []string{a.ID, b.ID} {
		r, err := s.ResolveDependency(ctx, y.ID, dep, fmt.Sprintf("failure %d", i))
		if err != nil || !r.Applied {
			t.Fatalf("ResolveDependency(%s): %+v, %v", dep, r, err)
		}
	}
	if g := get(t, s, y.ID); g.DepFailure != "failure 0" || g.DepsPending != 0 {
		t.Errorf("after two failed dependencies: failure %q, %d pending; want the first, 0", g.DepFailure, g.DepsPending)
	}

	for _, tc := range []struct{ name, dependant, dep string }{
		{"NoEdge", x.ID, y.ID},
		{"MissingDependant", job.NewID(time.Now()), a.ID},
	} {
		if _, err := s.ResolveDependency(ctx, tc.dependant, tc.dep, ""); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("%s: ResolveDependency = %v, want ErrNotFound", tc.name, err)
		}
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func testDependsOnInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.deps-invalid." + uniq()
	dep := create(t, s, newJob(kind, time.Now()))
	tooMany := make([]string, store.MaxDependsOn+1)
	for i := range tooMany {
		tooMany[i] = job.NewID(time.Now())
	}
	for _, tc := range []struct {
		name string
		deps func(self string) []string
	}{
		{"TooMany", func(string) []string { return tooMany }},
		{"Empty", func(string) []string { return []string{dep.ID, ""} }},
		{"Duplicate", func(string) []string { return []string{dep.ID, dep.ID} }},
		{"Self", func(self string) []string { return []string{dep.ID, self} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := newJob(kind, time.Now())
			j.State = job.StateWaiting
			j.DependsOn = tc.deps(j.ID)
			if _, err := s.CreateJob(ctx, j); !errors.Is(err, job.ErrInvalid) {
				t.Fatalf("CreateJob = %v, want ErrInvalid", err)
			}
			if _, err := s.GetJob(ctx, j.ID); !errors.Is(err, job.ErrNotFound) {
				t.Errorf("GetJob after a rejected CreateJob = %v, want ErrNotFound", err)
			}
		})
	}
	if got := edges(t, s, dep.ID); len(got) != 0 {
		t.Errorf("rejected jobs left edges: %v", got)
	}
	// Exactly MaxDependsOn is fine.
	j := newJob(kind, time.Now())
	j.State = job.StateWaiting
	j.DependsOn = tooMany[:store.MaxDependsOn]
	if got := create(t, s, j); got.DepsPending != store.MaxDependsOn {
		t.Errorf("DepsPending = %d, want %d", got.DepsPending, store.MaxDependsOn)
	}
}

// Many processes resolve the edges of one dependant at once, each edge
// more than once: each counts exactly once.
func testResolveRace(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.deps-race." + uniq()
	const deps, copies = 6, 3
	var ids []string
	for range deps {
		ids = append(ids, create(t, s, newJob(kind, time.Now())).ID)
	}
	x := newJob(kind, time.Now())
	x.State = job.StateWaiting
	x.DependsOn = ids
	create(t, s, x)
	var applied atomic.Int32
	errs := make([]error, deps*copies)
	parallel(deps*copies, deps*copies, func(i int) {
		r, err := s.ResolveDependency(ctx, x.ID, ids[i%deps], "")
		errs[i] = err
		if err == nil && r.Applied {
			applied.Add(1)
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("ResolveDependency: %v", err)
	}
	if n := applied.Load(); n != deps {
		t.Errorf("%d resolutions applied, want %d", n, deps)
	}
	if g := get(t, s, x.ID); g.DepsPending != 0 {
		t.Errorf("DepsPending = %d, want 0", g.DepsPending)
	}
}

// hasFollowUp reports whether FollowUps(before) lists job id.
func hasFollowUp(t *testing.T, s store.Store, before time.Time, id string) bool {
	t.Helper()
	got, err := s.FollowUps(context.Background(), before, job.MaxPageSize)
	if err != nil {
		t.Fatalf("FollowUps: %v", err)
	}
	for i, j := range got {
		if j.FollowUp == "" {
			t.Errorf("FollowUps listed job %s without a token", j.ID)
		}
		if i > 0 && j.ID == got[i-1].ID {
			t.Errorf("FollowUps listed job %s twice", j.ID)
		}
	}
	return slices.ContainsFunc(got, func(j *job.Job) bool { return j.ID == id })
}

func testFollowUps(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.follow-up." + uniq()
	later := time.Now().Add(time.Hour)
	for _, to := range []job.State{job.StateSucceeded, job.StateFailed, job.StateCancelled} {
		t.Run(string(to), func(t *testing.T) {
			t.Parallel()
			j := create(t, s, newJob(kind, time.Now()))
			if j.FollowUp != "" {
				t.Fatalf("new job has follow-up token %q", j.FollowUp)
			}
			run, err := s.Transition(ctx, j.ID, []job.State{job.StateQueued}, job.StateRunning, store.Patch{})
			if err != nil || run.FollowUp != "" {
				t.Fatalf("non-terminal Transition: token %q, %v; want none", run.FollowUp, err)
			}
			done, err := s.Transition(ctx, j.ID, []job.State{job.StateRunning}, to, store.Patch{})
			if err != nil {
				t.Fatalf("Transition to %s: %v", to, err)
			}
			if done.FollowUp == "" || get(t, s, j.ID).FollowUp != done.FollowUp {
				t.Fatalf("terminal Transition set token %q, GetJob has %q; want the same, non-empty", done.FollowUp, get(t, s, j.ID).FollowUp)
			}
			if !hasFollowUp(t, s, later, j.ID) {
				t.Errorf("FollowUps does not list job %s", j.ID)
			}
			if hasFollowUp(t, s, past, j.ID) {
				t.Errorf("FollowUps before the token was set lists job %s", j.ID)
			}
			for _, tc := range []struct {
				name, id, token string
				want            error
			}{
				{"WrongToken", j.ID, done.FollowUp + "x", job.ErrConflict},
				{"Missing", job.NewID(time.Now()), done.FollowUp, job.ErrNotFound},
				{"Clear", j.ID, done.FollowUp, nil},
				{"Again", j.ID, done.FollowUp, job.ErrConflict},
			} {
				if err := s.ClearFollowUp(ctx, tc.id, tc.token); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
					t.Errorf("%s: ClearFollowUp = %v, want %v", tc.name, err, tc.want)
				}
			}
			after := get(t, s, j.ID)
			if after.FollowUp != "" || after.State != to {
				t.Errorf("after clearing: token %q, state %s", after.FollowUp, after.State)
			}
			if hasFollowUp(t, s, later, j.ID) {
				t.Errorf("FollowUps lists job %s after its token was cleared", j.ID)
			}
		})
	}
	t.Run("BadLimit", func(t *testing.T) {
		t.Parallel()
		if _, err := s.FollowUps(ctx, later, -1); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("FollowUps(limit -1) = %v, want ErrInvalid", err)
		}
	})
}

// A token given to CreateJob is stored and counts as set at CreatedAt.
func testFollowUpCreated(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.follow-up-created." + uniq()
	dep := create(t, s, newJob(kind, past))
	j := newJob(kind, past)
	j.State = job.StateWaiting
	j.DependsOn = []string{dep.ID}
	j.FollowUp = "check-" + uniq()
	got := create(t, s, j)
	if got.FollowUp != j.FollowUp {
		t.Fatalf("CreateJob stored token %q, want %q", got.FollowUp, j.FollowUp)
	}
	if !hasFollowUp(t, s, past.Add(time.Millisecond), j.ID) {
		t.Errorf("FollowUps(CreatedAt) does not list job %s", j.ID)
	}
	if hasFollowUp(t, s, past.Add(-time.Second), j.ID) {
		t.Errorf("FollowUps before CreatedAt lists job %s", j.ID)
	}
	// A dependency resolving does not touch the token; clearing does.
	if _, err := s.ResolveDependency(ctx, j.ID, dep.ID, ""); err != nil {
		t.Fatal(err)
	}
	if g := get(t, s, j.ID); g.FollowUp != j.FollowUp || g.DepsPending != 0 {
		t.Errorf("after resolving: token %q, %d pending", g.FollowUp, g.DepsPending)
	}
	if err := s.ClearFollowUp(ctx, j.ID, j.FollowUp); err != nil {
		t.Fatal(err)
	}
	if hasFollowUp(t, s, past.Add(time.Millisecond), j.ID) {
		t.Errorf("FollowUps lists job %s after clearing", j.ID)
	}
}
