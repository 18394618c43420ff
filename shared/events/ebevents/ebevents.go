// Package ebevents is the events.Publisher adapter on Amazon EventBridge:
// each completion event is one PutEvents entry on a named bus, with source
// events.Source, detail-type events.TypeJobFinished and the event as its
// detail.
package ebevents

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"

	"github.com/slicework/slicework/shared/events"
)

// Publisher publishes completion events to one EventBridge bus. It is safe
// for concurrent use.
type Publisher struct {
	client *eventbridge.Client
	bus    string
}

var _ events.Publisher = (*Publisher)(nil)

// New returns a publisher to bus (its name or ARN) through client. It makes
// no call.
func New(client *eventbridge.Client, bus string) *Publisher {
	return &Publisher{client: client, bus: bus}
}

// Entry is the PutEvents entry of e on bus.
func Entry(bus string, e events.JobFinished) (types.PutEventsRequestEntry, error) {
	detail, err := json.Marshal(e)
	if err != nil {
		return types.PutEventsRequestEntry{}, fmt.Errorf("ebevents: encode event %s: %w", e.ID, err)
	}
	entry := types.PutEventsRequestEntry{
		EventBusName: aws.String(bus), Source: aws.String(events.Source), DetailType: aws.String(events.TypeJobFinished),
		Detail: aws.String(string(detail)),
	}
	if e.FinishedAt != nil {
		entry.Time = e.FinishedAt
	}
	return entry, nil
}

// Publish puts e on the bus with one PutEvents call. An entry that
// EventBridge rejects (FailedEntryCount > 0) is an error naming its code.
func (p *Publisher) Publish(ctx context.Context, e events.JobFinished) error {
	entry, err := Entry(p.bus, e)
	if err != nil {
		return err
	}
	out, err := p.client.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []types.PutEventsRequestEntry{entry}})
	if err != nil {
		return fmt.Errorf("ebevents: publish %s to %s: %w", e.ID, p.bus, err)
	}
	if out.FailedEntryCount > 0 {
		code, msg := "", ""
		if len(out.Entries) > 0 {
			code, msg = aws.ToString(out.Entries[0].ErrorCode), aws.ToString(out.Entries[0].ErrorMessage)
		}
		return fmt.Errorf("ebevents: publish %s to %s: rejected: %s: %s", e.ID, p.bus, code, msg)
	}
	return nil
}
