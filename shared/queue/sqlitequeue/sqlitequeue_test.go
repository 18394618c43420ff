package sqlitequeue_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/queue/queuetest"
	"github.com/slicework/slicework/shared/queue/sqlitequeue"
)

func TestConformance(t *testing.T) {
	queuetest.Run(t, func(t *testing.T) queue.Queue {
		return open(t, filepath.Join(t.TempDir(), "queue.db"))
	})
}

func open(t testing.TB, path string, opts ...sqlitequeue.Option) *sqlitequeue.Queue {
	t.Helper()
	q, err := sqlitequeue.Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func mustCreate(t *testing.T, q queue.Queue, name string, cfg queue.Config) {
	t.Helper()
	if err := q.Create(context.Background(), name, cfg); err != nil {
		t.Fatalf("Create %s: %v", name, err)
	}
}

func mustSend(t *testing.T, q queue.Queue, name string, msgs ...queue.Outgoing) {
	t.Helper()
	if err := q.Send(context.Background(), name, msgs...); err != nil {
		t.Fatalf("Send %s: %v", name, err)
	}
}

// receive receives without waiting and fails unless it gets exactly want
// messages.
func receive(t *testing.T, q queue.Queue, name string, want int, vis time.Duration) []queue.Message {
	t.Helper()
	ms, err := q.Receive(context.Background(), name, queue.MaxBatch, vis, 0)
	if err != nil {
		t.Fatalf("Receive %s: %v", name, err)
	}
	if len(ms) != want {
		t.Fatalf("Receive %s: %d messages, want %d", name, len(ms), want)
	}
	return ms
}

func stats(t *testing.T, q queue.Queue, name string) queue.Stats {
	t.Helper()
	st, err := q.Stats(context.Background(), name)
	if err != nil {
		t.Fatalf("Stats %s: %v", name, err)
	}
	return st
}

var epoch = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func TestFakeClock(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	q := open(t, filepath.Join(t.TempDir(), "q.db"), sqlitequeue.WithClock(clk))
	mustCreate(t, q, "q", queue.Config{Visibility: 10 * time.Second})

	mustSend(t, q, "q", queue.Outgoing{Body: []byte("delayed"), Delay: 5 * time.Second})
	if st := stats(t, q, "q"); st != (queue.Stats{Delayed: 1}) {
		t.Fatalf("Stats after delayed send = %+v", st)
	}
	clk.Advance(5*time.Second - time.Microsecond)
	receive(t, q, "q", 0, 0)
	clk.Advance(time.Microsecond)
	m := receive(t, q, "q", 1, 0)[0]
	if !m.SentAt.Equal(epoch) || !m.FirstReceivedAt.Equal(epoch.Add(5*time.Second)) || m.ReceiveCount != 1 {
		t.Fatalf("message = sent %v, first received %v, count %d", m.SentAt, m.FirstReceivedAt, m.ReceiveCount)
	}
	if st := stats(t, q, "q"); st != (queue.Stats{InFlight: 1, OldestAge: 5 * time.Second}) {
		t.Fatalf("Stats after receive = %+v", st)
	}

	// The queue's default visibility (10 s) applies.
	clk.Advance(10*time.Second - time.Microsecond)
	receive(t, q, "q", 0, 0)
	clk.Advance(time.Microsecond)
	m2 := receive(t, q, "q", 1, 3*time.Second)[0]
	if m2.ID != m.ID || m2.ReceiveCount != 2 || m2.Receipt == m.Receipt || !m2.FirstReceivedAt.Equal(m.FirstReceivedAt) {
		t.Fatalf("redelivery = %+v, first delivery %+v", m2, m)
	}
	// An explicit visibility (3 s) applies.
	clk.Advance(3*time.Second - time.Microsecond)
	receive(t, q, "q", 0, 0)
	clk.Advance(time.Microsecond)
	m3 := receive(t, q, "q", 1, time.Hour)[0]

	// ChangeVisibility counts from the clock's now.
	clk.Advance(time.Minute)
	if err := q.ChangeVisibility(context.Background(), "q", queue.VisibilityChange{Receipt: m3.Receipt, Timeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2*time.Second - time.Microsecond)
	receive(t, q, "q", 0, 0)
	clk.Advance(time.Microsecond)
	m4 := receive(t, q, "q", 1, 0)[0]
	if m4.ReceiveCount != 4 {
		t.Fatalf("ReceiveCount = %d, want 4", m4.ReceiveCount)
	}
	want := 5*time.Second + 10*time.Second + 3*time.Second + time.Minute + 2*time.Second
	if st := stats(t, q, "q"); st != (queue.Stats{InFlight: 1, OldestAge: want}) {
		t.Fatalf("Stats = %+v, want in flight 1, age %v", st, want)
	}
	if err := q.Delete(context.Background(), "q", m4.Receipt); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, q, "q"); st != (queue.Stats{}) {
		t.Fatalf("Stats after delete = %+v", st)
	}
}

func TestFakeClockWakesLongPoll(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	q := open(t, filepath.Join(t.TempDir(), "q.db"), sqlitequeue.WithClock(clk))
	mustCreate(t, q, "q", queue.Config{})
	mustSend(t, q, "q", queue.Outgoing{Body: []byte("x"), Delay: time.Minute})
	go func() {
		time.Sleep(200 * time.Millisecond)
		clk.Advance(time.Minute)
	}()
	// The wait is real time; the message becomes visible by fake time.
	ms, err := q.Receive(context.Background(), "q", 1, 0, 10*time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Receive = %d messages, %v; want the message once the clock passed its delay", len(ms), err)
	}
	// Create with Visibility 0 uses DefaultVisibility.
	clk.Advance(sqlitequeue.DefaultVisibility - time.Microsecond)
	receive(t, q, "q", 0, 0)
	clk.Advance(time.Microsecond)
	receive(t, q, "q", 1, 0)
}

func TestStaleReceipts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(epoch)
	q := open(t, filepath.Join(t.TempDir(), "q.db"), sqlitequeue.WithClock(clk))
	mustCreate(t, q, "q", queue.Config{Visibility: time.Second})
	mustSend(t, q, "q", queue.Outgoing{Body: []byte("x")})
	first := receive(t, q, "q", 1, 0)[0]

	// The receipt stays current after its lease expired, until redelivery.
	clk.Advance(2 * time.Second)
	if err := q.ChangeVisibility(ctx, "q", queue.VisibilityChange{Receipt: first.Receipt, Timeout: time.Second}); err != nil {
		t.Fatalf("ChangeVisibility after lease expiry, before redelivery: %v", err)
	}
	clk.Advance(time.Second)
	second := receive(t, q, "q", 1, 0)[0]

	if err := q.Delete(ctx, "q", first.Receipt, "no-such-receipt", ""); err != nil {
		t.Fatalf("Delete with stale receipts: %v", err)
	}
	if err := q.ChangeVisibility(ctx, "q", queue.VisibilityChange{Receipt: first.Receipt, Timeout: 0}); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("ChangeVisibility with stale receipt: %v, want ErrNotFound", err)
	}
	if st := stats(t, q, "q"); st.InFlight != 1 {
		t.Fatalf("stale Delete removed the message: %+v", st)
	}
	// The current receipt works, and only in its own queue.
	mustCreate(t, q, "other", queue.Config{})
	if err := q.ChangeVisibility(ctx, "other", queue.VisibilityChange{Receipt: second.Receipt, Timeout: 0}); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("ChangeVisibility with a receipt of another queue: %v, want ErrNotFound", err)
	}
	if err := q.Delete(ctx, "other", second.Receipt); err != nil {
		t.Fatal(err)
	}
	if err := q.ChangeVisibility(ctx, "q", queue.VisibilityChange{Receipt: second.Receipt, Timeout: 0}); err != nil {
		t.Fatalf("ChangeVisibility with current receipt: %v", err)
	}
	third := receive(t, q, "q", 1, 0)[0]
	if err := q.Delete(ctx, "q", second.Receipt); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, q, "q"); st.InFlight != 1 {
		t.Fatalf("stale Delete removed the message: %+v", st)
	}
	if err := q.Delete(ctx, "q", third.Receipt); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, q, "q"); st != (queue.Stats{}) {
		t.Fatalf("Stats after delete = %+v", st)
	}
}

