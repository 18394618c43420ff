package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
	"github.com/slicework/slicework/shared/queue"
)

// napArgs makes chunk i ask, on its first attempt, to be retried after
// After[i]; later attempts succeed.
type napArgs struct {
	After []engine.Duration `json:"after"`
}

func (napArgs) Kind() string { return "nap" }

type napKind struct{}

func (napKind) Process(_ context.Context, c *engine.Chunk[napArgs]) error {
	if c.Attempt == 1 {
		return engine.RetryIn(time.Duration(c.Args.After[c.Index()]), errors.New("not yet"))
	}
	return nil
}

func napRegistry() *engine.Registry {
	reg := engine.NewRegistry()
	engine.MustRegister[napArgs](reg, napKind{}, engine.Options{MaxAttempts: 3})
	return reg
}

// RetryIn takes any delay, from seconds to weeks, on every backend: up to
// the queue's 12-hour visibility limit the message is hidden for the delay;
// beyond it the chunk is parked in the store, and the sweeper (driven by
// the fake clock) re-enqueues it when due and not a minute before.
func TestRetryInAnyLength(t *testing.T) {
	t.Parallel()
	delays := []time.Duration{30 * time.Second, 12 * time.Hour, 12*time.Hour + time.Second, 3 * 24 * time.Hour, 14 * 24 * time.Hour}
	forEachBackend(t, func(t *testing.T, on string) {
		r := newRigOn(t, on, napRegistry())
		ctx := context.Background()
		t0 := r.clk.Now()
		args := napArgs{}
		for _, d := range delays {
			args.After = append(args.After, engine.Duration(d))
		}
		j, err := r.e.Submit(ctx, args, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: int64(len(delays))}, ChunkSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		r.control()
		chq := r.e.Queues().Channel(engine.DefaultChannel)
		msgs := r.receiveAll(chq)
		if len(msgs) != len(delays) {
			t.Fatalf("%d chunk tasks, want %d", len(msgs), len(delays))
		}
		for _, m := range msgs {
			i := r.chunkTask(m.Body).Index
			d := delays[i]
			v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: 1})
			ch, err := r.be.Store.GetChunk(ctx, j.ID, i)
			if err != nil {
				t.Fatal(err)
			}
			if v.Outcome != job.OutcomeRetry || ch.State != job.ChunkRetrying || ch.Attempts[0].RetryAfter != d {
				t.Fatalf("RetryIn(%s): verdict %+v, chunk %s %+v", d, v, ch.State, ch.Attempts)
			}
			if d <= queue.MaxVisibility {
				// Hidden on the queue for d: the host changes the message's visibility.
				if v.Ack || v.RetryAfter != d || ch.RetryAt != nil {
					t.Fatalf("RetryIn(%s): verdict %+v, retry at %v; want the message hidden for %s", d, v, ch.RetryAt, d)
				}
				// Its redelivery succeeds.
				if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: 2}); !v.Ack || v.Outcome != job.OutcomeSucceeded {
					t.Fatalf("RetryIn(%s): second attempt %+v", d, v)
				}
			} else if !v.Ack || ch.RetryAt == nil || !ch.RetryAt.Equal(t0.Add(d)) || ch.Task == nil || ch.Task.Index != i {
				t.Fatalf("RetryIn(%s): verdict %+v, retry at %v, task %+v; want it parked until %s", d, v, ch.RetryAt, ch.Task, t0.Add(d))
			}
			r.ack(chq, m)
		}

		// The parked chunks come back one by one, each when due.
		for i := 2; i < len(delays); i++ {
			due := t0.Add(delays[i])
			for _, early := range []time.Duration{time.Hour, time.Minute} {
				r.clk.Set(due.Add(-early))
				rep, err := r.e.Sweep(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if rep.Retries != 0 || len(r.receiveAll(chq)) != 0 {
					t.Fatalf("chunk %d (RetryIn %s) released %s early", i, delays[i], early)
				}
			}
			r.clk.Set(due)
			rep, err := r.e.Sweep(ctx)
			if err != nil {
				t.Fatal(err)
			}
			back := r.receiveAll(chq)
			if rep.Retries != 1 || len(back) != 1 || r.chunkTask(back[0].Body).Index != int64(i) {
				t.Fatalf("at %s: released %d, queued %d; want chunk %d", delays[i], rep.Retries, len(back), i)
			}
			if v := r.e.ProcessChunk(ctx, back[0].Body, engine.Delivery{ReceiveCount: 1}); !v.Ack || v.Outcome != job.OutcomeSucceeded {
				t.Fatalf("chunk %d second attempt: %+v", i, v)
			}
			r.ack(chq, back[0])
		}
		r.control()
		got := r.job(j.ID)
		c := got.Counters
		n := int64(len(delays))
		if got.State != job.StateSucceeded || c.ChunksTotal != n || c.ChunksDone != n || c.ItemsDone != n || c.Retries != n || c.ChunksFailed != 0 {
			t.Fatalf("job %s %+v, want succeeded with %d chunks done after %d retries", got.State, c, n, n)
		}
		if calls := r.terminalCalls(j.ID); calls != 1 {
			t.Fatalf("terminal hook ran %d times", calls)
		}
	})
}

