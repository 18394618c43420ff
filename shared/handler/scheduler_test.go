package handler_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/handler"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
	"github.com/slicework/slicework/shared/schedule"
)

// withoutJobID replaces the (random) job id of a scheduler response, so
// that the response can be golden, and returns the id.
func withoutJobID(t *testing.T, out []byte) ([]byte, string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("response is not JSON: %s", out)
	}
	id, _ := m["job"].(string)
	if id == "" {
		t.Fatalf("response names no job: %s", out)
	}
	m["job"] = "JOB_ID"
	b, _ := json.Marshal(m)
	return b, id
}

// A schedule rule's event, as EventBridge delivers it, submits the
// schedule's job for the firing's tick; a second delivery of the firing,
// and a firing a few seconds later in the same minute, submit nothing more.
func TestSchedulerOnScheduleEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 0, 8, 0, time.UTC))
	be, err := embedded.Open(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	reg := engine.NewRegistry()
	if err := recompute.Register(reg); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Clock: clk, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreateQueues(ctx, time.Minute, 10); err != nil {
		t.Fatal(err)
	}
	scheduler := lambda.NewHandler(handler.Scheduler(e, log))
	ev := event(t, "eventbridge-schedule.json")

	out, err := scheduler.Invoke(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	out, first := withoutJobID(t, out)
	golden(t, "scheduler-schedule-response", out)

	out, err = scheduler.Invoke(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	out, again := withoutJobID(t, out)
	golden(t, "scheduler-schedule-duplicate-response", out)
	if again != first {
		t.Fatalf("the duplicate names job %s, want %s", again, first)
	}

	// Another delivery of the same minute's firing, with another id and time.
	late := strings.Replace(strings.Replace(string(ev), `"2026-01-02T03:00:07Z"`, `"2026-01-02T03:00:41Z"`, 1),
		`"6a7e8feb-b491-4cf7-a9f1-bf3703467718"`, `"0c7d8c4e-1f7b-4d0f-9a57-3c0c4b0f0e11"`, 1)
	out, err = scheduler.Invoke(ctx, []byte(late))
	if err != nil {
		t.Fatal(err)
	}
	if _, id := withoutJobID(t, out); id != first || !strings.Contains(string(out), `"duplicate":true`) {
		t.Fatalf("a later delivery in the same minute: %s", out)
	}

	page, err := be.Store.ListJobs(ctx, job.Query{Tag: schedule.TagPrefix + "nightly-recompute"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 {
		t.Fatalf("%d jobs for the tick, want 1", len(page.Jobs))
	}
	j := page.Jobs[0]
	if j.ID != first || j.UniqueKey != "schedule:nightly-recompute:2026-01-02T03:00:00Z" || j.Kind != recompute.Kind ||
		j.State != job.StateQueued || j.Input.End != 1000001 {
		t.Fatalf("job %+v", j)
	}
	if st, _ := be.Queue.Stats(ctx, e.Queues().Slice()); st.Visible != 1 {
		t.Fatalf("slice queue %+v, want the job's one slice task", st)
	}
}

// The scheduler refuses events it cannot act on, with an error that says
// why, and submits nothing.
func TestSchedulerRefusesBadEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	be, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	reg := engine.NewRegistry()
	if err := recompute.Register(reg); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.CreateQueues(ctx, time.Minute, 10); err != nil {
		t.Fatal(err)
	}
	good := string(event(t, "eventbridge-schedule.json"))
	for _, tc := range []struct {
		name, event, wantErr string
	}{
		{"unknown source", strings.Replace(good, `"slicework.schedule"`, `"aws.s3"`, 1), `unknown source "aws.s3"`},
		{"bad detail", strings.Replace(good, `"cron(0 3 * * ? *)"`, `"cron(0 3 * * * *)"`, 1), `exactly one of them must be "?"`},
		{"unregistered kind", strings.Replace(good, `"kind": "recompute"`, `"kind": "nope"`, 1), `kind: unknown kind "nope"`},
		{"no time", strings.Replace(good, `"time": "2026-01-02T03:00:07Z",`, ``, 1), `has no time`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := handler.Scheduler(e, log)(ctx, decodeEvent(t, tc.event))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if tc.name != "unknown source" && !errors.Is(err, job.ErrInvalid) {
				t.Fatalf("error %v does not wrap job.ErrInvalid", err)
			}
		})
	}
	page, err := be.Store.ListJobs(ctx, job.Query{})
	if err != nil || len(page.Jobs) != 0 {
		t.Fatalf("%d jobs written, %v", len(page.Jobs), err)
	}
}

func decodeEvent(t *testing.T, raw string) (ev events.EventBridgeEvent) {
	t.Helper()
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}