func TestDeadLetter(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(epoch)
	q := open(t, filepath.Join(t.TempDir(), "q.db"), sqlitequeue.WithClock(clk))
	mustCreate(t, q, "dlq", queue.Config{Visibility: time.Minute})
	mustCreate(t, q, "src", queue.Config{Visibility: time.Second, MaxReceives: 1, DeadLetter: "dlq"})
	mustSend(t, q, "src", queue.Outgoing{Body: []byte("a")}, queue.Outgoing{Body: []byte("b")})
	clk.Advance(time.Second)
	mustSend(t, q, "src", queue.Outgoing{Body: []byte("c")})
	first := receive(t, q, "src", 3, 0)
	clk.Advance(time.Second)
	mustSend(t, q, "src", queue.Outgoing{Body: []byte("d")})
	// a, b and c go to the dead-letter queue; d is delivered in the same call.
	got := receive(t, q, "src", 1, 0)
	if string(got[0].Body) != "d" {
		t.Fatalf("src delivered %q, want d", got[0].Body)
	}
	dead := receive(t, q, "dlq", 3, 0)
	for i, m := range dead {
		if m.ID != first[i].ID || string(m.Body) != string(first[i].Body) || !m.SentAt.Equal(first[i].SentAt) {
			t.Errorf("dead letter %d = %s %q sent %v, want %s %q sent %v", i, m.ID, m.Body, m.SentAt, first[i].ID, first[i].Body, first[i].SentAt)
		}
		if m.ReceiveCount != 1 || !m.FirstReceivedAt.Equal(clk.Now()) {
			t.Errorf("dead letter %d: count %d first received %v, want 1, %v", i, m.ReceiveCount, m.FirstReceivedAt, clk.Now())
		}
	}
	if err := q.Delete(context.Background(), "src", first[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, q, "dlq"); st.InFlight != 3 {
		t.Fatalf("a receipt from before the move deleted a dead letter: %+v", st)
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := open(t, filepath.Join(t.TempDir(), "q.db"))
	mustCreate(t, q, "dlq", queue.Config{})
	for _, name := range []string{"", "has space", "a/b", "dot.fifo", "ünï", strings.Repeat("x", 81)} {
		if err := q.Create(ctx, name, queue.Config{}); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("Create(%q): %v, want ErrInvalid", name, err)
		}
	}
	mustCreate(t, q, strings.Repeat("x", 80), queue.Config{})
	for _, cfg := range []queue.Config{
		{Visibility: -time.Second},
		{Visibility: queue.MaxVisibility + time.Second},
		{MaxReceives: -1, DeadLetter: "dlq"},
		{MaxReceives: sqlitequeue.MaxReceivesLimit + 1, DeadLetter: "dlq"},
		{MaxReceives: 3},
		{MaxReceives: 3, DeadLetter: "q"},
	} {
		if err := q.Create(ctx, "q", cfg); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("Create(%+v): %v, want ErrInvalid", cfg, err)
		}
	}
	mustCreate(t, q, "q", queue.Config{Visibility: queue.MaxVisibility, MaxReceives: sqlitequeue.MaxReceivesLimit, DeadLetter: "dlq"})
	if _, err := q.Receive(ctx, "q", 1, 0, -time.Second); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("Receive with negative wait: %v, want ErrInvalid", err)
	}
	receipts := make([]string, queue.MaxBatch+1)
	if err := q.Delete(ctx, "q", receipts...); !errors.Is(err, job.ErrInvalid) {
		t.Errorf("Delete of %d receipts: %v, want ErrInvalid", len(receipts), err)
	}
	if err := q.Delete(ctx, "q"); err != nil {
		t.Errorf("Delete of no receipts: %v", err)
	}
	if err := q.Send(ctx, "q"); err != nil {
		t.Errorf("Send of no messages: %v", err)
	}
	if err := q.Send(ctx, "nope"); !errors.Is(err, job.ErrNotFound) {
		t.Errorf("Send of no messages to unknown queue: %v, want ErrNotFound", err)
	}
	mustSend(t, q, "q", queue.Outgoing{Body: []byte("x")}, queue.Outgoing{Body: bytes.Repeat([]byte("y"), queue.MaxBodyBytes), Delay: queue.MaxDelay})
	ms := receive(t, q, "q", 1, 0)
	if string(ms[0].Body) != "x" {
		t.Errorf("one-byte body came back as %q", ms[0].Body)
	}
}

