package engine_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
)

// scriptArgs selects, per attempt, what the scripted handler does.
type scriptArgs struct {
	// Script lists the behaviour of attempts 1, 2, ...: ok, err, retry1m,
	// retry3d, perm, panic. Attempts past the end repeat the last entry.
	Script []string `json:"script"`
}

func (scriptArgs) Kind() string { return "script" }

type scriptKind struct{}

func (scriptKind) Process(ctx context.Context, c *engine.Chunk[scriptArgs]) error {
	s := c.Args.Script
	step := s[min(c.Attempt, len(s))-1]
	switch step {
	case "ok":
		return nil
	case "err":
		return errors.New("upstream 503")
	case "retry1m":
		return engine.RetryIn(time.Minute, errors.New("rate limited"))
	case "retry3d":
		return engine.RetryIn(72*time.Hour, errors.New("mailbox full; try in 3 days"))
	case "perm":
		return engine.Permanent(errors.New("malformed record"))
	case "perm-chunk-0":
		if c.Index() == 0 {
			return engine.Permanent(errors.New("malformed record"))
		}
	case "panic":
		var m map[string]int
		m["boom"]++
	}
	return nil
}

func scriptRig(t *testing.T, maxAttempts int) *rig {
	reg := engine.NewRegistry()
	engine.MustRegister[scriptArgs](reg, scriptKind{}, engine.Options{MaxAttempts: maxAttempts, Backoff: engine.Backoff{Base: 10 * time.Second, Max: time.Hour}})
	return newRig(t, reg)
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	type step struct {
		ack      bool
		outcome  job.Outcome
		retryMin time.Duration // verdict's RetryAfter lower bound
		retryMax time.Duration // and upper bound (inclusive)
	}
	tests := []struct {
		name      string
		script    []string
		steps     []step
		wantState job.ChunkState
		wantErr   string
		wantStack bool
		jobState  job.State
	}{
		{name: "nil completes", script: []string{"ok"},
			steps: []step{{ack: true, outcome: job.OutcomeSucceeded}}, wantState: job.ChunkSucceeded, jobState: job.StateSucceeded},
		{name: "error retries with back-off", script: []string{"err", "err", "ok"},
			steps: []step{
				{outcome: job.OutcomeRetry, retryMax: 10 * time.Second},
				{outcome: job.OutcomeRetry, retryMax: 20 * time.Second},
				{ack: true, outcome: job.OutcomeSucceeded}},
			wantState: job.ChunkSucceeded, wantErr: "upstream 503", jobState: job.StateSucceeded},
		{name: "RetryIn waits exactly", script: []string{"retry1m", "ok"},
			steps:     []step{{outcome: job.OutcomeRetry, retryMin: time.Minute, retryMax: time.Minute}, {ack: true, outcome: job.OutcomeSucceeded}},
			wantState: job.ChunkSucceeded, wantErr: "rate limited", jobState: job.StateSucceeded},
		{name: "Permanent fails at once", script: []string{"perm"},
			steps: []step{{ack: true, outcome: job.OutcomeFailed}}, wantState: job.ChunkFailed, wantErr: "malformed record", jobState: job.StateFailed},
		{name: "panic is recorded with its stack and retried", script: []string{"panic", "ok"},
			steps:     []step{{outcome: job.OutcomeRetry, retryMax: 10 * time.Second}, {ack: true, outcome: job.OutcomeSucceeded}},
			wantState: job.ChunkSucceeded, wantErr: "assignment to entry in nil map", wantStack: true, jobState: job.StateSucceeded},
		{name: "out of attempts fails for good", script: []string{"err"},
			steps: []step{
				{outcome: job.OutcomeRetry, retryMax: 10 * time.Second},
				{outcome: job.OutcomeRetry, retryMax: 20 * time.Second},
				{ack: true, outcome: job.OutcomeFailed}},
			wantState: job.ChunkFailed, wantErr: "upstream 503", jobState: job.StateFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := scriptRig(t, 3)
			ctx := context.Background()
			j, err := r.e.Submit(ctx, scriptArgs{Script: tc.script}, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 1}})
			if err != nil {
				t.Fatal(err)
			}
			r.control()
			msgs := r.receiveAll(r.e.Queues().Channel(engine.DefaultChannel))
			if len(msgs) != 1 {
				t.Fatalf("%d chunk tasks", len(msgs))
			}
			for i, want := range tc.steps {
				v := r.e.ProcessChunk(ctx, msgs[0].Body, engine.Delivery{ReceiveCount: i + 1})
				if v.Ack != want.ack || v.Outcome != want.outcome || v.RetryAfter < want.retryMin || v.RetryAfter > want.retryMax {
					t.Fatalf("attempt %d: verdict %+v, want %+v", i+1, v, want)
				}
			}
			ch, err := r.be.Store.GetChunk(ctx, j.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			if ch.State != tc.wantState || len(ch.Attempts) != len(tc.steps) {
				t.Fatalf("chunk %s with %d attempts, want %s with %d", ch.State, len(ch.Attempts), tc.wantState, len(tc.steps))
			}
			if tc.wantErr != "" && !strings.Contains(ch.Attempts[0].Error, tc.wantErr) {
				t.Fatalf("first attempt error %q, want %q", ch.Attempts[0].Error, tc.wantErr)
			}
			if got := ch.Attempts[0].Stack != ""; got != tc.wantStack {
				t.Fatalf("stack recorded %v, want %v", got, tc.wantStack)
			}
			if tc.wantStack && !strings.Contains(ch.Attempts[0].Stack, "scriptKind.Process") {
				t.Fatalf("stack does not name the handler:\n%s", ch.Attempts[0].Stack)
			}
			for i, a := range ch.Attempts {
				if a.N != i+1 || a.Worker != "test-worker" {
					t.Fatalf("attempt %d: %+v", i, a)
				}
			}
			r.control()
			got := r.job(j.ID)
			if got.State != tc.jobState {
				t.Fatalf("job %s (%s), want %s", got.State, got.Error, tc.jobState)
			}
			if wantRetries := int64(len(tc.steps) - 1); got.Counters.Retries != wantRetries {
				t.Fatalf("retries %d, want %d", got.Counters.Retries, wantRetries)
			}
		})
	}
}

