// Package schedule is the one definition of slicework's recurring jobs. The
// CDK stack (infra/) turns every Definition into an EventBridge rule, and the
// local host fires the same definitions, so a schedule is written once, in
// the JSON file schedules.json at the repository root:
//
//	{
//	  "schedules": [
//	    {
//	      "name": "nightly-recompute",
//	      "expression": "cron(0 3 * * ? *)",
//	      "kind": "recompute",
//	      "args": {},
//	      "input": {"type": "ids", "start": 1, "end": 1000001}
//	    }
//	  ]
//	}
//
// Expressions use EventBridge's syntax (rate(...) or cron(...), UTC) and are
// validated as strictly as EventBridge does, so a bad schedule fails at
// `cdk synth` or at host start, not at deploy time.
package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
)

// DefaultFile is the schedules file's name at the repository root.
const DefaultFile = "schedules.json"

// MaxSchedules bounds the definitions of one file. Each becomes an
// EventBridge rule, and an account has 300 rules per bus by default.
const MaxSchedules = 100

// TagPrefix starts the tag that a scheduled job carries: TagPrefix + name.
const TagPrefix = "schedule="

// namePattern is what a schedule name may look like: it appears in rule
// descriptions, construct ids, job tags and unique keys.
var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,47}$`)

// Definition is one recurring job: when it fires (Expression) and what it
// submits (Kind, Args, Input, Channel, Tags), as POST /jobs would.
type Definition struct {
	// Name identifies the schedule: 1–48 characters of a-z, 0-9 and '-',
	// starting with a letter or digit, unique within the file.
	Name string `json:"name"`
	// Description is free text for operators (optional).
	Description string `json:"description,omitempty"`
	// Expression is an EventBridge schedule expression in UTC: "rate(N
	// unit)" or "cron(min hour day-of-month month day-of-week year)".
	Expression string `json:"expression"`
	// Kind is the registered job kind to submit.
	Kind string `json:"kind"`
	// Args are the job's arguments; a JSON object when present.
	Args json.RawMessage `json:"args,omitempty"`
	// Input is the job's data space.
	Input job.Input `json:"input"`
	// Channel overrides the kind's channel (optional).
	Channel string `json:"channel,omitempty"`
	// Tags are added to every job the schedule submits, after the
	// schedule's own tag (TagPrefix + Name).
	Tags []string `json:"tags,omitempty"`
}

// file is the on-disk shape of the schedules file.
type file struct {
	Schedules []Definition `json:"schedules"`
}

// Load reads and validates the schedules file at path. A missing file is an
// error wrapping fs.ErrNotExist (callers that treat "no file" as "no
// schedules" check for it with errors.Is). Every invalid definition is
// reported, not only the first.
func Load(path string) ([]Definition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	defs, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return defs, nil
}

// Parse decodes and validates the contents of a schedules file. Unknown
// fields are errors (a misspelt field must not be silently ignored).
func Parse(data []byte) ([]Definition, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f file
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("schedule: not a schedules file: %w", err)
	}
	if dec.More() {
		return nil, errors.New("schedule: not a schedules file: data after the top-level object")
	}
	if len(f.Schedules) > MaxSchedules {
		return nil, fmt.Errorf("schedule: %d schedules: at most %d", len(f.Schedules), MaxSchedules)
	}
	var errs []error
	seen := map[string]bool{}
	for i, d := range f.Schedules {
		if err := d.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("schedules[%d]: %w", i, err))
			continue
		}
		if seen[d.Name] {
			errs = append(errs, fmt.Errorf("schedules[%d]: schedule %q: name used twice", i, d.Name))
		}
		seen[d.Name] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if f.Schedules == nil {
		f.Schedules = []Definition{}
	}
	return f.Schedules, nil
}

// Validate checks d on its own: its name, its expression (as EventBridge
// would), that it names a kind and an input type, and that Args is a JSON
// object. Whether the kind is registered is the caller's check.
func (d Definition) Validate() error {
	var errs []error
	if !namePattern.MatchString(d.Name) {
		errs = append(errs, fmt.Errorf("name %q: want 1-48 characters of a-z, 0-9 and '-', starting with a letter or digit", d.Name))
	}
	if err := ValidateExpression(d.Expression); err != nil {
		errs = append(errs, err)
	}
	if d.Kind == "" {
		errs = append(errs, errors.New("kind: missing"))
	}
	switch d.Input.Type {
	case job.InputLines, job.InputIDRange, job.InputItems, job.InputCustom:
	case "":
		errs = append(errs, errors.New(`input.type: missing (want "lines", "ids", "items" or "custom")`))
	default:
		errs = append(errs, fmt.Errorf(`input.type %q: want "lines", "ids", "items" or "custom"`, d.Input.Type))
	}
	if len(d.Args) > 0 {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(d.Args, &obj); err != nil || obj == nil {
			errs = append(errs, errors.New("args: want a JSON object"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		name := d.Name
		if name == "" {
			name = "(unnamed)"
		}
		return fmt.Errorf("schedule %q: %w", name, err)
	}
	return nil
}

// Request is the submission that the schedule makes when it fires at
// firedAt (the EventBridge event's time). Its unique key is derived from the
// name and the firing's tick (firedAt truncated to the minute, see Tick), so
// a duplicate delivery of the same firing (EventBridge delivers at least
// once), or the same tick fired twice, is refused as a duplicate instead of
// running the job twice.
func (d Definition) Request(firedAt time.Time) engine.Request {
	tags := append([]string{TagPrefix + d.Name}, d.Tags...)
	return engine.Request{
		Kind:      d.Kind,
		Args:      d.Args,
		Input:     d.Input,
		Channel:   d.Channel,
		UniqueKey: UniqueKey(d.Name, Tick(firedAt)),
		Tags:      tags,
	}
}

// UniqueKey is the unique key of the job that schedule name submits when it
// fires at firedAt: "schedule:<name>:<firedAt in UTC, RFC 3339>".
func UniqueKey(name string, firedAt time.Time) string {
	return "schedule:" + name + ":" + firedAt.UTC().Format(time.RFC3339)
}

// String returns "name (expression)", for logs.
func (d Definition) String() string {
	return strings.TrimSpace(d.Name + " (" + d.Expression + ")")
}
