// Package eventfanout is the event fan-out that TheSchwartz was built for
// (Brad Fitzpatrick's description of LiveJournal's ESN): every action on the
// site fires an event; processing the FiredEvent job looks up the event's
// listeners and REPLACEs the job with one ProcessSubscription job per
// subscriber; each of those REPLACEs itself with the ProcessNotification
// jobs of its subscriber (email, SMS, IM...), which deliver.
//
//	firedevent (1 chunk)
//	  └─ Replace → processsubscription × Subscribers
//	                 └─ Replace → processnotification × len(Channels(s))
//
// Every step is an engine.Replace, so the chain is exactly-once per step:
// a job's chunk completes and its successors exist in one store
// transaction, and a duplicate delivery submits nothing more. An event with
// more subscribers than fit one transaction (49 here) is carried by one
// engine.FanoutKind job between the event and its subscriptions, so a
// single event scales to engine.MaxReplaceJobs subscribers.
//
// The listeners are simulated and deterministic, so tests count exactly:
// an event with n subscribers has subscribers 0..n-1, subscriber s has the
// channels Channels(s), and the event ends in Notifications(n)
// processnotification jobs. Every job is tagged "event=<name>" so that all
// the work of one event can be found with GET /jobs?tag=event=<name>.
package eventfanout

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
)

// Kind names.
const (
	FiredEventKind          = "firedevent"
	ProcessSubscriptionKind = "processsubscription"
	ProcessNotificationKind = "processnotification"
)

// MaxSubscribers bounds the subscribers of one event: the most jobs one
// Replace submits.
const MaxSubscribers = engine.MaxReplaceJobs

// channels are the notification channels, in the order Channels hands
// them out.
var channels = []string{"email", "sms", "im"}

// Channels returns the notification channels of subscriber s: the first
// 1 + s%3 of email, sms and im (likely 1-3 per subscriber, as in the seed).
func Channels(s int) []string { return channels[:1+s%len(channels)] }

// Notifications returns how many processnotification jobs an event with n
// subscribers ends in: the sum of len(Channels(s)) over s in [0, n).
func Notifications(n int) int {
	total := 0
	for s := range n {
		total += len(Channels(s))
	}
	return total
}

// Tag is the tag every job of event carries.
func Tag(event string) string { return "event=" + event }

var eventName = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,58}$`)

// FiredEvent are the arguments of a firedevent job: the event and how many
// listeners it has.
type FiredEvent struct {
	// Event names the event: 1-58 letters, digits and _.:/- (it becomes
	// part of a tag).
	Event string `json:"event"`
	// Subscribers is the number of listeners (0..MaxSubscribers).
	Subscribers int `json:"subscribers"`
}

// Kind implements engine.Args.
func (FiredEvent) Kind() string { return FiredEventKind }

// Validate implements engine.Validator.
func (a FiredEvent) Validate() error {
	if !eventName.MatchString(a.Event) {
		return fmt.Errorf("event %q must be 1-58 letters, digits and _.:/-", a.Event)
	}
	if a.Subscribers < 0 || a.Subscribers > MaxSubscribers {
		return fmt.Errorf("subscribers must be 0..%d", MaxSubscribers)
	}
	return nil
}

// ProcessSubscription are the arguments of a processsubscription job: one
// subscriber of one event.
type ProcessSubscription struct {
	Event      string `json:"event"`
	Subscriber int    `json:"subscriber"`
}

// Kind implements engine.Args.
func (ProcessSubscription) Kind() string { return ProcessSubscriptionKind }

// Validate implements engine.Validator.
func (a ProcessSubscription) Validate() error {
	if !eventName.MatchString(a.Event) || a.Subscriber < 0 {
		return errors.New("a valid event and a subscriber ≥ 0 are required")
	}
	return nil
}

// ProcessNotification are the arguments of a processnotification job: one
// message to one subscriber over one channel.
type ProcessNotification struct {
	Event      string `json:"event"`
	Subscriber int    `json:"subscriber"`
	Channel    string `json:"channel"`
}

// Kind implements engine.Args.
func (ProcessNotification) Kind() string { return ProcessNotificationKind }

// Validate implements engine.Validator.
func (a ProcessNotification) Validate() error {
	for _, c := range channels {
		if a.Channel == c && eventName.MatchString(a.Event) && a.Subscriber >= 0 {
			return nil
		}
	}
	return fmt.Errorf("a valid event, a subscriber ≥ 0 and a channel of %v are required", channels)
}

// Input is the input of every job of the chain: each is one unit of work,
// a single chunk cut by the kind's own Slice.
var Input = job.Input{Type: job.InputCustom}

// single cuts a job into one chunk of one item.
func single(emit func(job.ChunkInput, int64) error) error { return emit(job.ChunkInput{}, 1) }

// FiredEventHandler looks up an event's listeners and replaces the event
// with one processsubscription job per subscriber.
type FiredEventHandler struct{}

// Slice implements engine.Slicer: one chunk.
func (FiredEventHandler) Slice(_ context.Context, _ *engine.Job[FiredEvent], emit func(job.ChunkInput, int64) error) error {
	return single(emit)
}

// Process replaces the event with its subscriptions, subscriber order.
func (FiredEventHandler) Process(_ context.Context, c *engine.Chunk[FiredEvent]) error {
	subs := make([]engine.Child, c.Args.Subscribers)
	for s := range subs {
		subs[s] = engine.NewChild(ProcessSubscription{Event: c.Args.Event, Subscriber: s},
			engine.SubmitOptions{Input: Input, Tags: []string{Tag(c.Args.Event)}})
	}
	return engine.Replace(subs...)
}

// ProcessSubscriptionHandler turns one subscription into the subscriber's
// notifications, one per channel.
type ProcessSubscriptionHandler struct{}

// Slice implements engine.Slicer: one chunk.
func (ProcessSubscriptionHandler) Slice(_ context.Context, _ *engine.Job[ProcessSubscription], emit func(job.ChunkInput, int64) error) error {
	return single(emit)
}

// Process replaces the subscription with its notifications.
func (ProcessSubscriptionHandler) Process(_ context.Context, c *engine.Chunk[ProcessSubscription]) error {
	chs := Channels(c.Args.Subscriber)
	notes := make([]engine.Child, len(chs))
	for i, ch := range chs {
		notes[i] = engine.NewChild(ProcessNotification{Event: c.Args.Event, Subscriber: c.Args.Subscriber, Channel: ch},
			engine.SubmitOptions{Input: Input, Tags: []string{Tag(c.Args.Event)}})
	}
	return engine.Replace(notes...)
}

// ProcessNotificationHandler delivers one notification. Delivery is
// simulated: it always succeeds.
type ProcessNotificationHandler struct{}

// Slice implements engine.Slicer: one chunk.
func (ProcessNotificationHandler) Slice(_ context.Context, _ *engine.Job[ProcessNotification], emit func(job.ChunkInput, int64) error) error {
	return single(emit)
}

// Process delivers the notification.
func (ProcessNotificationHandler) Process(_ context.Context, c *engine.Chunk[ProcessNotification]) error {
	c.SetItems(1)
	return nil
}

// Register adds the three kinds of the chain to r.
func Register(r *engine.Registry) error {
	if err := engine.Register[FiredEvent](r, FiredEventHandler{}, engine.Options{}); err != nil {
		return err
	}
	if err := engine.Register[ProcessSubscription](r, ProcessSubscriptionHandler{}, engine.Options{}); err != nil {
		return err
	}
	return engine.Register[ProcessNotification](r, ProcessNotificationHandler{}, engine.Options{})
}
