package schedule

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/job"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, data string
		want       []Definition
		wantErr    string
	}{
		{
			name: "one schedule",
			data: `{"schedules":[{"name":"nightly","expression":"cron(0 3 * * ? *)","kind":"recompute","args":{"work_ms":1},"input":{"type":"ids","start":1,"end":11},"tags":["nightly"]}]}`,
			want: []Definition{{Name: "nightly", Expression: "cron(0 3 * * ? *)", Kind: "recompute",
				Args: json.RawMessage(`{"work_ms":1}`), Input: job.Input{Type: job.InputIDRange, Start: 1, End: 11}, Tags: []string{"nightly"}}},
		},
		{name: "no schedules", data: `{"schedules":[]}`, want: []Definition{}},
		{name: "empty object", data: `{}`, want: []Definition{}},
		{name: "not JSON", data: `schedules:`, wantErr: "schedule: not a schedules file: invalid character 's' looking for beginning of value"},
		{name: "unknown field", data: `{"schedules":[{"name":"a","expresion":"rate(1 day)"}]}`,
			wantErr: `schedule: not a schedules file: json: unknown field "expresion"`},
		{name: "trailing data", data: `{"schedules":[]} {}`, wantErr: "schedule: not a schedules file: data after the top-level object"},
		{
			name: "every problem reported",
			data: `{"schedules":[
				{"name":"Bad Name","expression":"rate(1 minutes)","kind":"","args":[1],"input":{"type":"rows"}},
				{"name":"ok","expression":"rate(1 day)","kind":"recompute","input":{"type":"ids"}},
				{"name":"ok","expression":"rate(2 days)","kind":"recompute","input":{"type":"ids"}},
				{"expression":"rate(1 day)","kind":"recompute","input":{"type":"custom"}}]}`,
			wantErr: `schedule: schedules[0]: schedule "Bad Name": name "Bad Name": want 1-48 characters of a-z, 0-9 and '-', starting with a letter or digit
expression "rate(1 minutes)": rate unit "minutes": a value of 1 takes the singular "minute"
kind: missing
input.type "rows": want "lines", "ids", "items" or "custom"
args: want a JSON object
schedules[2]: schedule "ok": name used twice
schedules[3]: schedule "(unnamed)": name "": want 1-48 characters of a-z, 0-9 and '-', starting with a letter or digit`,
		},
		{name: "missing input type", data: `{"schedules":[{"name":"a","expression":"rate(1 day)","kind":"k"}]}`,
			wantErr: `schedule: schedules[0]: schedule "a": input.type: missing (want "lines", "ids", "items" or "custom")`},
		{name: "args null", data: `{"schedules":[{"name":"a","expression":"rate(1 day)","kind":"k","args":null,"input":{"type":"custom"}}]}`,
			wantErr: `schedule: schedules[0]: schedule "a": args: want a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.data))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Parse error\n got: %v\nwant: %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(tc.want)
			if string(gj) != string(wj) {
				t.Errorf("Parse\n got: %s\nwant: %s", gj, wj)
			}
		})
	}
}

func TestParseTooMany(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"schedules":[`)
	for i := range MaxSchedules + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"s","expression":"rate(1 day)","kind":"k","input":{"type":"custom"}}`)
	}
	b.WriteString(`]}`)
	_, err := Parse([]byte(b.String()))
	if want := "schedule: 101 schedules: at most 100"; err == nil || err.Error() != want {
		t.Fatalf("Parse = %v, want %s", err, want)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(filepath.Join(dir, "missing.json"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want an error wrapping fs.ErrNotExist", err)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"schedules":[{"name":"a","expression":"cron(0 3 * * * *)","kind":"k","input":{"type":"custom"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if want := bad + `: schedule: schedules[0]: schedule "a": expression "cron(0 3 * * * *)": day-of-month "*" and day-of-week "*": exactly one of them must be "?"`; err == nil || err.Error() != want {
		t.Errorf("Load(bad)\n got: %v\nwant: %s", err, want)
	}
}

// TestRepositoryFile keeps the committed schedules.json valid.
func TestRepositoryFile(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	defs, err := Load(filepath.Join(filepath.Dir(self), "..", "..", DefaultFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) == 0 {
		t.Fatal("the repository's schedules.json has no schedule")
	}
}

func TestRequest(t *testing.T) {
	d := Definition{Name: "nightly", Expression: "cron(0 3 * * ? *)", Kind: "recompute",
		Args: json.RawMessage(`{}`), Input: job.Input{Type: job.InputIDRange, Start: 1, End: 5}, Channel: "bulk", Tags: []string{"x"}}
	fired := time.Date(2030, 1, 2, 3, 0, 0, 0, time.FixedZone("CET", 3600))
	r := d.Request(fired)
	if r.UniqueKey != "schedule:nightly:2030-01-02T02:00:00Z" {
		t.Errorf("UniqueKey = %q", r.UniqueKey)
	}
	if r.Kind != "recompute" || r.Channel != "bulk" || string(r.Args) != `{}` || r.Input.End != 5 {
		t.Errorf("Request = %+v", r)
	}
	if want := []string{"schedule=nightly", "x"}; !slices.Equal(r.Tags, want) {
		t.Errorf("Tags = %v, want %v", r.Tags, want)
	}
	if d.Tags[0] != "x" || len(d.Tags) != 1 {
		t.Errorf("Request changed the definition's tags: %v", d.Tags)
	}
}