// A RetryIn longer than the queue's 12 h visibility limit parks the chunk
// in the store; the sweeper re-enqueues it when due, under a fake clock.
func TestRetryInThreeDays(t *testing.T) {
	t.Parallel()
	r := scriptRig(t, 3)
	ctx := context.Background()
	j, err := r.e.Submit(ctx, scriptArgs{Script: []string{"retry3d", "ok"}}, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 1}})
	if err != nil {
		t.Fatal(err)
	}
	r.control()
	chq := r.e.Queues().Channel(engine.DefaultChannel)
	msgs := r.receiveAll(chq)
	v := r.e.ProcessChunk(ctx, msgs[0].Body, engine.Delivery{ReceiveCount: 1})
	if !v.Ack || v.Outcome != job.OutcomeRetry {
		t.Fatalf("verdict %+v: a parked retry acks the message", v)
	}
	r.ack(chq, msgs[0])
	for _, d := range []time.Duration{time.Hour, 71 * time.Hour} {
		r.clk.Advance(d - time.Minute)
		rep, err := r.e.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Retries != 0 || len(r.receiveAll(chq)) != 0 {
			t.Fatalf("released %d retries %s early", rep.Retries, d)
		}
		r.clk.Advance(time.Minute)
	}
	rep, err := r.e.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msgs = r.receiveAll(chq)
	if rep.Retries != 1 || len(msgs) != 1 {
		t.Fatalf("after 3 days: released %d, queued %d; want 1", rep.Retries, len(msgs))
	}
	if v := r.e.ProcessChunk(ctx, msgs[0].Body, engine.Delivery{ReceiveCount: 1}); !v.Ack || v.Outcome != job.OutcomeSucceeded {
		t.Fatalf("second attempt: %+v", v)
	}
	r.control()
	if got := r.job(j.ID); got.State != job.StateSucceeded || got.Counters.Retries != 1 {
		t.Fatalf("job %s %+v", got.State, got.Counters)
	}
}

func TestCancelSkipsQueuedChunks(t *testing.T) {
	t.Parallel()
	r := scriptRig(t, 3)
	ctx := context.Background()
	j, err := r.e.Submit(ctx, scriptArgs{Script: []string{"ok"}}, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 5}, ChunkSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.control()
	if _, err := r.e.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	for _, m := range r.receiveAll(r.e.Queues().Channel(engine.DefaultChannel)) {
		if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: 1}); !v.Ack || v.Outcome != "" {
			t.Fatalf("chunk of a cancelled job: %+v", v)
		}
	}
	got := r.job(j.ID)
	if got.State != job.StateCancelled || got.Counters.ChunksDone != 0 || got.FinishedAt == nil {
		t.Fatalf("job %s %+v", got.State, got.Counters)
	}
	if _, err := r.e.Cancel(ctx, j.ID); !errors.Is(err, job.ErrConflict) {
		t.Fatalf("second cancel: %v, want ErrConflict", err)
	}
	if _, err := r.e.Cancel(ctx, "01J00000000000000000000000"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("cancel missing: %v, want ErrNotFound", err)
	}
}

func TestTolerateFailedPct(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pct  float64
		want job.State
	}{{0, job.StateFailed}, {9.9, job.StateFailed}, {10, job.StateSucceeded}} {
		r := scriptRig(t, 1)
		ctx := context.Background()
		pct := tc.pct
		// Ten chunks; chunk 0 fails for good, the others succeed.
		j, err := r.e.Submit(ctx, scriptArgs{Script: []string{"perm-chunk-0"}}, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 10}, ChunkSize: 1, TolerateFailedPct: &pct})
		if err != nil {
			t.Fatal(err)
		}
		r.control()
		for _, m := range r.receiveAll(r.e.Queues().Channel(engine.DefaultChannel)) {
			if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: 1}); !v.Ack {
				t.Fatalf("verdict %+v", v)
			}
		}
		r.control()
		got := r.job(j.ID)
		if got.State != tc.want || got.Counters.ChunksFailed != 1 || got.Counters.ChunksDone != 9 {
			t.Fatalf("tolerate %.1f%%: job %s (%s) %+v, want %s", tc.pct, got.State, got.Error, got.Counters, tc.want)
		}
		if tc.want == job.StateFailed && !strings.Contains(got.Error, "1 of 10 chunks failed") {
			t.Fatalf("job error %q does not explain the failure", got.Error)
		}
	}
}
