package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
)

// POST /jobs takes depends_on, run_anyway and callback_url; GET /jobs/{id}
// shows them, and the job's dependants.
func TestSubmitDependencies(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	a := v.mustSubmit(t, `{"kind":"recompute","input":{"type":"ids","end":10}}`)
	b := v.mustSubmit(t, `{"kind":"recompute","input":{"type":"ids","end":10},"depends_on":["`+a.ID+`"],
		"run_anyway":true,"callback_url":"https://example.com/hook?x=1"}`)
	if b.State != job.StateWaiting || !slices.Equal(b.DependsOn, []string{a.ID}) || !b.RunAnyway ||
		b.CallbackURL != "https://example.com/hook?x=1" || b.DepsPending != 1 {
		t.Errorf("submitted %+v, want waiting on A with run_anyway and the callback", *b.Job)
	}
	for _, tc := range []struct {
		id         string
		dependants []string
		dependsOn  []string
	}{
		{a.ID, []string{b.ID}, nil},
		{b.ID, nil, []string{a.ID}},
	} {
		r := v.get(t, "/jobs/"+tc.id)
		if r.status != http.StatusOK {
			t.Fatalf("GET /jobs/%s: %d %s", tc.id, r.status, r.body)
		}
		got := r.view(t)
		if !slices.Equal(got.Dependants, tc.dependants) || !slices.Equal(got.DependsOn, tc.dependsOn) {
			t.Errorf("job %s: dependants %v, depends_on %v; want %v, %v", tc.id, got.Dependants, got.DependsOn, tc.dependants, tc.dependsOn)
		}
		if tc.dependants == nil && strings.Contains(string(r.body), `"dependants"`) {
			t.Errorf("job %s without dependants shows the field: %s", tc.id, r.body)
		}
	}
}

// Bad workflow fields get a 4xx naming the field and write nothing.
func TestSubmitDependenciesRejected(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	a := v.mustSubmit(t, `{"kind":"recompute","input":{"type":"ids","end":10}}`)
	before := v.stats(t, v.e.Queues().Slice())
	many := make([]string, engine.MaxDependsOn+1)
	for i := range many {
		many[i] = fmt.Sprintf("%q", a.ID)
	}
	const ids = `"kind":"recompute","input":{"type":"ids","end":10}`
	for _, tc := range []struct {
		name   string
		extra  string
		status int
		code   string
		field  string
	}{
		{"unknown dependency", `"depends_on":["01ARZ3NDEKTSV4RRFFQ69G5FAV"]`, 422, "invalid_argument", "depends_on"},
		{"duplicate dependency", `"depends_on":["` + a.ID + `","` + a.ID + `"]`, 422, "invalid_argument", "depends_on"},
		{"empty dependency", `"depends_on":[""]`, 422, "invalid_argument", "depends_on"},
		{"too many dependencies", `"depends_on":[` + strings.Join(many, ",") + `]`, 422, "invalid_argument", "depends_on"},
		{"depends_on not a list", `"depends_on":"` + a.ID + `"`, 400, "invalid_json", ""},
		{"run_anyway alone", `"run_anyway":true`, 422, "invalid_argument", "run_anyway"},
		{"callback not http", `"callback_url":"file:///etc/passwd"`, 422, "invalid_argument", "callback_url"},
		{"callback relative", `"callback_url":"/hook"`, 422, "invalid_argument", "callback_url"},
		{"callback too long", `"callback_url":"https://example.com/` + strings.Repeat("x", engine.MaxCallbackURL) + `"`, 422, "invalid_argument", "callback_url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v.submit(t, `{`+ids+`,`+tc.extra+`}`).wantErr(t, tc.status, tc.code, tc.field)
		})
	}
	if jobs := v.storedJobs(t); len(jobs) != 1 {
		t.Errorf("%d jobs stored, want only the first", len(jobs))
	}
	if after := v.stats(t, v.e.Queues().Slice()); after != before {
		t.Errorf("slice queue changed from %+v to %+v", before, after)
	}
	r := v.get(t, "/jobs/"+a.ID)
	if got := r.view(t); len(got.Dependants) != 0 {
		t.Errorf("rejected submissions left dependants %v", got.Dependants)
	}
}