// The brief's case on every backend: a chunk that asks to be retried in
// three days is parked, is still parked at 2 days 23 hours, is released by
// the sweep after 3 days, and the job completes with exact counts.
func TestRetryInThreeDaysOnEveryBackend(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		r := newRigOn(t, on, napRegistry())
		ctx := context.Background()
		args := napArgs{After: []engine.Duration{engine.Duration(72 * time.Hour)}}
		j, err := r.e.Submit(ctx, args, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 1}})
		if err != nil {
			t.Fatal(err)
		}
		r.control()
		chq := r.e.Queues().Channel(engine.DefaultChannel)
		msgs := r.receiveAll(chq)
		if len(msgs) != 1 {
			t.Fatalf("%d chunk tasks", len(msgs))
		}
		if v := r.e.ProcessChunk(ctx, msgs[0].Body, engine.Delivery{ReceiveCount: 1}); !v.Ack || v.Outcome != job.OutcomeRetry {
			t.Fatalf("verdict %+v: a parked retry acks the message", v)
		}
		r.ack(chq, msgs[0])
		r.clk.Advance(2*24*time.Hour + 23*time.Hour)
		rep, err := r.e.Sweep(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Retries != 0 || len(r.receiveAll(chq)) != 0 {
			t.Fatal("released at 2d23h, before its 3 days")
		}
		if got := r.job(j.ID); got.State != job.StateRunning || got.Counters.ChunksDone != 0 {
			t.Fatalf("job at 2d23h: %s %+v", got.State, got.Counters)
		}
		r.clk.Advance(time.Hour)
		if rep, err = r.e.Sweep(ctx); err != nil || rep.Retries != 1 {
			t.Fatalf("sweep after 3 days: %+v, %v; want 1 retry released", rep, err)
		}
		if n := r.drain(); n != 1 {
			t.Fatalf("%d chunk deliveries after the release, want 1", n)
		}
		got := r.job(j.ID)
		if c := got.Counters; got.State != job.StateSucceeded || c.ChunksDone != 1 || c.ChunksTotal != 1 || c.Retries != 1 || c.ItemsDone != 1 {
			t.Fatalf("job %s %+v", got.State, c)
		}
	})
}

