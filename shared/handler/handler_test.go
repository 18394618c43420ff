package handler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/handler"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
)

var update = flag.Bool("update", false, "rewrite golden files")

const jobID = "01JBZ0S1CE0000000000000000" // the job the captured events refer to

func event(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "events", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatalf("response is not JSON: %s", got)
	}
	got, _ = json.MarshalIndent(v, "", "  ")
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bytes.TrimSpace(want), bytes.TrimSpace(got)) {
		t.Fatalf("%s: response\n%s\nwant\n%s", name, got, want)
	}
}

// The slicer, worker and scheduler are invoked through aws-lambda-go's JSON
// path with events as Lambda delivers them; their responses are golden.
func TestHandlersOnLambdaEvents(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
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
	now := clk.Now()
	if _, err := be.Store.CreateJob(ctx, &job.Job{
		ID: jobID, Kind: recompute.Kind, Args: json.RawMessage(`{"flaky_every":3,"flaky_attempts":1}`),
		Input: job.Input{Type: job.InputIDRange, Start: 0, End: 300}, Channel: "default", ChunkSize: 100, MaxAttempts: 3,
		State: job.StateQueued, CreatedAt: now, UpdatedAt: now,
	}); err != nil {
		t.Fatal(err)
	}

	slicer := lambda.NewHandler(handler.Slicer(e, log))
	out, err := slicer.Invoke(ctx, event(t, "sqs-slice.json"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "slicer-response", out)
	j, _ := e.Get(ctx, jobID)
	if j.State != job.StateRunning || !j.Counters.Sliced || j.Counters.ChunksTotal != 3 {
		t.Fatalf("after slicing: %s %+v", j.State, j.Counters)
	}
	if st, _ := be.Queue.Stats(ctx, "chunks-default"); st.Visible != 3 {
		t.Fatalf("chunk queue holds %d tasks, want 3", st.Visible)
	}

	// Chunk 0 succeeds; chunk 1 fails temporarily and the malformed record
	// is poison: both come back as batch item failures.
	worker := lambda.NewHandler(handler.Worker(e, be.Queue, log))
	out, err = worker.Invoke(ctx, event(t, "sqs-worker-batch.json"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "worker-response", out)
	j, _ = e.Get(ctx, jobID)
	if j.Counters.ChunksDone != 1 || j.Counters.Retries != 1 {
		t.Fatalf("after the batch: %+v", j.Counters)
	}
	ch, err := be.Store.GetChunk(ctx, jobID, 1)
	if err != nil || ch.State != job.ChunkRetrying || ch.Attempts[0].RetryAfter != time.Second {
		t.Fatalf("chunk 1: %+v, %v", ch, err)
	}

	scheduler := lambda.NewHandler(handler.Scheduler(e, log))
	out, err = scheduler.Invoke(ctx, event(t, "eventbridge-scheduled.json"))
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "scheduler-response", out)
}

func TestQueueName(t *testing.T) {
	t.Parallel()
	for arn, want := range map[string]string{
		"arn:aws:sqs:us-east-2:123456789012:chunks-default": "chunks-default",
		"arn:aws:sqs:local:000000000000:dev-slice":          "dev-slice",
		"plain-name": "plain-name",
	} {
		if got := handler.QueueName(arn); got != want {
			t.Errorf("QueueName(%q) = %q, want %q", arn, got, want)
		}
	}
}
