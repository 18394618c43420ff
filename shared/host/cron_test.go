package host_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/host"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
	"github.com/slicework/slicework/shared/schedule"
)

func scheduleEngine(t *testing.T, clk clock.Clock) *engine.Engine {
	t.Helper()
	be, err := embedded.Open(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	reg := engine.NewRegistry()
	if err := recompute.Register(reg); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// waitJob waits for the job of unique key key to exist.
func waitJob(t *testing.T, e *engine.Engine, tag, key string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		page, err := e.Store().ListJobs(context.Background(), job.Query{Tag: tag, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if j.UniqueKey == key {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job %s after 30 s", key)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countJobs(t *testing.T, e *engine.Engine, tag string) int {
	t.Helper()
	page, err := e.Store().ListJobs(context.Background(), job.Query{Tag: tag, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Jobs)
}

// The host fires the schedules of schedules.json on the engine's clock,
// once per tick, through the scheduler handler: a rate schedule at its next
// minute, a daily cron schedule at 03:00, and a tick it slept through once.
func TestHostFiresSchedules(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	e := scheduleEngine(t, clk)
	in := job.Input{Type: job.InputIDRange, Start: 0, End: 10}
	defs := []schedule.Definition{
		{Name: "every-minute", Expression: "rate(1 minute)", Kind: recompute.Kind, Input: in},
		{Name: "nightly", Expression: "cron(0 3 * * ? *)", Kind: recompute.Kind, Input: in},
	}
	h, err := host.New(host.Config{Engine: e, Schedules: defs, PollWait: 50 * time.Millisecond, Visibility: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-h.Ready()
	minute, nightly := schedule.TagPrefix+"every-minute", schedule.TagPrefix+"nightly"

	clk.Set(time.Date(2026, 1, 2, 3, 5, 0, 0, time.UTC))
	waitJob(t, e, minute, "schedule:every-minute:2026-01-02T03:05:00Z")

	// A day later: the nightly schedule fires for 03:00, and the rate
	// schedule fires its missed tick once.
	clk.Set(time.Date(2026, 1, 3, 3, 0, 30, 0, time.UTC))
	waitJob(t, e, nightly, "schedule:nightly:2026-01-03T03:00:00Z")
	waitJob(t, e, minute, "schedule:every-minute:2026-01-02T03:06:00Z")
	if n := countJobs(t, e, minute); n != 2 {
		t.Fatalf("%d every-minute jobs, want 2", n)
	}
	if n := countJobs(t, e, nightly); n != 1 {
		t.Fatalf("%d nightly jobs, want 1", n)
	}
	if inv, fails := h.Invocations(); inv["scheduler"] < 4 || fails["scheduler"] != 0 {
		t.Fatalf("scheduler invocations %v, failures %v; want the sweep and three firings", inv, fails)
	}
}

// The host refuses schedules it could not fire, naming each problem.
func TestHostRefusesBadSchedules(t *testing.T) {
	t.Parallel()
	e := scheduleEngine(t, nil)
	in := job.Input{Type: job.InputIDRange, Start: 0, End: 10}
	_, err := host.New(host.Config{Engine: e, Schedules: []schedule.Definition{
		{Name: "a", Expression: "cron(0 3 * * * *)", Kind: recompute.Kind, Input: in},
		{Name: "b", Expression: "rate(1 day)", Kind: "nope", Input: in},
		{Name: "c", Expression: "rate(1 day)", Kind: recompute.Kind, Input: in},
		{Name: "c", Expression: "rate(2 days)", Kind: recompute.Kind, Input: in},
	}})
	if err == nil {
		t.Fatal("host.New accepted bad schedules")
	}
	for _, want := range []string{
		`schedule "a": expression "cron(0 3 * * * *)": day-of-month "*" and day-of-week "*": exactly one of them must be "?"`,
		`schedule "b": kind "nope" is not registered`,
		`schedule "c": name used twice`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
