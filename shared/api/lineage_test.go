package api_test

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// A job's parent and children are visible: GET /jobs/{id} links both, and
// GET /jobs?parent=ID lists the children, newest first, page by page.
func TestLineage(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	ids := `"input":{"type":"ids","end":10}`
	parent := v.mustSubmit(t, `{"kind":"recompute",`+ids+`}`)
	var kids []string
	for range 3 {
		v.clk.Advance(time.Second)
		kids = append(kids, v.mustSubmit(t, `{"kind":"recompute",`+ids+`,"parent":"`+parent.ID+`"}`).ID)
	}
	v.mustSubmit(t, `{"kind":"recompute",`+ids+`}`) // no parent
	slices.Reverse(kids)                            // newest first

	r := v.get(t, "/jobs/"+parent.ID)
	if r.status != http.StatusOK {
		t.Fatalf("GET /jobs/%s: %d %s", parent.ID, r.status, r.body)
	}
	pv := r.view(t)
	if pv.Parent != "" || pv.Links.Parent != "" || pv.Links.Self != "/jobs/"+parent.ID || pv.Links.Chunks != "/jobs/"+parent.ID+"/chunks" {
		t.Errorf("parent's view %+v, links %+v", *pv.Job, pv.Links)
	}
	link, err := url.Parse(pv.Links.Children)
	if err != nil || link.Path != "/jobs" {
		t.Fatalf("children link %q: %v", pv.Links.Children, err)
	}
	if got, next := v.list(t, link.Query()); !slices.Equal(got, kids) || next != "" {
		t.Errorf("children link lists %v (next %q), want %v", got, next, kids)
	}

	cv := v.get(t, "/jobs/"+kids[0]).view(t)
	if cv.Parent != parent.ID || cv.Links.Parent != "/jobs/"+parent.ID {
		t.Errorf("child's parent %q, link %q; want %s", cv.Parent, cv.Links.Parent, parent.ID)
	}
	if got, _ := v.list(t, url.Values{"parent": {kids[0]}}); len(got) != 0 {
		t.Errorf("a childless job lists children %v", got)
	}

	// Pages of one child.
	var all []string
	q := url.Values{"parent": {parent.ID}, "limit": {"1"}}
	for range 5 {
		got, next := v.list(t, q)
		if len(got) > 1 {
			t.Fatalf("page of %d, limit 1", len(got))
		}
		all = append(all, got...)
		if next == "" {
			break
		}
		q.Set("cursor", next)
	}
	if !slices.Equal(all, kids) {
		t.Errorf("paged children %v, want %v", all, kids)
	}

	// With other filters.
	for _, tc := range []struct {
		query url.Values
		want  []string
	}{
		{url.Values{"parent": {parent.ID}, "kind": {"recompute"}, "state": {"queued"}}, kids},
		{url.Values{"parent": {parent.ID}, "kind": {"keycount"}}, []string{}},
		{url.Values{"parent": {parent.ID}, "created_after": {t0.Add(2 * time.Second).Format(time.RFC3339)}}, kids[:2]},
		{url.Values{"parent": {parent.ID}, "created_before": {t0.Add(2 * time.Second).Format(time.RFC3339)}}, kids[2:]},
	} {
		if got, _ := v.list(t, tc.query); !slices.Equal(got, tc.want) {
			t.Errorf("GET /jobs?%s: %v, want %v", tc.query.Encode(), got, tc.want)
		}
	}
}

// Search parameters with bad values are refused with 400 and a message
// that names the parameter.
func TestListJobsBadValues(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	for _, tc := range []struct {
		query, field, mention string
	}{
		{"parent=nope", "parent", "job id"},
		{"parent=" + strings.Repeat("A", 27), "parent", "job id"},
		{"kind=Not%20A%20Kind", "kind", "kind name"},
		{"tag=two%20words", "tag", "tag"},
		{"created_after=2026-03-04T05:06:07Z&created_before=2026-03-04T05:06:07Z", "created_after", "before"},
		{"created_after=2026-03-05T00:00:00Z&created_before=2026-03-04T00:00:00Z", "created_after", "before"},
		{"kind=recompute&kind=keycount", "", "once"},
		{"parent=01ARZ3NDEKTSV4RRFFQ69G5FAV&parent=01ARZ3NDEKTSV4RRFFQ69G5FAW", "", "once"},
		{"children=1", "", "unknown query parameter"},
	} {
		e := v.get(t, "/jobs?"+tc.query).wantErr(t, http.StatusBadRequest, "invalid_argument", tc.field)
		if !strings.Contains(e.Message, tc.mention) {
			t.Errorf("GET /jobs?%s: message %q does not mention %q", tc.query, e.Message, tc.mention)
		}
	}
	v.assertNothingWritten(t)
}
