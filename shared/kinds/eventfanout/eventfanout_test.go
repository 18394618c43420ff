package eventfanout_test

import (
	"slices"
	"testing"

	"github.com/slicework/slicework/shared/kinds/eventfanout"
)

func TestChannels(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		subscriber int
		want       []string
	}{
		{0, []string{"email"}},
		{1, []string{"email", "sms"}},
		{2, []string{"email", "sms", "im"}},
		{3, []string{"email"}},
		{61, []string{"email", "sms"}},
	} {
		if got := eventfanout.Channels(tc.subscriber); !slices.Equal(got, tc.want) {
			t.Errorf("Channels(%d) = %v, want %v", tc.subscriber, got, tc.want)
		}
	}
	for _, tc := range []struct{ n, want int }{{0, 0}, {1, 1}, {2, 3}, {3, 6}, {60, 120}, {61, 121}} {
		if got := eventfanout.Notifications(tc.n); got != tc.want {
			t.Errorf("Notifications(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args interface{ Validate() error }
		ok   bool
	}{
		{"Event", eventfanout.FiredEvent{Event: "signup-42", Subscribers: 3}, true},
		{"NoSubscribers", eventfanout.FiredEvent{Event: "e", Subscribers: 0}, true},
		{"EmptyEvent", eventfanout.FiredEvent{Subscribers: 1}, false},
		{"EventWithSpace", eventfanout.FiredEvent{Event: "a b", Subscribers: 1}, false},
		{"NegativeSubscribers", eventfanout.FiredEvent{Event: "e", Subscribers: -1}, false},
		{"TooManySubscribers", eventfanout.FiredEvent{Event: "e", Subscribers: eventfanout.MaxSubscribers + 1}, false},
		{"Subscription", eventfanout.ProcessSubscription{Event: "e", Subscriber: 4}, true},
		{"NegativeSubscriber", eventfanout.ProcessSubscription{Event: "e", Subscriber: -4}, false},
		{"Notification", eventfanout.ProcessNotification{Event: "e", Subscriber: 1, Channel: "sms"}, true},
		{"UnknownChannel", eventfanout.ProcessNotification{Event: "e", Subscriber: 1, Channel: "fax"}, false},
	} {
		if err := tc.args.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