func TestReceiveCancelAndClose(t *testing.T) {
	t.Parallel()
	q, err := sqlitequeue.Open(filepath.Join(t.TempDir(), "q.db"))
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, q, "q", queue.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	if _, err := q.Receive(ctx, "q", 1, 0, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive with cancelled context: %v, want context.Canceled", err)
	}
	go func() { time.Sleep(100 * time.Millisecond); q.Close() }()
	if _, err := q.Receive(context.Background(), "q", 1, 0, time.Minute); err == nil {
		t.Fatal("Receive across Close returned no error")
	}
	if err := q.Send(context.Background(), "q", queue.Outgoing{Body: []byte("x")}); err == nil {
		t.Fatal("Send after Close returned no error")
	}
	if err := q.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestTwoHandles shares one file between two handles, as two processes do:
// a Send on one reaches a long poll on the other by polling.
func TestTwoHandles(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	a, b := open(t, path), open(t, path)
	mustCreate(t, a, "q", queue.Config{Visibility: time.Minute})
	go func() {
		time.Sleep(200 * time.Millisecond)
		if err := a.Send(context.Background(), "q", queue.Outgoing{Body: []byte("x")}); err != nil {
			t.Error(err)
		}
	}()
	ms, err := b.Receive(context.Background(), "q", 1, 0, 10*time.Second)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Receive on the second handle = %d messages, %v", len(ms), err)
	}
	if st := stats(t, a, "q"); st.InFlight != 1 {
		t.Fatalf("first handle sees %+v, want the lease taken through the second", st)
	}
}

func TestReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	clk := clock.NewFake(epoch)
	q, err := sqlitequeue.Open(path, sqlitequeue.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	mustCreate(t, q, "dlq", queue.Config{})
	mustCreate(t, q, "q", queue.Config{Visibility: 10 * time.Second, MaxReceives: 2, DeadLetter: "dlq"})
	mustSend(t, q, "q", queue.Outgoing{Body: []byte("leased")})
	leased := receive(t, q, "q", 1, 0)[0]
	mustSend(t, q, "q", queue.Outgoing{Body: []byte("ready")}, queue.Outgoing{Body: []byte("later"), Delay: time.Minute})
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	q = open(t, path, sqlitequeue.WithClock(clk))
	if st := stats(t, q, "q"); st.Visible != 1 || st.InFlight != 1 || st.Delayed != 1 {
		t.Fatalf("Stats after reopen = %+v, want 1 visible, 1 in flight, 1 delayed", st)
	}
	ready := receive(t, q, "q", 1, 0)[0]
	if string(ready.Body) != "ready" {
		t.Fatalf("after reopen got %q, want ready", ready.Body)
	}
	clk.Advance(10 * time.Second)
	again := receive(t, q, "q", 2, 0) // the lease taken before Close expired; so did ready's
	var redelivered queue.Message
	for _, m := range again {
		if m.ID == leased.ID {
			redelivered = m
		}
	}
	if redelivered.ReceiveCount != 2 || string(redelivered.Body) != "leased" || redelivered.Receipt == leased.Receipt {
		t.Fatalf("redelivery after reopen = %+v", redelivered)
	}
	if err := q.ChangeVisibility(context.Background(), "q", queue.VisibilityChange{Receipt: leased.Receipt, Timeout: 0}); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("ChangeVisibility with the receipt from before reopen: %v, want ErrNotFound", err)
	}
	// The queue config persisted too: a third receive dead-letters.
	clk.Advance(time.Minute)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, path, sqlitequeue.WithClock(clk))
	got := receive(t, q, "q", 1, 0) // only "later"; the other two go to dlq
	if string(got[0].Body) != "later" {
		t.Fatalf("got %q, want later", got[0].Body)
	}
	receive(t, q, "dlq", 2, 0)
}

