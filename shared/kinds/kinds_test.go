package kinds_test

import (
	"slices"
	"testing"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/kinds"
	"github.com/slicework/slicework/shared/kinds/eventfanout"
	"github.com/slicework/slicework/shared/kinds/keycount"
	"github.com/slicework/slicework/shared/kinds/recompute"
)

func TestRegistryHoldsEveryKind(t *testing.T) {
	t.Parallel()
	r, err := kinds.Registry()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keycount.Kind, recompute.Kind,
		eventfanout.FiredEventKind, eventfanout.ProcessSubscriptionKind, eventfanout.ProcessNotificationKind} {
		if !slices.Contains(r.Kinds(), k) {
			t.Errorf("registry kinds %v lack %q", r.Kinds(), k)
		}
	}
}

func TestRegisterTwiceFails(t *testing.T) {
	t.Parallel()
	r := engine.NewRegistry()
	if err := kinds.Register(r); err != nil {
		t.Fatal(err)
	}
	if err := kinds.Register(r); err == nil {
		t.Error("registering the built-in kinds twice succeeded")
	}
}
