package dynamostore_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/faults"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
	"github.com/slicework/slicework/shared/store/dynamostore"
)

// A transition whose first attempt is applied but whose answer is lost (the
// SDK then retries it) is reported as done, not as a conflict with itself.
func TestTransitionLostAnswer(t *testing.T) {
	forEach(t, func(t *testing.T, k emulator.Kind) {
		ctx := context.Background()
		plain := dynamostore.New(newClient(t, k), testTable)
		j := newRunningJob("dynamostore.lost." + string(k))
		j.State = job.StateQueued
		if _, err := plain.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		var base http.RoundTripper = http.DefaultTransport
		if c := httpClient(k); c != nil {
			base = c.Transport
		}
		var lost atomic.Int32
		tr := &faults.Transport{Base: base, Rate: 1, Mode: faults.After, Match: func(_ faults.Service, op string) bool {
			return op == "UpdateItem" && lost.CompareAndSwap(0, 1) // only the first UpdateItem
		}}
		lossy := dynamostore.New(awsconfig.DynamoDB(emulator.Config(t, k, &http.Client{Transport: tr})), testTable)
		got, err := lossy.Transition(ctx, j.ID, []job.State{job.StateQueued}, job.StateRunning, store.Patch{})
		if err != nil {
			t.Fatalf("Transition with a lost answer: %v", err)
		}
		if lost.Load() != 1 || tr.Total() != 1 {
			t.Fatalf("%d answers lost, want 1", tr.Total())
		}
		if got.State != job.StateRunning {
			t.Errorf("state %s, want running", got.State)
		}
		// A real conflict is still one.
		if _, err := lossy.Transition(ctx, j.ID, []job.State{job.StateQueued}, job.StateRunning, store.Patch{}); !errors.Is(err, job.ErrConflict) {
			t.Errorf("second transition from queued: %v, want ErrConflict", err)
		}
	})
}