// A job due in two days, by run_at or by delay, waits in the store as
// scheduled on every backend: no slice task exists, a sweep a minute early
// leaves it, the sweep when due releases it, and it runs to exact counts.
func TestRunAtDaysAhead(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		r := newRigOn(t, on, recomputeRegistry(t))
		ctx := context.Background()
		t0 := r.clk.Now()
		due := t0.Add(48 * time.Hour)
		in := job.Input{Type: job.InputIDRange, Start: 0, End: 30}
		byRunAt, err := r.e.Submit(ctx, recompute.Args{}, engine.SubmitOptions{Input: in, ChunkSize: 10, RunAt: due})
		if err != nil {
			t.Fatal(err)
		}
		byDelay, err := r.e.SubmitRequest(ctx, engine.Request{Kind: recompute.Kind, Input: in, ChunkSize: 10, Delay: engine.Duration(48 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{byRunAt.ID, byDelay.ID}
		for _, id := range ids {
			if j := r.job(id); j.State != job.StateScheduled || j.RunAt == nil || !j.RunAt.Equal(due) {
				t.Fatalf("job %s: %s run at %v, want scheduled for %s", id, j.State, j.RunAt, due)
			}
		}
		if n := len(r.receiveAll(r.e.Queues().Slice())); n != 0 {
			t.Fatalf("%d slice tasks for jobs two days out, want none", n)
		}
		r.clk.Set(due.Add(-time.Minute))
		if rep, err := r.e.Sweep(ctx); err != nil || rep.Released != 0 {
			t.Fatalf("sweep a minute early: %+v, %v", rep, err)
		}
		r.clk.Set(due)
		if rep, err := r.e.Sweep(ctx); err != nil || rep.Released != 2 {
			t.Fatalf("sweep when due: %+v, %v; want 2 released", rep, err)
		}
		r.drain()
		for _, id := range ids {
			j := r.job(id)
			if c := j.Counters; j.State != job.StateSucceeded || c.ChunksDone != 3 || c.ItemsDone != 30 || j.StartedAt == nil || j.StartedAt.Before(due) {
				t.Fatalf("job %s: %s %+v started %v", id, j.State, c, j.StartedAt)
			}
		}
	})
}

// A delay within the queue's 15-minute limit rides on the slice task's
// delay: the job is queued at once (no sweep needed), the task is not
// visible before the delay, even after a sweep, and then runs.
func TestShortDelayRidesOnTheQueue(t *testing.T) {
	t.Parallel()
	r := newRig(t, recomputeRegistry(t))
	ctx := context.Background()
	j, err := r.e.Submit(ctx, recompute.Args{}, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 10}, Delay: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.job(j.ID); got.State != job.StateQueued {
		t.Fatalf("state %s, want queued", got.State)
	}
	st, err := r.be.Queue.Stats(ctx, r.e.Queues().Slice())
	if err != nil {
		t.Fatal(err)
	}
	if st.Visible != 0 || st.Delayed != 1 {
		t.Fatalf("slice queue %+v, want one delayed task", st)
	}
	// A sweep after the stale threshold (5 min) must not start it early.
	r.clk.Advance(6 * time.Minute)
	if _, err := r.e.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	r.clk.Advance(4*time.Minute - time.Second)
	if n := r.control(); n != 0 {
		t.Fatalf("the slice task ran %d times before its delay", n)
	}
	r.clk.Advance(time.Second)
	r.drain()
	if got := r.job(j.ID); got.State != job.StateSucceeded || got.Counters.ChunksDone != 1 {
		t.Fatalf("job %s %+v", got.State, got.Counters)
	}
}

// Submissions pick the queue or the store by the delay's length, and bad
// delays are refused with the field named and nothing written.
func TestSubmitDelays(t *testing.T) {
	t.Parallel()
	r := newRig(t, recomputeRegistry(t))
	ctx := context.Background()
	now := r.clk.Now()
	in := job.Input{Type: job.InputIDRange, Start: 0, End: 1}
	runAt := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	tests := []struct {
		name      string
		req       engine.Request
		wantState job.State
		wantRunAt time.Time
		wantField string
	}{
		{name: "no delay", req: engine.Request{}, wantState: job.StateQueued},
		{name: "run_at in the past", req: engine.Request{RunAt: runAt(-time.Hour)}, wantState: job.StateQueued, wantRunAt: now.Add(-time.Hour)},
		{name: "delay 15 min", req: engine.Request{Delay: engine.Duration(15 * time.Minute)}, wantState: job.StateQueued, wantRunAt: now.Add(15 * time.Minute)},
		{name: "delay 15 min 1 s", req: engine.Request{Delay: engine.Duration(15*time.Minute + time.Second)}, wantState: job.StateScheduled, wantRunAt: now.Add(15*time.Minute + time.Second)},
		{name: "run_at 15 min", req: engine.Request{RunAt: runAt(15 * time.Minute)}, wantState: job.StateQueued, wantRunAt: now.Add(15 * time.Minute)},
		{name: "run_at a year", req: engine.Request{RunAt: runAt(engine.MaxRunAhead)}, wantState: job.StateScheduled, wantRunAt: now.Add(engine.MaxRunAhead)},
		{name: "delay a year", req: engine.Request{Delay: engine.Duration(engine.MaxRunAhead)}, wantState: job.StateScheduled, wantRunAt: now.Add(engine.MaxRunAhead)},
		{name: "both", req: engine.Request{RunAt: runAt(time.Hour), Delay: engine.Duration(time.Hour)}, wantField: "delay"},
		{name: "negative delay", req: engine.Request{Delay: engine.Duration(-time.Second)}, wantField: "delay"},
		{name: "delay too long", req: engine.Request{Delay: engine.Duration(engine.MaxRunAhead + time.Second)}, wantField: "delay"},
		{name: "run_at too far", req: engine.Request{RunAt: runAt(engine.MaxRunAhead + time.Second)}, wantField: "run_at"},
	}
	for _, tc := range tests {
		req := tc.req
		req.Kind, req.Input = recompute.Kind, in
		j, err := r.e.SubmitRequest(ctx, req)
		if tc.wantField != "" {
			var ve *engine.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.wantField || !errors.Is(err, job.ErrInvalid) {
				t.Errorf("%s: error %v, want a validation error on %s", tc.name, err, tc.wantField)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if j.State != tc.wantState || (tc.wantRunAt.IsZero() != (j.RunAt == nil)) || (j.RunAt != nil && !j.RunAt.Equal(tc.wantRunAt)) {
			t.Errorf("%s: %s at %v, want %s at %v", tc.name, j.State, j.RunAt, tc.wantState, tc.wantRunAt)
		}
	}
	page, err := r.be.Store.ListJobs(ctx, job.Query{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if want := 7; len(page.Jobs) != want {
		t.Errorf("%d jobs written, want %d (refused submissions write nothing)", len(page.Jobs), want)
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"90s"`, 90 * time.Second, false},
		{`"15m"`, 15 * time.Minute, false},
		{`"36h"`, 36 * time.Hour, false},
		{`"3d"`, 72 * time.Hour, false},
		{`"1d12h30m"`, 36*time.Hour + 30*time.Minute, false},
		{`"-2d"`, -48 * time.Hour, false},
		{`"0"`, 0, false},
		{`120`, 120 * time.Second, false},
		{`1.5`, 1500 * time.Millisecond, false},
		{`"3 days"`, 0, true},
		{`"d"`, 0, true},
		{`"1d-1h"`, 0, true},
		{`"3w"`, 0, true},
		{`"999999999999d"`, 0, true},
		{`1e300`, 0, true},
		{`true`, 0, true},
		{`null`, 0, false},
	}
	for _, tc := range tests {
		var d engine.Duration
		err := json.Unmarshal([]byte(tc.in), &d)
		if tc.wantErr {
			if !errors.Is(err, job.ErrInvalid) {
				t.Errorf("%s: %v, %v; want an error wrapping job.ErrInvalid", tc.in, time.Duration(d), err)
			}
			continue
		}
		if err != nil || time.Duration(d) != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.in, time.Duration(d), err, tc.want)
		}
	}
	var req engine.Request
	if err := json.Unmarshal([]byte(`{"kind":"k","input":{"type":"ids"},"delay":"2d"}`), &req); err != nil || time.Duration(req.Delay) != 48*time.Hour {
		t.Fatalf("request delay %v, %v", req.Delay, err)
	}
	out, err := json.Marshal(engine.Request{Kind: "k", Delay: engine.Duration(72 * time.Hour)})
	if err != nil || !strings.Contains(string(out), `"delay":"72h0m0s"`) {
		t.Fatalf("marshal: %s, %v", out, err)
	}
	if out, _ := json.Marshal(engine.Request{Kind: "k"}); strings.Contains(string(out), "delay") {
		t.Fatalf("a zero delay is written: %s", out)
	}
}

func TestMailRetrySchedule(t *testing.T) {
	t.Parallel()
	s := engine.MailRetry
	if got, want := s.Total(), 99*time.Hour+45*time.Minute; got != want {
		t.Errorf("Total = %s, want %s", got, want)
	}
	if len(s)+1 != engine.MailRetryAttempts {
		t.Errorf("MailRetryAttempts = %d for %d delays", engine.MailRetryAttempts, len(s))
	}
	for n := 1; n <= len(s)+2; n++ {
		want := s[min(n, len(s))-1]
		for range 50 {
			if d := s.Delay(n); d > want || d < want-want/10-time.Second || d%time.Second != 0 {
				t.Fatalf("Delay(%d) = %s, want within a tenth below %s, whole seconds", n, d, want)
			}
		}
	}
	if d := (engine.RetrySchedule{}).Delay(1); d != 0 {
		t.Errorf("empty schedule delay %s", d)
	}
	cause := errors.New("452 mailbox full")
	if err := s.Retry(len(s), cause); engine.IsPermanent(err) || !errors.Is(err, cause) {
		t.Errorf("Retry within the schedule = %v, want a retry wrapping the cause", err)
	}
	err := s.Retry(len(s)+1, cause)
	if !engine.IsPermanent(err) || !errors.Is(err, cause) || !strings.Contains(err.Error(), "gave up after 11 attempts over 99h45m0s") {
		t.Errorf("Retry past the schedule = %v, want a permanent error that names the span", err)
	}
}

// mailArgs is a mail delivery that never gets through.
type mailArgs struct{}

func (mailArgs) Kind() string { return "mail" }

type mailKind struct{}

func (mailKind) Process(_ context.Context, c *engine.Chunk[mailArgs]) error {
	return engine.MailRetry.Retry(c.Attempt, errors.New("451 try again later"))
}

// A kind that retries with MailRetry is tried eleven times over about four
// days, through queue visibility for the short delays and the store for
// the daily ones, and then fails for good. The embedded queue runs on the
// fake clock, so the whole four days are simulated.
func TestMailRetryOverFourDays(t *testing.T) {
	t.Parallel()
	reg := engine.NewRegistry()
	engine.MustRegister[mailArgs](reg, mailKind{}, engine.Options{MaxAttempts: engine.MailRetryAttempts})
	r := newRig(t, reg)
	ctx := context.Background()
	j, err := r.e.Submit(ctx, mailArgs{}, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 1}})
	if err != nil {
		t.Fatal(err)
	}
	r.control()
	chq := r.e.Queues().Channel(engine.DefaultChannel)
	t0 := r.clk.Now()
	parked := 0
	for step := 0; ; step++ {
		if step > 20 {
			t.Fatal("retries do not end")
		}
		msgs := r.receiveAll(chq)
		if len(msgs) != 1 {
			t.Fatalf("step %d: %d chunk messages visible, want 1", step, len(msgs))
		}
		v := r.e.ProcessChunk(ctx, msgs[0].Body, engine.Delivery{ReceiveCount: step + 1})
		if v.Outcome == job.OutcomeFailed {
			r.ack(chq, msgs[0])
			break
		}
		if v.Outcome != job.OutcomeRetry {
			t.Fatalf("step %d: verdict %+v", step, v)
		}
		if !v.Ack {
			// Hidden for the delay, as the worker handler does.
			if err := r.be.Queue.ChangeVisibility(ctx, chq, queue.VisibilityChange{Receipt: msgs[0].Receipt, Timeout: v.RetryAfter}); err != nil {
				t.Fatal(err)
			}
			r.clk.Advance(v.RetryAfter)
			continue
		}
		r.ack(chq, msgs[0])
		ch, err := r.be.Store.GetChunk(ctx, j.ID, 0)
		if err != nil || ch.RetryAt == nil {
			t.Fatalf("step %d: acked retry but chunk not parked: %+v, %v", step, ch, err)
		}
		parked++
		r.clk.Set(*ch.RetryAt)
		if rep, err := r.e.Sweep(ctx); err != nil || rep.Retries != 1 {
			t.Fatalf("step %d: sweep %+v, %v", step, rep, err)
		}
	}
	r.control()
	ch, err := r.be.Store.GetChunk(ctx, j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Attempts) != engine.MailRetryAttempts || ch.State != job.ChunkFailed {
		t.Fatalf("chunk %s after %d attempts, want failed after %d", ch.State, len(ch.Attempts), engine.MailRetryAttempts)
	}
	if last := ch.Attempts[len(ch.Attempts)-1]; !strings.Contains(last.Error, "gave up after 11 attempts") {
		t.Fatalf("last attempt error %q", last.Error)
	}
	span := ch.Attempts[len(ch.Attempts)-1].Started.Sub(t0)
	total := engine.MailRetry.Total()
	if span > total || span < total-total/10-time.Minute {
		t.Fatalf("retried over %s, want about %s (less up to a tenth of jitter)", span, total)
	}
	if parked != 3 {
		t.Fatalf("%d retries parked in the store, want the 3 daily ones", parked)
	}
	got := r.job(j.ID)
	if c := got.Counters; got.State != job.StateFailed || c.ChunksFailed != 1 || c.Retries != int64(len(engine.MailRetry)) {
		t.Fatalf("job %s %+v", got.State, c)
	}
}
