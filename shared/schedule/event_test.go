package schedule

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/slicework/slicework/shared/job"
)

func TestParseEventDetail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, detail, wantErr string
	}{
		{"valid", `{"name":"n","expression":"rate(1 day)","kind":"k","input":{"type":"ids","start":0,"end":5}}`, ""},
		{"not JSON", `nope`, "schedule event detail: invalid character"},
		{"empty", `{}`, `schedule event detail: schedule "(unnamed)": name ""`},
		{"unknown field", `{"name":"n","expresion":"rate(1 day)"}`, `schedule event detail: json: unknown field "expresion"`},
		{"bad expression", `{"name":"n","expression":"cron(0 3 * * * *)","kind":"k","input":{"type":"ids"}}`,
			`schedule event detail: schedule "n": expression "cron(0 3 * * * *)": day-of-month "*" and day-of-week "*": exactly one of them must be "?"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, err := ParseEventDetail(json.RawMessage(tc.detail))
			if tc.wantErr == "" {
				if err != nil || d.Name != "n" || d.Input.End != 5 {
					t.Fatalf("ParseEventDetail = %+v, %v", d, err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) || !errors.Is(err, job.ErrInvalid) {
				t.Fatalf("ParseEventDetail error %v, want %q wrapping job.ErrInvalid", err, tc.wantErr)
			}
		})
	}
}

// Event is an EventBridge event that aws-lambda-go decodes, whose detail
// reads back as the definition.
func TestEvent(t *testing.T) {
	t.Parallel()
	d := Definition{Name: "nightly", Expression: "cron(0 3 * * ? *)", Kind: "recompute", Input: job.Input{Type: job.InputIDRange, Start: 1, End: 5}}
	raw, err := d.Event("e-1", time.Date(2030, 1, 2, 4, 0, 0, 0, time.FixedZone("CET", 3600)), "000000000000", "local")
	if err != nil {
		t.Fatal(err)
	}
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Source != EventSource || ev.DetailType != EventDetailType || ev.ID != "e-1" || !ev.Time.Equal(at("2030-01-02 03:00")) ||
		len(ev.Resources) != 1 || ev.Resources[0] != "arn:aws:events:local:000000000000:rule/slicework-schedule-nightly" {
		t.Fatalf("event %+v", ev)
	}
	got, err := ParseEventDetail(ev.Detail)
	if err != nil || got.Name != d.Name || got.Expression != d.Expression || got.Input.End != 5 {
		t.Fatalf("detail %+v, %v", got, err)
	}
}

// Firings within one minute share a tick and so a unique key; the next
// minute is another tick.
func TestRequestKeyIsTheTick(t *testing.T) {
	t.Parallel()
	d := Definition{Name: "every", Expression: "rate(1 minute)", Kind: "k", Input: job.Input{Type: job.InputCustom}}
	base := time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)
	want := "schedule:every:2030-01-02T03:04:00Z"
	for _, fired := range []time.Time{base, base.Add(time.Second), base.Add(59*time.Second + 999*time.Millisecond)} {
		if got := d.Request(fired).UniqueKey; got != want {
			t.Errorf("fired at %s: key %q, want %q", fired, got, want)
		}
	}
	if got := d.Request(base.Add(time.Minute)).UniqueKey; got == want {
		t.Errorf("the next minute has the same key %q", got)
	}
}
