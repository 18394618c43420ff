package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/slicework/slicework/shared/handler"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
	"github.com/slicework/slicework/shared/schedule"
)

// A schedule firing delivered several times at once (EventBridge delivers
// at least once), even with different event ids and seconds within the
// minute, submits one job per tick on every backend; the next tick submits
// the next job, and both run to exact counts.
func TestScheduleDoubleFireSubmitsOneJob(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		r := newRigOn(t, on, recomputeRegistry(t))
		ctx := context.Background()
		d := schedule.Definition{Name: "every-minute", Expression: "rate(1 minute)", Kind: recompute.Kind,
			Input: job.Input{Type: job.InputIDRange, Start: 0, End: 30}}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		fire := func(tick time.Time, deliveries []time.Time) []handler.SchedulerResponse {
			t.Helper()
			out := make([]handler.SchedulerResponse, len(deliveries))
			var wg sync.WaitGroup
			for i, at := range deliveries {
				ev, err := d.Event(fmt.Sprintf("event-%d", i%2), at, "123456789012", "us-east-2")
				if err != nil {
					t.Fatal(err)
				}
				// One handler per delivery: like a Lambda execution
				// environment, a handler serves one invocation at a time.
				fn := lambda.NewHandler(handler.Scheduler(r.e, log))
				deliver := wg.Go
				if on == onMoto {
					// moto runs a failed TransactWriteItems by restoring a
					// deep copy of the whole table taken before it, with no
					// lock: concurrent transactions undo or resurrect each
					// other's writes. On moto the deliveries run one by one.
					deliver = func(f func()) { f() }
				}
				deliver(func() {
					raw, err := fn.Invoke(ctx, ev)
					if err != nil {
						t.Errorf("delivery %d: %v", i, err)
						return
					}
					if err := json.Unmarshal(raw, &out[i]); err != nil {
						t.Errorf("delivery %d: %s: %v", i, raw, err)
					}
				})
			}
			wg.Wait()
			fresh := 0
			for i, resp := range out {
				if resp.Job == "" || resp.Job != out[0].Job || resp.Tick == nil || !resp.Tick.Equal(tick) || resp.SweepReport != nil {
					t.Fatalf("delivery %d: %+v, want job %s of tick %s", i, resp, out[0].Job, tick)
				}
				if !resp.Duplicate {
					fresh++
				}
			}
			if fresh != 1 {
				t.Fatalf("%d deliveries submitted a job, want 1: %+v", fresh, out)
			}
			return out
		}
		tick := time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC)
		first := fire(tick, []time.Time{tick, tick, tick.Add(20 * time.Second), tick.Add(59 * time.Second)})
		second := fire(tick.Add(time.Minute), []time.Time{tick.Add(time.Minute + time.Second), tick.Add(time.Minute + time.Second)})
		if first[0].Job == second[0].Job {
			t.Fatal("two ticks share a job")
		}
		page, err := r.be.Store.ListJobs(ctx, job.Query{Tag: schedule.TagPrefix + d.Name})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 2 {
			t.Fatalf("%d jobs for two ticks, want 2", len(page.Jobs))
		}
		r.drain()
		for _, id := range []string{first[0].Job, second[0].Job} {
			j := r.job(id)
			if c := j.Counters; j.State != job.StateSucceeded || c.ChunksDone != 1 || c.ItemsDone != 30 {
				t.Fatalf("job %s: %s %+v", id, j.State, c)
			}
		}
		if j := r.job(first[0].Job); j.UniqueKey != "schedule:every-minute:2026-01-02T03:05:00Z" {
			t.Fatalf("unique key %q", j.UniqueKey)
		}
	})
}