// TestSIGKILL kills a process holding a lease and checks that nothing it
// committed is lost and that its lease expires.
func TestSIGKILL(t *testing.T) {
	if os.Getenv("SQLITEQUEUE_CHILD_DB") != "" {
		t.Skip("running as the child of TestSIGKILL")
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestSIGKILLChild$")
	cmd.Env = append(os.Environ(), "SQLITEQUEUE_CHILD_DB="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var receipt string
	for sc.Scan() {
		if r, ok := strings.CutPrefix(sc.Text(), "leased "); ok {
			receipt = r
			break
		}
	}
	if receipt == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("child did not report its lease")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	cmd.Wait()

	q := open(t, path)
	if st := stats(t, q, "q"); st.Visible+st.InFlight != 3 {
		t.Fatalf("after SIGKILL: %+v, want 3 messages", st)
	}
	var got []queue.Message
	end := time.Now().Add(15 * time.Second)
	for len(got) < 3 && time.Now().Before(end) {
		ms, err := q.Receive(context.Background(), "q", queue.MaxBatch, time.Minute, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	counts := map[string]int{}
	for _, m := range got {
		counts[string(m.Body)] = m.ReceiveCount
	}
	if len(got) != 3 || counts["m0"] != 2 || counts["m1"] != 1 || counts["m2"] != 1 {
		t.Fatalf("after SIGKILL received %v (body → receive count), want m0 redelivered and m1, m2 once", counts)
	}
}

// TestSIGKILLChild is the process TestSIGKILL kills; it does nothing on its own.
func TestSIGKILLChild(t *testing.T) {
	path := os.Getenv("SQLITEQUEUE_CHILD_DB")
	if path == "" {
		t.Skip("only runs as the child of TestSIGKILL")
	}
	q, err := sqlitequeue.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	mustCreate(t, q, "q", queue.Config{Visibility: time.Minute})
	mustSend(t, q, "q", queue.Outgoing{Body: []byte("m0")})
	ms, err := q.Receive(ctx, "q", 1, time.Second, 0)
	if err != nil || len(ms) != 1 {
		t.Fatalf("Receive: %d, %v", len(ms), err)
	}
	mustSend(t, q, "q", queue.Outgoing{Body: []byte("m1")}, queue.Outgoing{Body: []byte("m2")})
	fmt.Printf("leased %s\n", ms[0].Receipt)
	time.Sleep(time.Minute) // killed before this ends
}

func BenchmarkSendReceiveDelete(b *testing.B) {
	for _, batch := range []int{1, queue.MaxBatch} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			q := open(b, filepath.Join(b.TempDir(), "q.db"))
			if err := q.Create(ctx, "bench", queue.Config{Visibility: time.Minute}); err != nil {
				b.Fatal(err)
			}
			msgs := make([]queue.Outgoing, batch)
			for i := range msgs {
				msgs[i] = queue.Outgoing{Body: []byte(`{"job":"bench","chunk":42,"payload":"0123456789abcdef"}`)}
			}
			receipts := make([]string, 0, batch)
			for b.Loop() {
				if err := q.Send(ctx, "bench", msgs...); err != nil {
					b.Fatal(err)
				}
				receipts = receipts[:0]
				for len(receipts) < batch {
					ms, err := q.Receive(ctx, "bench", batch-len(receipts), 0, time.Second)
					if err != nil {
						b.Fatal(err)
					}
					for _, m := range ms {
						receipts = append(receipts, m.Receipt)
					}
				}
				if err := q.Delete(ctx, "bench", receipts...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
