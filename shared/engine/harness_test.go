package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/backend"
	"github.com/slicework/slicework/shared/backend/awsbackend"
	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/store"
)

// rig is an engine on a fresh backend, driven by hand: tests pull messages
// off the queues and hand them to the engine, so they control order,
// duplication and crashes.
type rig struct {
	t     *testing.T
	on    string
	be    *backend.Backend
	e     *engine.Engine
	clk   *clock.Fake
	mu    sync.Mutex
	ended []*job.Job
}

type rigOption func(*engine.Config)

// Backends a rig can run on: the embedded backend, and the aws backend on
// each AWS-API emulator.
const (
	onEmbedded  = "embedded"
	onMiniStack = "ministack"
	onMoto      = "moto"
)

// allBackends lists every backend that workflow tests must pass on.
var allBackends = []string{onEmbedded, onMiniStack, onMoto}

// forEachBackend runs fn as a parallel subtest on every backend (only the
// embedded one under -short).
func forEachBackend(t *testing.T, fn func(t *testing.T, on string)) {
	t.Helper()
	for _, on := range allBackends {
		t.Run(on, func(t *testing.T) {
			if on != onEmbedded && testing.Short() {
				t.Skip("emulator backends skipped with -short")
			}
			t.Parallel()
			fn(t, on)
		})
	}
}

// rigSeq makes the AWS resource names of each rig unique.
var rigSeq atomic.Int64

func newRig(t *testing.T, reg *engine.Registry, opts ...rigOption) *rig {
	t.Helper()
	return newRigOn(t, onEmbedded, reg, opts...)
}

// newRigOn returns a rig on backend on (see allBackends). On the aws
// backend each rig gets its own table, bucket and queue prefix; the fake
// clock drives the store's timestamps, while queue delays run on the
// emulator's real clock.
func newRigOn(t *testing.T, on string, reg *engine.Registry, opts ...rigOption) *rig {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	var be *backend.Backend
	var err error
	switch on {
	case onEmbedded:
		be, err = embedded.Open(t.TempDir(), clk)
	case onMiniStack, onMoto:
		cfg := emulator.Config(t, emulator.Kind(on), nil)
		n := rigSeq.Add(1)
		c := awsbackend.Config{Table: fmt.Sprintf("rig-%d-%d", os.Getpid(), n), Bucket: fmt.Sprintf("rig-%d-%d", os.Getpid(), n),
			QueuePrefix: fmt.Sprintf("rig%d-%d-", os.Getpid(), n), Clock: clk}
		if err := awsbackend.CreateResources(context.Background(), cfg, c); err != nil {
			t.Fatal(err)
		}
		be, err = awsbackend.Open(cfg, c)
	default:
		t.Fatalf("unknown backend %q", on)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	r := &rig{t: t, on: on, be: be, clk: clk}
	cfg := engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Clock: clk, Worker: "test-worker",
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnTerminal: func(j *job.Job) { r.mu.Lock(); r.ended = append(r.ended, j); r.mu.Unlock() }}
	for _, o := range opts {
		o(&cfg)
	}
	r.e, err = engine.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.e.CreateQueues(context.Background(), time.Minute, 50); err != nil {
		t.Fatal(err)
	}
	return r
}

