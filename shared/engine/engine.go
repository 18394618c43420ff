// Package engine is the slicework job engine: kinds and their handlers,
// Submit, slicing, chunk processing, exactly-once accounting, the finish step,
// cancellation and the sweeper. It talks to the world only through the blob,
// queue and store ports, so the same code runs on the embedded backend, on
// AWS and on AWS-API emulators.
package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/events"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/store"
)

// Config wires an Engine to its backend.
type Config struct {
	Store    store.Store
	Queue    queue.Queue
	Blobs    blob.Store
	Registry *Registry
	// Clock defaults to the system clock.
	Clock clock.Clock
	// Queues names the queues; zero value uses DefaultQueues.
	Queues QueueNames
	// Worker identifies this process in attempt records (default host:pid).
	Worker string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// StaleAfter is how long a job may sit queued or finishing before the
	// sweeper re-drives it (5 min).
	StaleAfter time.Duration
	// SendBatch is how many chunk tasks the slicer buffers per Send (100).
	SendBatch int
	// SliceBudget is the most chunk tasks one slicer invocation emits
	// (10,000). A plan-based input (ids, items, lines) of more chunks is
	// sliced recursively: the first slicer records the totals and enqueues
	// sub-slice tasks for index ranges, which subdivide further until a
	// range fits the budget. A kind's own Slice, which cannot seek, hands
	// the rest to a continuation task instead. A slicer also hands over once
	// it has used half of its invocation's time.
	SliceBudget int64
	// SliceFanout is the most sub-slice tasks one slicer invocation
	// enqueues when it subdivides a range (10: one SendMessageBatch).
	SliceFanout int
	// OnTerminal, if set, is called once when this process moves a job to a
	// terminal state.
	OnTerminal func(*job.Job)
	// Events receives the completion event of every job that reaches a
	// terminal state (nil: none is published). See followup.go.
	Events events.Publisher
	// Callbacks configures the POSTs to jobs' callback URLs.
	Callbacks CallbackOptions
}

// QueueNames maps the engine's queues to backend queue names.
type QueueNames struct {
	// Prefix is prepended to every name (e.g. a stage: "dev-").
	Prefix string
}

// Slice is the control queue: slice and finish tasks.
func (q QueueNames) Slice() string { return q.Prefix + "slice" }

// Channel is the chunk queue of a channel.
func (q QueueNames) Channel(ch string) string { return q.Prefix + "chunks-" + ch }

// DeadLetter is the dead-letter queue of queue name.
func (q QueueNames) DeadLetter(name string) string { return name + "-dlq" }

// Engine runs jobs. It is safe for concurrent use; any number of engines
// (processes, Lambda instances) may share one backend.
type Engine struct {
	store      store.Store
	queue      queue.Queue
	blobs      blob.Store
	reg        *Registry
	clock      clock.Clock
	queues     QueueNames
	worker     string
	log        *slog.Logger
	staleAfter time.Duration
	sendBatch  int
	budget     int64
	fanout     int
	onTerminal func(*job.Job)
	events     events.Publisher
	callbacks  CallbackOptions
}

// New returns an Engine for cfg. Store, Queue, Blobs and Registry are required.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil || cfg.Queue == nil || cfg.Blobs == nil || cfg.Registry == nil {
		return nil, fmt.Errorf("engine: config needs Store, Queue, Blobs and Registry")
	}
	e := &Engine{
		store: cfg.Store, queue: cfg.Queue, blobs: cfg.Blobs, reg: cfg.Registry,
		clock: cfg.Clock, queues: cfg.Queues, worker: cfg.Worker, log: cfg.Logger,
		staleAfter: cfg.StaleAfter, sendBatch: cfg.SendBatch, budget: cfg.SliceBudget, fanout: cfg.SliceFanout, onTerminal: cfg.OnTerminal,
		events: cfg.Events, callbacks: cfg.Callbacks.withDefaults(),
	}
	if e.clock == nil {
		e.clock = clock.System{}
	}
	if e.worker == "" {
		host, _ := os.Hostname()
		e.worker = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.staleAfter <= 0 {
		e.staleAfter = 5 * time.Minute
	}
	if e.sendBatch <= 0 {
		e.sendBatch = 100
	}
	if e.budget <= 0 {
		e.budget = 10_000
	}
	if e.fanout < 2 {
		e.fanout = 10
	}
	return e, nil
}

// Registry returns the engine's kinds.
func (e *Engine) Registry() *Registry { return e.reg }

// Queues returns the engine's queue names.
func (e *Engine) Queues() QueueNames { return e.queues }

// Blobs returns the engine's blob store.
func (e *Engine) Blobs() blob.Store { return e.blobs }

// Store returns the engine's job store.
func (e *Engine) Store() store.Store { return e.store }

// Queue returns the engine's task queue.
func (e *Engine) Queue() queue.Queue { return e.queue }

// Clock returns the engine's clock.
func (e *Engine) Clock() clock.Clock { return e.clock }

// QueueSetup describes a queue the engine needs, for hosts that create them.
type QueueSetup struct {
	Name   string
	Config queue.Config
}

// RequiredQueues lists the queues (each followed by its dead-letter queue's
// owner) that the registered kinds need, with chunk visibility vis.
func (e *Engine) RequiredQueues(vis time.Duration, maxReceives int) []QueueSetup {
	names := []string{e.queues.Slice()}
	for _, ch := range e.reg.Channels() {
		names = append(names, e.queues.Channel(ch))
	}
	var out []QueueSetup
	for _, n := range names {
		out = append(out,
			QueueSetup{Name: e.queues.DeadLetter(n), Config: queue.Config{Visibility: vis}},
			QueueSetup{Name: n, Config: queue.Config{Visibility: vis, MaxReceives: maxReceives, DeadLetter: e.queues.DeadLetter(n)}})
	}
	return out
}

// CreateQueues creates the queues of RequiredQueues.
func (e *Engine) CreateQueues(ctx context.Context, vis time.Duration, maxReceives int) error {
	for _, q := range e.RequiredQueues(vis, maxReceives) {
		if err := e.queue.Create(ctx, q.Name, q.Config); err != nil {
			return fmt.Errorf("engine: create queue %s: %w", q.Name, err)
		}
	}
	return nil
}

func (e *Engine) terminal(j *job.Job) {
	e.log.Info("job finished", "job", j.ID, "kind", j.Kind, "state", j.State,
		"chunks_done", j.Counters.ChunksDone, "chunks_failed", j.Counters.ChunksFailed, "error", j.Error)
	if e.onTerminal != nil {
		e.onTerminal(j)
	}
	e.followUpNow(context.Background(), j) // dependants, event, callback
}

func ptr[T any](v T) *T { return &v }
