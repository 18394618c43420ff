package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/schedule"
)

func TestScheduleInputTemplate(t *testing.T) {
	for _, tc := range []struct {
		name string
		def  schedule.Definition
		want string // in the template
		not  string // not in the template
	}{
		{"ids beyond 2^53 stay exact",
			schedule.Definition{Name: "big", Expression: "rate(1 day)", Kind: "k", Input: job.Input{Type: job.InputIDRange, Start: 1<<62 - 1, End: 1 << 62}},
			`"start":4611686018427387903,"end":4611686018427387904`, ""},
		{"no placeholder from the definition",
			schedule.Definition{Name: "lt", Expression: "rate(1 day)", Kind: "k", Args: json.RawMessage(`{"s":"<time>"}`), Input: job.Input{Type: job.InputCustom}},
			`\u003ctime\u003e`, `"s":"<time>"`},
		{"envelope",
			schedule.Definition{Name: "env", Expression: "rate(1 day)", Kind: "k", Input: job.Input{Type: job.InputCustom}},
			`{"version":"0","id":"<id>","source":"slicework.schedule","detail-type":"Scheduled Job","time":"<time>","account":"<account>","region":"<region>","resources":["<rule>"],"detail":{"name":"env"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmpl, err := ScheduleInputTemplate(tc.def)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(tmpl, tc.want) {
				t.Errorf("template %s\nlacks %s", tmpl, tc.want)
			}
			if tc.not != "" && strings.Contains(tmpl, tc.not) {
				t.Errorf("template %s\ncontains %s", tmpl, tc.not)
			}
			var ev map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tmpl), &ev); err != nil {
				t.Errorf("template is not JSON: %v", err)
			}
			var got, want any
			if err := json.Unmarshal(ev["detail"], &got); err != nil {
				t.Fatalf("detail: %v", err)
			}
			raw, _ := json.Marshal(tc.def)
			_ = json.Unmarshal(raw, &want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("detail %s does not decode to the definition %s", ev["detail"], raw)
			}
			// Ids exactly, as int64.
			var d schedule.Definition
			if err := json.Unmarshal(ev["detail"], &d); err != nil || d.Input.Start != tc.def.Input.Start || d.Input.End != tc.def.Input.End {
				t.Errorf("detail input %+v, want %+v (%v)", d.Input, tc.def.Input, err)
			}
		})
	}
}

// The local host fires a schedule with the very event that the schedule's
// rule sends once EventBridge fills the template, and the scheduler can read
// its detail back.
func TestScheduleEventMatchesLocalHost(t *testing.T) {
	d := schedule.Definition{Name: "nightly", Expression: "cron(0 3 * * ? *)", Kind: "recompute",
		Args: json.RawMessage(`{"work_ms":1}`), Input: job.Input{Type: job.InputIDRange, Start: 1, End: 11}, Tags: []string{"x"}}
	tmpl, err := ScheduleInputTemplate(d)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	local, err := d.Event("e-1", tick, "123456789012", "eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	filled := tmpl
	for k, v := range map[string]string{"id": "e-1", "time": "2030-01-02T03:00:00Z", "account": "123456789012",
		"region": "eu-west-1", "rule": "arn:aws:events:eu-west-1:123456789012:rule/slicework-schedule-nightly"} {
		filled = strings.ReplaceAll(filled, "<"+k+">", v)
	}
	var fromRule, fromHost any
	if err := json.Unmarshal([]byte(filled), &fromRule); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(local, &fromHost); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromRule, fromHost) {
		t.Fatalf("rule event\n%s\nlocal host event\n%s", filled, local)
	}
	var ev struct {
		Source string          `json:"source"`
		Detail json.RawMessage `json:"detail"`
	}
	if err := json.Unmarshal([]byte(filled), &ev); err != nil {
		t.Fatal(err)
	}
	got, err := schedule.ParseEventDetail(ev.Detail)
	if err != nil || ev.Source != schedule.EventSource || got.Name != d.Name || got.Input.End != d.Input.End || got.Expression != d.Expression {
		t.Fatalf("detail %+v, source %q, %v", got, ev.Source, err)
	}
}
