package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// matches is the reference semantics of job.Query's filters.
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

// listAll pages through ListJobs from q's cursor to the end and returns
// every job listed, failing the test if a page is over the limit or the
// listing does not end within maxPages.
func listAll(t *testing.T, s store.Store, q job.Query, maxPages int) []*job.Job {
	t.Helper()
	var out []*job.Job
	for range maxPages {
		page, err := s.ListJobs(context.Background(), q)
		if err != nil {
			t.Fatalf("ListJobs(%+v): %v", q, err)
		}
		if q.Limit > 0 && len(page.Jobs) > q.Limit {
			t.Fatalf("page of %d jobs, limit %d", len(page.Jobs), q.Limit)
		}
		out = append(out, page.Jobs...)
		if page.Next == "" {
			return out
		}
		q.Cursor = page.Next
	}
	t.Fatalf("ListJobs(%+v) did not end within %d pages", q, maxPages)
	return nil
}

func testListJobs(t *testing.T, s store.Store) {
	u := uniq()
	kind, otherKind := "storetest.list."+u, "storetest.list-other."+u
	tagA, tagB := "tag-a-"+u, "tag-b-"+u
	parentA, parentB := job.NewID(time.Now()), job.NewID(time.Now())
	base := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Millisecond)
	states := []job.State{job.StateQueued, job.StateRunning, job.StateSucceeded}
	const n = 12
	created := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }
	runAt := func(i int) time.Time { return base.Add(time.Duration(i) * 10 * time.Second) }
	updated := func(i int) time.Time { return base.Add(time.Hour + time.Duration(i*7%n)*time.Second) }
	var all []*job.Job
	for i := range n {
		j := newJob(kind, created(i))
		j.State = states[i%3]
		if i%2 == 0 {
			j.Tags = append(j.Tags, tagA)
		}
		if i%3 == 0 {
			j.Tags = append(j.Tags, tagB)
		}
		if i%4 != 0 {
			r := runAt(i)
			j.RunAt = &r
		}
		switch i % 5 {
		case 1, 2, 4:
			j.Parent = parentA
		case 3:
			j.Parent = parentB
		}
		j.UpdatedAt = updated(i)
		all = append(all, create(t, s, j))
	}
	// A job of another kind that carries both tags.
	decoy := newJob(otherKind, created(n))
	decoy.Tags = []string{tagA, tagB}
	decoy.Parent = parentA
	all = append(all, create(t, s, decoy))
	slices.SortFunc(all, func(a, b *job.Job) int { return strings.Compare(b.ID, a.ID) })

	far := base.Add(100 * 24 * time.Hour)
	for _, tc := range []struct {
		name string
		q    job.Query
	}{
		{"Kind", job.Query{Kind: kind}},
		{"OtherKind", job.Query{Kind: otherKind}},
		{"KindState", job.Query{Kind: kind, State: job.StateRunning}},
		{"KindStateNone", job.Query{Kind: kind, State: job.StateFailed}},
		{"Tag", job.Query{Tag: tagA}},
		{"TagKind", job.Query{Tag: tagB, Kind: kind}},
		{"TagState", job.Query{Tag: tagB, State: job.StateQueued}},
		{"CreatedAfterInclusive", job.Query{Kind: kind, CreatedAfter: created(3)}},
		{"CreatedBeforeExclusive", job.Query{Kind: kind, CreatedBefore: created(8)}},
		{"CreatedBetween", job.Query{Kind: kind, CreatedAfter: created(3), CreatedBefore: created(8)}},
		{"RunAtBeforeInclusive", job.Query{Kind: kind, RunAtBefore: runAt(5)}},
		{"UpdatedBeforeExclusive", job.Query{Kind: kind, UpdatedBefore: updated(6)}},
		{"Combined", job.Query{Tag: tagA, State: job.StateQueued, CreatedAfter: created(1), RunAtBefore: far, UpdatedBefore: far}},
		{"Parent", job.Query{Parent: parentA}},
		{"OtherParent", job.Query{Parent: parentB}},
		{"ParentKind", job.Query{Parent: parentA, Kind: kind}},
		{"ParentState", job.Query{Parent: parentA, State: job.StateRunning}},
		{"ParentTerminalState", job.Query{Parent: parentA, State: job.StateSucceeded}},
		{"ParentTag", job.Query{Parent: parentA, Tag: tagB}},
		{"ParentCreatedBetween", job.Query{Parent: parentA, CreatedAfter: created(2), CreatedBefore: created(9)}},
		{"ParentUpdatedBefore", job.Query{Parent: parentA, Kind: kind, UpdatedBefore: updated(6)}},
		{"ParentRunAtBefore", job.Query{Parent: parentA, RunAtBefore: runAt(7)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var want []*job.Job
			for _, j := range all {
				if matches(tc.q, j) {
					want = append(want, j)
				}
			}
			if tc.name != "KindStateNone" && (len(want) == 0 || len(want) == len(all)) {
				t.Fatalf("suite bug: filter %s selects %d of %d jobs", tc.name, len(want), len(all))
			}
			for _, limit := range []int{1, 3, 1000} {
				q := tc.q
				q.Limit = limit
				got := listAll(t, s, q, len(all)+2)
				if d := cmp.Diff(want, got, cmpOpts); d != "" {
					t.Errorf("limit %d: listed jobs (-want +got):\n%s", limit, d)
				}
			}
		})
	}
}

func testListJobsPageSize(t *testing.T, s store.Store) {
	ctx := context.Background()
	kind := "storetest.page-size." + uniq()
	const n = job.MaxPageSize + 1
	parallel(8, n, func(int) {
		if _, err := s.CreateJob(ctx, newJob(kind, time.Now())); err != nil {
			t.Errorf("CreateJob: %v", err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	for _, tc := range []struct {
		name  string
		limit int
		want  int
	}{
		{"Default", 0, job.DefaultPageSize},
		{"Max", job.MaxPageSize, job.MaxPageSize},
		{"OverMax", job.MaxPageSize + 1, job.MaxPageSize},
		{"FarOverMax", 1 << 30, job.MaxPageSize},
	} {
		page, err := s.ListJobs(ctx, job.Query{Kind: kind, Limit: tc.limit})
		if err != nil {
			t.Fatalf("ListJobs(limit %d): %v", tc.limit, err)
		}
		if len(page.Jobs) != tc.want || page.Next == "" {
			t.Errorf("%s: ListJobs(limit %d) = %d jobs, next %q; want %d and a next page", tc.name, tc.limit, len(page.Jobs), page.Next, tc.want)
		}
	}
	got := listAll(t, s, job.Query{Kind: kind, Limit: 1 << 30}, 3)
	seen := map[string]bool{}
	for k, j := range got {
		if seen[j.ID] || (k > 0 && j.ID >= got[k-1].ID) {
			t.Fatalf("job %s listed twice or out of order", j.ID)
		}
		seen[j.ID] = true
	}
	if len(got) != n {
		t.Errorf("listed %d jobs, want %d", len(got), n)
	}
}

func testListJobsBadCursor(t *testing.T, s store.Store) {
	kind := "storetest.bad-cursor." + uniq()
	create(t, s, newJob(kind, time.Now()))
	for _, c := range badCursors {
		if _, err := s.ListJobs(context.Background(), job.Query{Kind: kind, Cursor: c}); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("ListJobs(cursor %q) = %v, want ErrInvalid", c, err)
		}
	}
}
