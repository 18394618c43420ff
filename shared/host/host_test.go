package host_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/backend"
	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/host"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
	"github.com/slicework/slicework/shared/queue"
)

type running struct {
	be   *backend.Backend
	e    *engine.Engine
	h    *host.Host
	stop func()
}

func start(t *testing.T, cfg host.Config) *running {
	t.Helper()
	be, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := engine.NewRegistry()
	if err := recompute.Register(reg); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Engine, cfg.Logger = e, log
	h, err := host.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
	case err := <-done:
		t.Fatal(err)
	}
	r := &running{be: be, e: e, h: h}
	r.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		be.Close()
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			r.stop()
		}
	})
	return r
}

func waitTerminal(t *testing.T, e *engine.Engine, id string, within time.Duration) *job.Job {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := e.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State.Terminal() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %s: %+v", id, j.State, within, j.Counters)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The host drives a job with temporary failures, a panic and a permanent
// failure through the real handlers, as the event source mapping would:
// partial batch failures come back after their back-off.
func TestHostRunsJobWithRetries(t *testing.T) {
	t.Parallel()
	r := start(t, host.Config{Workers: 3, Visibility: 5 * time.Second})
	poison, panicky := int64(4), int64(2)
	j, err := r.e.Submit(context.Background(), recompute.Args{FlakyEvery: 3, FlakyAttempts: 1, PoisonChunk: &poison, PanicChunk: &panicky},
		engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 2000}, ChunkSize: 100, TolerateFailedPct: ptr(5.0)})
	if err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, r.e, j.ID, 2*time.Minute)
	c := got.Counters
	// 20 chunks: 1 poison; flaky chunks 1, 4(poison), 7, 10, 13, 16, 19 and the panic chunk 2 retry once.
	if got.State != job.StateSucceeded || c.ChunksTotal != 20 || c.ChunksDone != 19 || c.ChunksFailed != 1 || c.ItemsDone != 1900 || c.ItemsFailed != 100 {
		t.Fatalf("job %s (%s) %+v", got.State, got.Error, c)
	}
	if c.Retries != 7 {
		t.Fatalf("retries %d, want 7 (6 flaky chunks and 1 panic)", c.Retries)
	}
	// The host counts an invocation when it returns, just after the finish
	// step's terminal write that waitTerminal saw.
	deadline := time.Now().Add(10 * time.Second)
	for {
		inv, fails := r.h.Invocations()
		if inv[r.e.Queues().Channel("default")] > 0 && inv[r.e.Queues().Slice()] >= 2 && len(fails) == 0 {
			break
		}
		if len(fails) != 0 || time.Now().After(deadline) {
			t.Fatalf("invocations %v, failures %v: want chunk invocations, a slice and a finish invocation, no failures", inv, fails)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A message no handler can process is reported as a batch item failure on
// every delivery and lands in the dead-letter queue after MaxReceives.
func TestHostPoisonMessageReachesDLQ(t *testing.T) {
	t.Parallel()
	r := start(t, host.Config{Visibility: time.Second, MaxReceives: 2})
	ctx := context.Background()
	name := r.e.Queues().Channel("default")
	if err := r.be.Queue.Send(ctx, name, queue.Outgoing{Body: []byte(`{"not":"a chunk task"}`)}); err != nil {
		t.Fatal(err)
	}
	dlq := r.e.Queues().DeadLetter(name)
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := r.be.Queue.Stats(ctx, dlq)
		if err != nil {
			t.Fatal(err)
		}
		if st.Visible == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("poison message not in the DLQ: %+v", st)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.stop()
}

func ptr[T any](v T) *T { return &v }
