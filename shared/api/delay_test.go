package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/job"
)

// POST /jobs takes a delay as a duration ("90s", "36h", "3d") or seconds:
// short delays wait on the queue, long ones in the store; a delay with
// run_at, a negative one or an unreadable one is refused.
func TestSubmitDelay(t *testing.T) {
	t.Parallel()
	const ids = `"kind":"recompute","input":{"type":"ids","end":10}`
	tests := []struct {
		name      string
		body      string
		state     job.State
		runAt     time.Duration
		status    int
		code      string
		field     string
		errSubstr string
	}{
		{name: "3 days", body: `{` + ids + `,"delay":"3d"}`, state: job.StateScheduled, runAt: 72 * time.Hour},
		{name: "1d12h", body: `{` + ids + `,"delay":"1d12h"}`, state: job.StateScheduled, runAt: 36 * time.Hour},
		{name: "seconds", body: `{` + ids + `,"delay":90}`, state: job.StateQueued, runAt: 90 * time.Second},
		{name: "15 minutes", body: `{` + ids + `,"delay":"15m"}`, state: job.StateQueued, runAt: 15 * time.Minute},
		{name: "with run_at", body: `{` + ids + `,"delay":"1h","run_at":"2030-01-01T00:00:00Z"}`,
			status: http.StatusUnprocessableEntity, code: "invalid_argument", field: "delay", errSubstr: "run_at or delay, not both"},
		{name: "negative", body: `{` + ids + `,"delay":"-5m"}`,
			status: http.StatusUnprocessableEntity, code: "invalid_argument", field: "delay", errSubstr: "must not be negative"},
		{name: "over a year", body: `{` + ids + `,"delay":"400d"}`,
			status: http.StatusUnprocessableEntity, code: "invalid_argument", field: "delay", errSubstr: "more than"},
		{name: "unreadable", body: `{` + ids + `,"delay":"3 days"}`,
			status: http.StatusBadRequest, code: "invalid_json", errSubstr: `duration "3 days"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t)
			r := v.submit(t, tc.body)
			if tc.status != 0 {
				e := r.wantErr(t, tc.status, tc.code, tc.field)
				if !strings.Contains(e.Message, tc.errSubstr) {
					t.Errorf("message %q does not say %q", e.Message, tc.errSubstr)
				}
				return
			}
			if r.status != http.StatusCreated {
				t.Fatalf("status %d; body %s", r.status, r.body)
			}
			j := r.view(t)
			if j.State != tc.state || j.RunAt == nil || !j.RunAt.Equal(t0.Add(tc.runAt)) {
				t.Errorf("job %s at %v, want %s at %s", j.State, j.RunAt, tc.state, t0.Add(tc.runAt))
			}
		})
	}
}
