// Package queuetest is the conformance suite every queue.Queue adapter
// passes: the embedded sqlitequeue today, an SQS adapter (run against SQS
// emulators and SQS itself) later.
//
// The suite uses real time with whole-second visibility timeouts and delays,
// because SQS has one-second granularity. Timing assertions are causal only:
// a message must not be delivered before the instant at which it could have
// become visible at the earliest, and must be delivered eventually. Receive
// may return fewer messages than are available, so the suite keeps receiving
// until it has what it expects or a deadline passes.
package queuetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
)

const (
	// deadline bounds every "eventually" loop of the suite.
	deadline = 15 * time.Second
	// poll is the long-poll wait of the suite's receive loops.
	poll = time.Second
	// long is a visibility timeout that no subtest outlives, so messages
	// received with it are never redelivered during the subtest.
	long = 30 * time.Second
)

// Run runs the suite against the queue that newQueue returns. Subtests run in
// parallel; each calls newQueue once and uses its own uniquely named queues
// (valid SQS names), so newQueue may return handles on a shared backend.
// Queues are not deleted afterwards: the port has no operation for it.
func Run(t *testing.T, newQueue func(t *testing.T) queue.Queue) {
	t.Helper()

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		bodies := [][]byte{
			[]byte("hello"),
			[]byte(`{"bin":"\u0000\u0001\u001f\u00ff","utf8":"héllo wörld ✓ 😀","ws":"a\nb\tc\r\n","esc":"\"\\/"}`),
			[]byte("line one\nline two\ttabbed\r\nunicode: ünïcödé 日本語 🚀"),
			largeBody(250 << 10),
		}
		var out []queue.Outgoing
		for _, b := range bodies {
			out = append(out, queue.Outgoing{Body: b})
		}
		before := time.Now()
		if err := q.Send(ctx, name, out...); err != nil {
			t.Fatalf("Send: %v", err)
		}
		got := receiveN(t, ctx, q, name, len(bodies), long)
		if len(got) != len(bodies) {
			t.Fatalf("received %d messages, want %d", len(got), len(bodies))
		}
		byBody := map[string]queue.Message{}
		for _, m := range got {
			byBody[string(m.Body)] = m
		}
		for i, b := range bodies {
			m, ok := byBody[string(b)]
			if !ok {
				t.Errorf("body %d (%d bytes) not received intact", i, len(b))
				continue
			}
			if m.ID == "" || m.Receipt == "" {
				t.Errorf("body %d: ID %q, Receipt %q: want both set", i, m.ID, m.Receipt)
			}
			if m.ReceiveCount != 1 {
				t.Errorf("body %d: ReceiveCount = %d, want 1", i, m.ReceiveCount)
			}
			if m.SentAt.IsZero() || m.FirstReceivedAt.IsZero() {
				t.Errorf("body %d: SentAt %v, FirstReceivedAt %v: want both set", i, m.SentAt, m.FirstReceivedAt)
			}
			if m.FirstReceivedAt.Before(m.SentAt) {
				t.Errorf("body %d: FirstReceivedAt %v before SentAt %v", i, m.FirstReceivedAt, m.SentAt)
			}
			if m.SentAt.Before(before.Add(-time.Minute)) || m.SentAt.After(time.Now().Add(time.Minute)) {
				t.Errorf("body %d: SentAt %v is not around the time of Send (%v)", i, m.SentAt, before)
			}
		}
		ids := map[string]bool{}
		for _, m := range got {
			if ids[m.ID] {
				t.Errorf("ID %s used by two messages", m.ID)
			}
			ids[m.ID] = true
		}
		deleteAll(t, ctx, q, name, got)
		waitStats(t, ctx, q, name, queue.Stats{})
	})

	t.Run("Limits", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		ok := queue.Outgoing{Body: []byte("ok")}
		// The invalid message comes after more than one batch of valid
		// ones: nothing may be sent, not even the first batch.
		var msgs []queue.Outgoing
		for range queue.MaxBatch + 1 {
			msgs = append(msgs, ok)
		}
		cases := []struct {
			what string
			msgs []queue.Outgoing
		}{
			{"body over MaxBodyBytes", slices.Concat(msgs, []queue.Outgoing{{Body: bytes.Repeat([]byte("x"), queue.MaxBodyBytes+1)}})},
			{"delay over MaxDelay", slices.Concat(msgs, []queue.Outgoing{{Body: []byte("late"), Delay: queue.MaxDelay + time.Second}})},
			{"negative delay", slices.Concat(msgs, []queue.Outgoing{{Body: []byte("early"), Delay: -time.Second}})},
			{"empty body", slices.Concat(msgs, []queue.Outgoing{{Body: nil}})},
			{"body not UTF-8", slices.Concat(msgs, []queue.Outgoing{{Body: []byte{'a', 0xff, 'b'}}})},
			{"body with NUL", slices.Concat(msgs, []queue.Outgoing{{Body: []byte("a\x00b")}})},
		}
		for _, c := range cases {
			if err := q.Send(ctx, name, c.msgs...); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("Send with %s: %v, want ErrInvalid", c.what, err)
			}
		}
		for _, n := range []int{0, -1, queue.MaxBatch + 1} {
			if _, err := q.Receive(ctx, name, n, 0, 0); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("Receive(max=%d): %v, want ErrInvalid", n, err)
			}
		}
		for _, vis := range []time.Duration{-time.Second, queue.MaxVisibility + time.Second} {
			if _, err := q.Receive(ctx, name, 1, vis, 0); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("Receive(visibility=%v): %v, want ErrInvalid", vis, err)
			}
		}
		// Nothing of the rejected sends may have arrived.
		expectEmpty(t, ctx, q, name, poll)
		waitStats(t, ctx, q, name, queue.Stats{})
	})

	t.Run("BatchSend", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		const n = 25
		var msgs []queue.Outgoing
		for i := range n {
			msgs = append(msgs, queue.Outgoing{Body: fmt.Appendf(nil, "msg-%02d", i)})
		}
		if err := q.Send(ctx, name, msgs...); err != nil {
			t.Fatalf("Send %d: %v", n, err)
		}
		got := receiveN(t, ctx, q, name, n, long)
		seen := map[string]int{}
		for _, m := range got {
			seen[string(m.Body)]++
		}
		for i := range n {
			if c := seen[fmt.Sprintf("msg-%02d", i)]; c != 1 {
				t.Errorf("msg-%02d received %d times, want 1", i, c)
			}
		}
		deleteAll(t, ctx, q, name, got)
		waitStats(t, ctx, q, name, queue.Stats{})
	})

	t.Run("LeaseAndRedelivery", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		send(t, ctx, q, name, queue.Outgoing{Body: []byte("lease")})

		const vis = 2 * time.Second
		start := time.Now()
		first := receiveOne(t, ctx, q, name, vis)
		if first.ReceiveCount != 1 {
			t.Errorf("first delivery: ReceiveCount = %d, want 1", first.ReceiveCount)
		}
		// The lease began no earlier than start, so the message must not
		// come back before start+vis. The second lease lasts 1 s.
		second := receiveOneAfter(t, ctx, q, name, time.Second, start, vis)
		if second.ID != first.ID || string(second.Body) != "lease" {
			t.Errorf("redelivery = %s %q, want %s %q", second.ID, second.Body, first.ID, "lease")
		}
		if second.ReceiveCount != 2 {
			t.Errorf("redelivery: ReceiveCount = %d, want 2", second.ReceiveCount)
		}
		if second.Receipt == first.Receipt {
			t.Errorf("redelivery reused receipt %q", first.Receipt)
		}
		if !second.SentAt.Equal(first.SentAt) || !second.FirstReceivedAt.Equal(first.FirstReceivedAt) {
			t.Errorf("redelivery changed SentAt/FirstReceivedAt: %v/%v, want %v/%v",
				second.SentAt, second.FirstReceivedAt, first.SentAt, first.FirstReceivedAt)
		}
		// A stale receipt is ignored without error. (Whether it deletes the
		// message is backend-specific: SQS may or may not; the embedded
		// adapter does not.)
		if err := q.Delete(ctx, name, first.Receipt); err != nil {
			t.Errorf("Delete with stale receipt: %v, want nil", err)
		}
		// The current receipt removes the message for good.
		if err := q.Delete(ctx, name, second.Receipt); err != nil {
			t.Errorf("Delete with current receipt: %v", err)
		}
		waitStats(t, ctx, q, name, queue.Stats{})
	})

	t.Run("Delay", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		const delay = 2 * time.Second
		start := time.Now()
		send(t, ctx, q, name, queue.Outgoing{Body: []byte("later"), Delay: delay})
		// The first long poll (1 s) ends before the delay: it must come back
		// empty; a later one returns the message.
		m := receiveOneAfter(t, ctx, q, name, long, start, delay)
		if string(m.Body) != "later" || m.ReceiveCount != 1 {
			t.Errorf("delayed message = %q count %d, want %q count 1", m.Body, m.ReceiveCount, "later")
		}
		deleteAll(t, ctx, q, name, []queue.Message{m})
	})

	t.Run("ChangeVisibility", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		send(t, ctx, q, name, queue.Outgoing{Body: []byte("cv")})
		m := receiveOne(t, ctx, q, name, long)

		for _, d := range []time.Duration{-time.Second, queue.MaxVisibility + time.Second} {
			if err := q.ChangeVisibility(ctx, name, queue.VisibilityChange{Receipt: m.Receipt, Timeout: d}); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("ChangeVisibility(%v): %v, want ErrInvalid", d, err)
			}
		}
		// 0 makes it visible at once (well before the 30 s lease expires).
		if err := q.ChangeVisibility(ctx, name, queue.VisibilityChange{Receipt: m.Receipt, Timeout: 0}); err != nil {
			t.Fatalf("ChangeVisibility(0): %v", err)
		}
		m2 := receiveOne(t, ctx, q, name, long)
		if m2.ID != m.ID || m2.ReceiveCount != 2 {
			t.Fatalf("after ChangeVisibility(0): got %s count %d, want %s count 2", m2.ID, m2.ReceiveCount, m.ID)
		}
		// 2 s hides it for 2 s from the call, then it is visible again.
		const d = 2 * time.Second
		start := time.Now()
		if err := q.ChangeVisibility(ctx, name, queue.VisibilityChange{Receipt: m2.Receipt, Timeout: d}); err != nil {
			t.Fatalf("ChangeVisibility(%v): %v", d, err)
		}
		m3 := receiveOneAfter(t, ctx, q, name, time.Second, start, d)
		if m3.ID != m.ID || m3.ReceiveCount != 3 {
			t.Errorf("after ChangeVisibility(%v): got %s count %d, want %s count 3", d, m3.ID, m3.ReceiveCount, m.ID)
		}
		deleteAll(t, ctx, q, name, []queue.Message{m3})
	})

	t.Run("ChangeVisibilityBatch", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		send(t, ctx, q, name, queue.Outgoing{Body: []byte("a")}, queue.Outgoing{Body: []byte("b")})
		ms := receiveN(t, ctx, q, name, 2, long)
		// One call brings both back at once.
		err := q.ChangeVisibility(ctx, name,
			queue.VisibilityChange{Receipt: ms[0].Receipt, Timeout: 0},
			queue.VisibilityChange{Receipt: ms[1].Receipt, Timeout: 0})
		if err != nil {
			t.Fatalf("ChangeVisibility batch: %v", err)
		}
		again := receiveN(t, ctx, q, name, 2, long)
		if got := bodiesOf(again); len(got) != 2 {
			t.Fatalf("after batch change: %v", got)
		}
		var changes []queue.VisibilityChange
		for i := 0; i <= queue.MaxBatch; i++ {
			changes = append(changes, queue.VisibilityChange{Receipt: again[0].Receipt})
		}
		if err := q.ChangeVisibility(ctx, name, changes...); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("ChangeVisibility with %d changes: %v, want ErrInvalid", len(changes), err)
		}
		deleteAll(t, ctx, q, name, again)
	})

	t.Run("DeadLetter", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		dlq := create(t, ctx, q, "dlq", queue.Config{Visibility: long})
		src := create(t, ctx, q, "src", queue.Config{Visibility: time.Second, MaxReceives: 2, DeadLetter: dlq})
		send(t, ctx, q, src, queue.Outgoing{Body: []byte("poison")})

		first := receiveOne(t, ctx, q, src, 0)
		second := receiveOne(t, ctx, q, src, 0)
		if first.ReceiveCount != 1 || second.ReceiveCount != 2 || second.ID != first.ID {
			t.Fatalf("deliveries: %s count %d, %s count %d; want the same message with counts 1, 2",
				first.ID, first.ReceiveCount, second.ID, second.ReceiveCount)
		}
		// Receiving from the source after the second lease expired moves
		// the message to the dead-letter queue instead of delivering it.
		end := time.Now().Add(deadline)
		var dead []queue.Message
		for len(dead) == 0 && time.Now().Before(end) {
			ms, err := q.Receive(ctx, src, queue.MaxBatch, 0, poll)
			if err != nil {
				t.Fatalf("Receive %s: %v", src, err)
			}
			if len(ms) > 0 {
				t.Fatalf("message delivered from the source queue with ReceiveCount %d after MaxReceives 2", ms[0].ReceiveCount)
			}
			if dead, err = q.Receive(ctx, dlq, queue.MaxBatch, long, 0); err != nil {
				t.Fatalf("Receive %s: %v", dlq, err)
			}
		}
		if len(dead) != 1 || string(dead[0].Body) != "poison" {
			t.Fatalf("dead-letter queue delivered %d messages (%v), want the original body", len(dead), bodiesOf(dead))
		}
		waitStats(t, ctx, q, src, queue.Stats{})
		deleteAll(t, ctx, q, dlq, dead)
		waitStats(t, ctx, q, dlq, queue.Stats{})
	})

	t.Run("ReceiveWait", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})

		const wait = 2 * time.Second
		start := time.Now()
		ms, err := q.Receive(ctx, name, 1, 0, wait)
		elapsed := time.Since(start)
		if err != nil || len(ms) != 0 {
			t.Fatalf("Receive on empty queue = %d messages, %v; want none, nil", len(ms), err)
		}
		if elapsed < wait/2 {
			t.Errorf("Receive with wait %v on an empty queue returned after %v: it did not wait", wait, elapsed)
		}

		// A message sent while a long poll waits is returned by that poll.
		const longWait = 8 * time.Second
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(500 * time.Millisecond)
			if err := q.Send(ctx, name, queue.Outgoing{Body: []byte("during wait")}); err != nil {
				t.Errorf("Send: %v", err)
			}
		}()
		start = time.Now()
		ms, err = q.Receive(ctx, name, 1, 0, longWait)
		elapsed = time.Since(start)
		<-done
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		if len(ms) != 1 || string(ms[0].Body) != "during wait" {
			t.Fatalf("Receive during wait = %v, want the message sent during the wait", bodiesOf(ms))
		}
		if elapsed >= longWait {
			t.Errorf("Receive returned after %v: it did not return when the message arrived", elapsed)
		}
		deleteAll(t, ctx, q, name, ms)
	})

	t.Run("Stats", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		st, err := q.Stats(ctx, name)
		if err != nil {
			t.Fatalf("Stats: %v", err)
		}
		if st != (queue.Stats{}) {
			t.Errorf("Stats of a new queue = %+v, want zero", st)
		}
		send(t, ctx, q, name,
			queue.Outgoing{Body: []byte("a")},
			queue.Outgoing{Body: []byte("b")},
			queue.Outgoing{Body: []byte("c")},
			queue.Outgoing{Body: []byte("delayed"), Delay: 10 * time.Minute},
		)
		waitStats(t, ctx, q, name, queue.Stats{Visible: 3, Delayed: 1})
		m := receiveOne(t, ctx, q, name, long)
		waitStats(t, ctx, q, name, queue.Stats{Visible: 2, InFlight: 1, Delayed: 1})
		if err := q.ChangeVisibility(ctx, name, queue.VisibilityChange{Receipt: m.Receipt, Timeout: 0}); err != nil {
			t.Fatalf("ChangeVisibility: %v", err)
		}
		waitStats(t, ctx, q, name, queue.Stats{Visible: 3, Delayed: 1})
		got := receiveN(t, ctx, q, name, 3, long)
		waitStats(t, ctx, q, name, queue.Stats{InFlight: 3, Delayed: 1})
		deleteAll(t, ctx, q, name, got)
		waitStats(t, ctx, q, name, queue.Stats{Delayed: 1})
	})

	t.Run("CreateAndNotFound", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		if err := q.Create(ctx, name, queue.Config{Visibility: long}); err != nil {
			t.Fatalf("Create again with the same config: %v", err)
		}
		send(t, ctx, q, name, queue.Outgoing{Body: []byte("kept")})
		// Re-creating with a new config keeps the messages and applies the
		// new default visibility (1 s): the message comes back after it.
		if err := q.Create(ctx, name, queue.Config{Visibility: time.Second}); err != nil {
			t.Fatalf("Create with a new config: %v", err)
		}
		first := receiveOne(t, ctx, q, name, 0)
		if string(first.Body) != "kept" {
			t.Fatalf("after re-Create got %q, want %q", first.Body, "kept")
		}
		second := receiveOne(t, ctx, q, name, 0)
		if second.ID != first.ID || second.ReceiveCount != 2 {
			t.Errorf("redelivery under the updated 1 s default visibility: %s count %d, want %s count 2",
				second.ID, second.ReceiveCount, first.ID)
		}
		deleteAll(t, ctx, q, name, []queue.Message{second})

		missing := queueName(t, "missing")
		if err := q.Send(ctx, missing, queue.Outgoing{Body: []byte("x")}); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Send to unknown queue: %v, want ErrNotFound", err)
		}
		if _, err := q.Receive(ctx, missing, 1, 0, 0); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Receive from unknown queue: %v, want ErrNotFound", err)
		}
		if err := q.Delete(ctx, missing, first.Receipt); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Delete on unknown queue: %v, want ErrNotFound", err)
		}
		if err := q.ChangeVisibility(ctx, missing, queue.VisibilityChange{Receipt: first.Receipt, Timeout: 0}); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("ChangeVisibility on unknown queue: %v, want ErrNotFound", err)
		}
		if _, err := q.Stats(ctx, missing); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Stats of unknown queue: %v, want ErrNotFound", err)
		}
		if err := q.Create(ctx, queueName(t, "src"), queue.Config{Visibility: long, MaxReceives: 3, DeadLetter: missing}); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Create with unknown dead-letter queue: %v, want ErrNotFound", err)
		}
	})

	t.Run("ConcurrentConsumers", func(t *testing.T) {
		t.Parallel()
		ctx, q := setup(t, newQueue)
		name := create(t, ctx, q, "", queue.Config{Visibility: long})
		const n, consumers = 200, 4
		var msgs []queue.Outgoing
		for i := range n {
			msgs = append(msgs, queue.Outgoing{Body: fmt.Appendf(nil, "m%03d", i)})
		}
		if err := q.Send(ctx, name, msgs...); err != nil {
			t.Fatalf("Send: %v", err)
		}
		var (
			mu        sync.Mutex
			delivered = map[string]int{}
			deleted   int
			wg        sync.WaitGroup
		)
		// done ends the consumers' long polls once all are deleted.
		cctx, done := context.WithTimeout(ctx, deadline)
		defer done()
		for range consumers {
			wg.Go(func() {
				for cctx.Err() == nil {
					ms, err := q.Receive(cctx, name, queue.MaxBatch, long, poll)
					if cctx.Err() != nil {
						return
					}
					if err != nil {
						t.Errorf("Receive: %v", err)
						return
					}
					if len(ms) == 0 {
						continue
					}
					receipts := make([]string, len(ms))
					for i, m := range ms {
						receipts[i] = m.Receipt
					}
					if err := q.Delete(ctx, name, receipts...); err != nil {
						t.Errorf("Delete: %v", err)
						return
					}
					mu.Lock()
					for _, m := range ms {
						delivered[string(m.Body)]++
					}
					deleted += len(ms)
					if deleted >= n {
						done()
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for i := range n {
			if c := delivered[fmt.Sprintf("m%03d", i)]; c != 1 {
				t.Errorf("m%03d delivered %d times, want exactly 1", i, c)
			}
		}
		if len(delivered) != n {
			t.Errorf("delivered %d distinct bodies, want %d", len(delivered), n)
		}
		waitStats(t, ctx, q, name, queue.Stats{})
	})
}

// setup returns a context bounded for the subtest and the queue under test.
func setup(t *testing.T, newQueue func(t *testing.T) queue.Queue) (context.Context, queue.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx, newQueue(t)
}

// queueName returns a valid SQS queue name (alphanumerics, '-', '_', at most
// 80 characters) derived from the test name, role and a random suffix.
func queueName(t *testing.T, role string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range t.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatal(err)
	}
	tail := "-" + hex.EncodeToString(suffix)
	if role != "" {
		tail = "-" + role + tail
	}
	base := b.String()
	if room := 80 - len(tail); len(base) > room {
		base = base[len(base)-room:]
	}
	return base + tail
}

// create creates a uniquely named queue and returns its name.
func create(t *testing.T, ctx context.Context, q queue.Queue, role string, cfg queue.Config) string {
	t.Helper()
	name := queueName(t, role)
	if err := q.Create(ctx, name, cfg); err != nil {
		t.Fatalf("Create %s: %v", name, err)
	}
	return name
}

func send(t *testing.T, ctx context.Context, q queue.Queue, name string, msgs ...queue.Outgoing) {
	t.Helper()
	if err := q.Send(ctx, name, msgs...); err != nil {
		t.Fatalf("Send %s: %v", name, err)
	}
}

// receiveN receives until it holds n distinct messages or the deadline
// passes, and fails the test if a message is delivered twice meanwhile
// (callers use a visibility that outlives the loop).
func receiveN(t *testing.T, ctx context.Context, q queue.Queue, name string, n int, vis time.Duration) []queue.Message {
	t.Helper()
	var got []queue.Message
	seen := map[string]bool{}
	end := time.Now().Add(deadline)
	for len(got) < n && time.Now().Before(end) {
		ms, err := q.Receive(ctx, name, min(queue.MaxBatch, n-len(got)), vis, poll)
		if err != nil {
			t.Fatalf("Receive %s: %v", name, err)
		}
		for _, m := range ms {
			if seen[m.ID] {
				t.Errorf("message %s delivered again while its lease was live", m.ID)
				continue
			}
			seen[m.ID] = true
			got = append(got, m)
		}
	}
	if len(got) < n {
		t.Fatalf("received %d of %d messages within %v", len(got), n, deadline)
	}
	return got
}

// receiveOne receives exactly one message, waiting up to the deadline.
func receiveOne(t *testing.T, ctx context.Context, q queue.Queue, name string, vis time.Duration) queue.Message {
	t.Helper()
	return receiveOneAfter(t, ctx, q, name, vis, time.Time{}, 0)
}

// receiveOneAfter receives exactly one message, waiting up to the deadline,
// and fails the test if any message arrives from a Receive call that
// returned before notBefore+hidden: the time before which the caller knows
// no message can be visible.
func receiveOneAfter(t *testing.T, ctx context.Context, q queue.Queue, name string, vis time.Duration, notBefore time.Time, hidden time.Duration) queue.Message {
	t.Helper()
	end := time.Now().Add(deadline)
	for time.Now().Before(end) {
		ms, err := q.Receive(ctx, name, 1, vis, poll)
		if err != nil {
			t.Fatalf("Receive %s: %v", name, err)
		}
		returned := time.Now()
		if len(ms) > 1 {
			t.Fatalf("Receive(max=1) returned %d messages", len(ms))
		}
		if len(ms) == 1 {
			if early := notBefore.Add(hidden).Sub(returned); !notBefore.IsZero() && early > 0 {
				t.Fatalf("message %s (%q) delivered %v before it could be visible", ms[0].ID, ms[0].Body, early)
			}
			return ms[0]
		}
	}
	t.Fatalf("no message from %s within %v", name, deadline)
	return queue.Message{}
}

// expectEmpty fails the test if a Receive waiting up to wait returns a message.
func expectEmpty(t *testing.T, ctx context.Context, q queue.Queue, name string, wait time.Duration) {
	t.Helper()
	ms, err := q.Receive(ctx, name, queue.MaxBatch, 0, wait)
	if err != nil {
		t.Fatalf("Receive %s: %v", name, err)
	}
	if len(ms) != 0 {
		t.Errorf("queue %s delivered %d unexpected messages: %v", name, len(ms), bodiesOf(ms))
	}
}

// deleteAll deletes ms in batches of MaxBatch.
func deleteAll(t *testing.T, ctx context.Context, q queue.Queue, name string, ms []queue.Message) {
	t.Helper()
	for len(ms) > 0 {
		k := min(len(ms), queue.MaxBatch)
		receipts := make([]string, k)
		for i, m := range ms[:k] {
			receipts[i] = m.Receipt
		}
		if err := q.Delete(ctx, name, receipts...); err != nil {
			t.Fatalf("Delete %s: %v", name, err)
		}
		ms = ms[k:]
	}
}

// waitStats waits until the queue's counts equal want's (SQS counts are
// approximate and eventually consistent). OldestAge is not compared.
func waitStats(t *testing.T, ctx context.Context, q queue.Queue, name string, want queue.Stats) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		st, err := q.Stats(ctx, name)
		if err != nil {
			t.Fatalf("Stats %s: %v", name, err)
		}
		if st.Visible == want.Visible && st.InFlight == want.InFlight && st.Delayed == want.Delayed {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("Stats = visible %d, in flight %d, delayed %d; want %d, %d, %d",
				st.Visible, st.InFlight, st.Delayed, want.Visible, want.InFlight, want.Delayed)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// largeBody returns n bytes of varied printable text.
func largeBody(n int) []byte {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 {}[]\":,\n"
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = alphabet[x%uint32(len(alphabet))]
	}
	return b
}

func bodiesOf(ms []queue.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
		if len(out[i]) > 40 {
			out[i] = out[i][:40] + "..."
		}
	}
	return out
}
