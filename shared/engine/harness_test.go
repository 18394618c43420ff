package engine_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/backend"
	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/store"
)

// rig is an engine on a fresh embedded backend, driven by hand: tests pull
// messages off the queues and hand them to the engine, so they control
// order, duplication and crashes.
type rig struct {
	t     *testing.T
	be    *backend.Backend
	e     *engine.Engine
	clk   *clock.Fake
	mu    sync.Mutex
	ended []*job.Job
}

type rigOption func(*engine.Config)

func newRig(t *testing.T, reg *engine.Registry, opts ...rigOption) *rig {
	t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	be, err := embedded.Open(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	r := &rig{t: t, be: be, clk: clk}
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
		msgs, err := r.be.Queue.Receive(context.Background(), name, 10, time.Hour, 0)
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
	if err := r.be.Queue.Delete(context.Background(), name, m.Receipt); err != nil {
		r.t.Fatal(err)
	}
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