// receiveAll takes every visible message off queue name (leased for an hour).
func (r *rig) receiveAll(name string) []queue.Message {
	r.t.Helper()
	var out []queue.Message
	for {
		msgs, err := r.be.Queue.Receive(context.Background(), name, 10, r.lease(), 0)
		if err == nil && len(msgs) == 0 && r.on != onEmbedded {
			// A short poll of SQS may answer empty while messages wait (AWS
			// samples a subset of its servers; MiniStack under load does
			// too): confirm with a long poll before calling the queue empty.
			msgs, err = r.be.Queue.Receive(context.Background(), name, 10, r.lease(), time.Second)
		}
		if err != nil {
			r.t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		out = append(out, msgs...)
	}
}

// control runs every pending control task; it returns how many ran.
func (r *rig) control() int {
	r.t.Helper()
	n := 0
	for _, m := range r.receiveAll(r.e.Queues().Slice()) {
		if err := r.e.Control(context.Background(), m.Body, m.ReceiveCount); err != nil {
			r.t.Fatalf("control task %s: %v", m.Body, err)
		}
		r.ack(r.e.Queues().Slice(), m)
		n++
	}
	return n
}

func (r *rig) ack(name string, m queue.Message) {
	r.t.Helper()
	err := r.be.Queue.Delete(context.Background(), name, m.Receipt)
	if err != nil && !(r.on != onEmbedded && errors.Is(err, job.ErrNotFound)) {
		// On SQS a lease that ran out makes the receipt stale; the message
		// came back and is processed (and deleted) again, harmlessly.
		r.t.Fatal(err)
	}
}

// awsLease is how long the rig leases SQS messages. The embedded queue
// never loses a delivery, so its lease is an hour; on an emulator under
// load a ReceiveMessage answer can be lost after the messages were leased
// (the SDK retries and gets others), and, as on AWS, only the end of the
// lease brings them back.
const awsLease = 2 * time.Minute

func (r *rig) lease() time.Duration {
	if r.on == onEmbedded {
		return time.Hour
	}
	return awsLease
}

// awaitLeases reports whether messages leased on queues names are still
// out on the aws backend, waiting a second first so that a caller can loop
// until leases that were lost run out; false at once on embedded, and
// after about awsLease + 30 s.
func (r *rig) awaitLeases(since time.Time, names ...string) bool {
	r.t.Helper()
	if r.on == onEmbedded || time.Since(since) > awsLease+30*time.Second {
		return false
	}
	out := 0
	for _, n := range names {
		st, err := r.be.Queue.Stats(context.Background(), n)
		if err != nil {
			r.t.Fatal(err)
		}
		out += st.InFlight
	}
	if out == 0 {
		return false
	}
	time.Sleep(time.Second)
	return true
}

// workQueues names the control queue and every channel's queue.
func (r *rig) workQueues() []string {
	names := []string{r.e.Queues().Slice()}
	for _, ch := range r.e.Registry().Channels() {
		names = append(names, r.e.Queues().Channel(ch))
	}
	return names
}

func (r *rig) job(id string) *job.Job {
	r.t.Helper()
	j, err := r.be.Store.GetJob(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

func (r *rig) terminalCalls(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, j := range r.ended {
		if j.ID == id {
			n++
		}
	}
	return n
}

func (r *rig) chunkTask(body []byte) job.ChunkTask {
	r.t.Helper()
	var t job.ChunkTask
	if err := json.Unmarshal(body, &t); err != nil {
		r.t.Fatal(err)
	}
	return t
}

// crashStore commits a write and then reports a crash, as a worker killed
// between two of its writes would leave things.
type crashStore struct {
	store.Store
	mu           sync.Mutex
	crashRecord  func(jobID string, index int64, a job.Attempt) bool
	crashSliced  int
	crashFinish  int
	recordCrashs int
}

var errCrash = &crashError{}

type crashError struct{}

func (*crashError) Error() string { return "injected crash after the write committed" }

func (c *crashStore) RecordAttempt(ctx context.Context, jobID string, index int64, a job.Attempt, retryAt *time.Time, task *job.ChunkTask) (store.Recorded, error) {
	rec, err := c.Store.RecordAttempt(ctx, jobID, index, a, retryAt, task)
	if err != nil {
		return rec, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashRecord != nil && c.crashRecord(jobID, index, a) {
		c.recordCrashs++
		return store.Recorded{}, errCrash
	}
	return rec, nil
}

func (c *crashStore) SetSliced(ctx context.Context, id string, chunks, items int64) (*job.Job, error) {
	j, err := c.Store.SetSliced(ctx, id, chunks, items)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && c.crashSliced > 0 {
		c.crashSliced--
		return nil, errCrash
	}
	return j, err
}

func (c *crashStore) Transition(ctx context.Context, id string, from []job.State, to job.State, p store.Patch) (*job.Job, error) {
	j, err := c.Store.Transition(ctx, id, from, to, p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && to == job.StateFinishing && c.crashFinish > 0 {
		c.crashFinish--
		return nil, errCrash
	}
	return j, err
}

// drain runs control tasks and chunk tasks of every channel until no
// message is visible. A chunk whose verdict is not Ack is made visible again
// after its RetryAfter (real time), so drain suits jobs whose chunks succeed
// or fail for good. It returns how many chunk deliveries ran.
func (r *rig) drain() int {
	r.t.Helper()
	ctx := context.Background()
	n := 0
	var idle time.Time
	for {
		ran := r.control()
		for _, ch := range r.e.Registry().Channels() {
			name := r.e.Queues().Channel(ch)
			for _, m := range r.receiveAll(name) {
				v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{MessageID: m.ID, ReceiveCount: m.ReceiveCount})
				if v.Ack {
					r.ack(name, m)
				} else if err := r.be.Queue.ChangeVisibility(ctx, name, queue.VisibilityChange{Receipt: m.Receipt, Timeout: v.RetryAfter}); err != nil {
					r.t.Fatal(err)
				}
				n++
				ran++
			}
		}
		if ran == 0 {
			if idle.IsZero() {
				idle = time.Now()
			}
			if r.awaitLeases(idle, r.workQueues()...) {
				continue
			}
			return n
		}
		idle = time.Time{}
	}
}

func TestMain(m *testing.M) { os.Exit(emulator.Run(m)) }

// The rig runs the same job to the same counts on every backend.
func TestRigOnEveryBackend(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		r := newRigOn(t, on, recomputeRegistry(t))
		j, err := r.e.Submit(context.Background(), recompute.Args{}, engine.SubmitOptions{
			Input: job.Input{Type: job.InputIDRange, Start: 0, End: 250}, ChunkSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		if n := r.drain(); n != 3 {
			t.Errorf("ran %d chunk deliveries, want 3", n)
		}
		got := r.job(j.ID)
		if got.State != job.StateSucceeded || got.Counters.ChunksDone != 3 || got.Counters.ItemsDone != 250 {
			t.Errorf("job ended %s with %+v, want succeeded with 3 chunks and 250 items done", got.State, got.Counters)
		}
		if n := r.terminalCalls(j.ID); n != 1 {
			t.Errorf("terminal hook ran %d times, want 1", n)
		}
	})
}
