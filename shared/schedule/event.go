package schedule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/slicework/slicework/shared/job"
)

// The event that fires a schedule. A schedule's EventBridge rule (infra)
// sends it to the scheduler function, and the local host invokes the same
// function with the same event, so both run one code path:
//
//	{"version": "0", "id": <the firing's event id>, "source": EventSource,
//	 "detail-type": EventDetailType, "time": <the firing time, RFC 3339>,
//	 "account": ..., "region": ..., "resources": [<the rule's ARN>],
//	 "detail": <the Definition, as in schedules.json>}
//
// The scheduler submits detail.Request(time). The sweeper rule sends
// EventBridge's plain scheduled event instead (source "aws.events").
const (
	EventSource     = "slicework.schedule"
	EventDetailType = "Scheduled Job"
)

// SweepEventSource is the source of EventBridge's own scheduled events,
// which the sweeper rule sends.
const SweepEventSource = "aws.events"

// ParseEventDetail decodes and validates the detail of a schedule's event:
// a Definition, with unknown fields refused. Errors wrap job.ErrInvalid.
func ParseEventDetail(detail json.RawMessage) (Definition, error) {
	dec := json.NewDecoder(bytes.NewReader(detail))
	dec.DisallowUnknownFields()
	var d Definition
	if err := dec.Decode(&d); err != nil {
		return Definition{}, fmt.Errorf("schedule event detail: %v: %w", err, job.ErrInvalid)
	}
	if err := d.Validate(); err != nil {
		return Definition{}, fmt.Errorf("schedule event detail: %v: %w", err, job.ErrInvalid)
	}
	return d, nil
}

// Event returns the event that fires d at tick, as d's rule sends it (with
// the local host's account, region and rule ARN), and that the scheduler
// function takes. id is the event's id.
func (d Definition) Event(id string, tick time.Time, account, region string) (json.RawMessage, error) {
	detail, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", d.Name, err)
	}
	ev := struct {
		Version    string          `json:"version"`
		ID         string          `json:"id"`
		Source     string          `json:"source"`
		DetailType string          `json:"detail-type"`
		Time       string          `json:"time"`
		Account    string          `json:"account"`
		Region     string          `json:"region"`
		Resources  []string        `json:"resources"`
		Detail     json.RawMessage `json:"detail"`
	}{"0", id, EventSource, EventDetailType, tick.UTC().Format(time.RFC3339), account, region,
		[]string{fmt.Sprintf("arn:aws:events:%s:%s:rule/slicework-schedule-%s", region, account, d.Name)}, detail}
	return json.Marshal(ev)
}
