package dynamostore_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/faults"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store/dynamostore"
)

// A dependency resolution whose first try is applied but whose answer is
// lost (the SDK then retries it) counts once and reports itself applied.
func TestResolveDependencyLostAnswer(t *testing.T) {
	forEach(t, func(t *testing.T, k emulator.Kind) {
		ctx := context.Background()
		plain := dynamostore.New(newClient(t, k), testTable)
		dep := newRunningJob("dynamostore.lost-resolve." + string(k))
		if _, err := plain.CreateJob(ctx, dep); err != nil {
			t.Fatal(err)
		}
		x := newRunningJob(dep.Kind)
		x.State = job.StateWaiting
		x.DependsOn = []string{dep.ID}
		if _, err := plain.CreateJob(ctx, x); err != nil {
			t.Fatal(err)
		}
		var base http.RoundTripper = http.DefaultTransport
		if c := httpClient(k); c != nil {
			base = c.Transport
		}
		var lost atomic.Int32
		tr := &faults.Transport{Base: base, Rate: 1, Mode: faults.After, Match: func(_ faults.Service, op string) bool {
			return op == "TransactWriteItems" && lost.CompareAndSwap(0, 1)
		}}
		lossy := dynamostore.New(awsconfig.DynamoDB(emulator.Config(t, k, &http.Client{Transport: tr})), testTable)
		r, err := lossy.ResolveDependency(ctx, x.ID, dep.ID, "dependency failed: x")
		if err != nil {
			t.Fatalf("ResolveDependency with a lost answer: %v", err)
		}
		if tr.Total() != 1 {
			t.Fatalf("%d answers lost, want 1", tr.Total())
		}
		if !r.Applied || r.Job.DepsPending != 0 || r.Job.DepFailure != "dependency failed: x" {
			t.Errorf("ResolveDependency = applied %v, %d pending, failure %q; want applied, 0, the failure", r.Applied, r.Job.DepsPending, r.Job.DepFailure)
		}
		again, err := plain.ResolveDependency(ctx, x.ID, dep.ID, "")
		if err != nil || again.Applied || again.Job.DepsPending != 0 {
			t.Errorf("second ResolveDependency = %+v, %v; want not applied, 0 pending", again, err)
		}
	})
}
