// Package host is the local function host: it runs the slicework Lambda
// handlers in-process, polling the queues as Lambda's SQS event source
// mapping does (batches, partial batch failures, visibility timeout, max
// receives → DLQ), firing the scheduler like EventBridge rules do (the
// sweeper every minute, and the schedules of schedules.json), and serving
// the HTTP API on localhost. Handlers are invoked through aws-lambda-go's
// JSON invoke path, so events are decoded exactly as on Lambda.
package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/slicework/slicework/shared/api"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/handler"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/schedule"
)

// Config configures a Host. Zero fields take the defaults shown.
type Config struct {
	Engine *engine.Engine
	// Addr is the API's listen address ("" serves no API; "127.0.0.1:0" picks a port).
	Addr string
	// BatchSize is the event source mapping's batch size (10).
	BatchSize int
	// Workers is the number of concurrent worker invocations per channel (4).
	Workers int
	// Slicers is the number of concurrent slicer invocations (1).
	Slicers int
	// Visibility is the queues' visibility timeout (5 min).
	Visibility time.Duration
	// MaxReceives moves a message to its DLQ after this many receives (20).
	MaxReceives int
	// FunctionTimeout bounds one invocation, like a Lambda timeout (visibility / 2).
	FunctionTimeout time.Duration
	// PollWait is the long-poll wait per receive (1 s).
	PollWait time.Duration
	// SchedulerEvery is the period of the scheduler's rule (1 min).
	SchedulerEvery time.Duration
	// Schedules are the recurring jobs to fire (see package schedule); each
	// firing invokes the scheduler with the event its EventBridge rule
	// would send. Times come from the engine's clock.
	Schedules []schedule.Definition
	// Region and Account appear in the records' queue ARNs.
	Region, Account string
	Logger          *slog.Logger
}

// Host runs the handlers. Create it with New and start it with Run.
type Host struct {
	cfg Config
	e   *engine.Engine
	q   queue.Queue
	log *slog.Logger
	// slicer and worker build one handler per poller: like a Lambda
	// execution environment, a handler serves one invocation at a time
	// (aws-lambda-go's handlers reuse their buffers).
	slicer func() lambda.Handler
	worker func() lambda.Handler
	sched  lambda.Handler
	crons  []cronEntry
	// cronFn is the scheduler handler of the schedules' firings (a
	// handler serves one invocation at a time, and the sweeper has sched).
	cronFn   lambda.Handler
	ready    chan struct{}
	addr     string
	statsMu  sync.Mutex
	invokes  map[string]int
	failures map[string]int
}

// New checks cfg and builds a Host.
func New(cfg Config) (*Host, error) {
	if cfg.Engine == nil {
		return nil, errors.New("host: config needs an Engine")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.BatchSize, 10)
	def(&cfg.Workers, 4)
	def(&cfg.Slicers, 1)
	def(&cfg.MaxReceives, 20)
	defD(&cfg.Visibility, 5*time.Minute)
	defD(&cfg.FunctionTimeout, cfg.Visibility/2)
	defD(&cfg.PollWait, time.Second)
	defD(&cfg.SchedulerEvery, time.Minute)
	if cfg.BatchSize > queue.MaxBatch {
		return nil, fmt.Errorf("host: batch size %d over %d", cfg.BatchSize, queue.MaxBatch)
	}
	if cfg.Region == "" {
		cfg.Region = "local"
	}
	if cfg.Account == "" {
		cfg.Account = "000000000000"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	e := cfg.Engine
	crons, err := parseSchedules(e, cfg.Schedules)
	if err != nil {
		return nil, err
	}
	return &Host{
		cfg: cfg, e: e, q: e.Queue(), log: cfg.Logger, crons: crons,
		slicer:   func() lambda.Handler { return lambda.NewHandler(handler.Slicer(e, cfg.Logger)) },
		worker:   func() lambda.Handler { return lambda.NewHandler(handler.Worker(e, e.Queue(), cfg.Logger)) },
		sched:    lambda.NewHandler(handler.Scheduler(e, cfg.Logger)),
		cronFn:   lambda.NewHandler(handler.Scheduler(e, cfg.Logger)),
		ready:    make(chan struct{}),
		invokes:  map[string]int{},
		failures: map[string]int{},
	}, nil
}

// Ready is closed once the queues exist and the API (if any) listens.
func (h *Host) Ready() <-chan struct{} { return h.ready }

// Addr is the API's address once Ready is closed.
func (h *Host) Addr() string { return h.addr }

// Run creates the queues, starts the pollers, the scheduler and the API, and
// blocks until ctx is done; then it stops polling, lets running invocations
// finish, and returns.
func (h *Host) Run(ctx context.Context) error {
	if err := h.e.CreateQueues(ctx, h.cfg.Visibility, h.cfg.MaxReceives); err != nil {
		return fmt.Errorf("host: %w", err)
	}
	var srv *http.Server
	if h.cfg.Addr != "" {
		ln, err := net.Listen("tcp", h.cfg.Addr)
		if err != nil {
			return fmt.Errorf("host: listen %s: %w", h.cfg.Addr, err)
		}
		h.addr = ln.Addr().String()
		srv = &http.Server{Handler: api.New(h.e, h.log), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				h.log.Error("api server stopped", "err", err)
			}
		}()
	}
	// Invocations run on their own context so that a stop lets them finish.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	var wg sync.WaitGroup
	poll := func(queueName string, newFn func() lambda.Handler, n int) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.poll(ctx, work, queueName, newFn())
			}()
		}
	}
	poll(h.e.Queues().Slice(), h.slicer, h.cfg.Slicers)
	for _, ch := range h.e.Registry().Channels() {
		poll(h.e.Queues().Channel(ch), h.worker, h.cfg.Workers)
	}
	next, live := h.cronStart()
	wg.Add(2)
	go func() {
		defer wg.Done()
		h.schedule(ctx, work)
	}()
	go func() {
		defer wg.Done()
		h.cron(ctx, work, next, live)
	}()
	close(h.ready)
	<-ctx.Done()
	wg.Wait()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return nil
}

// poll is one event source mapping poller.
func (h *Host) poll(ctx, work context.Context, name string, fn lambda.Handler) {
	arn := handler.QueueARN(h.cfg.Region, h.cfg.Account, name)
	for ctx.Err() == nil {
		msgs, err := h.q.Receive(ctx, name, h.cfg.BatchSize, h.cfg.Visibility, h.cfg.PollWait)
		if err != nil {
			if ctx.Err() == nil {
				h.log.Error("receive failed", "queue", name, "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		h.invokeBatch(work, name, arn, fn, msgs)
	}
}

// invokeBatch delivers msgs as one SQS event and deletes the records the
// function did not report as failed, as the event source mapping does.
func (h *Host) invokeBatch(ctx context.Context, name, arn string, fn lambda.Handler, msgs []queue.Message) {
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	byID := map[string]string{}
	for i, m := range msgs {
		ev.Records[i] = events.SQSMessage{
			MessageId: m.ID, ReceiptHandle: m.Receipt, Body: string(m.Body),
			Attributes: map[string]string{
				"ApproximateReceiveCount":          strconv.Itoa(m.ReceiveCount),
				"SentTimestamp":                    strconv.FormatInt(m.SentAt.UnixMilli(), 10),
				"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.FirstReceivedAt.UnixMilli(), 10),
			},
			EventSource: "aws:sqs", EventSourceARN: arn, AWSRegion: h.cfg.Region,
		}
		byID[m.ID] = m.Receipt
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		h.log.Error("encode event", "err", err)
		return
	}
	ictx, cancel := context.WithTimeout(ctx, h.cfg.FunctionTimeout)
	defer cancel()
	out, err := fn.Invoke(ictx, payload)
	h.count(name, err != nil)
	if err != nil {
		// A failed invocation leaves the whole batch to its visibility timeout.
		h.log.Error("invocation failed", "queue", name, "records", len(msgs), "err", err)
		return
	}
	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		h.log.Error("decode response", "queue", name, "err", err)
		return
	}
	for _, f := range resp.BatchItemFailures {
		delete(byID, f.ItemIdentifier)
	}
	receipts := make([]string, 0, len(byID))
	for _, r := range byID {
		receipts = append(receipts, r)
	}
	if len(receipts) > 0 {
		if err := h.q.Delete(ctx, name, receipts...); err != nil {
			h.log.Error("delete failed; messages will be redelivered", "queue", name, "err", err)
		}
	}
}

// schedule fires the scheduler at start and then every SchedulerEvery.
func (h *Host) schedule(ctx, work context.Context) {
	t := time.NewTicker(h.cfg.SchedulerEvery)
	defer t.Stop()
	for {
		ev := events.EventBridgeEvent{
			Version: "0", ID: job.NewID(time.Now()), DetailType: "Scheduled Event", Source: "aws.events",
			AccountID: h.cfg.Account, Time: time.Now().UTC(), Region: h.cfg.Region,
			Resources: []string{fmt.Sprintf("arn:aws:events:%s:%s:rule/slicework-sweeper", h.cfg.Region, h.cfg.Account)},
			Detail:    json.RawMessage("{}"),
		}
		if payload, err := json.Marshal(ev); err == nil {
			ictx, cancel := context.WithTimeout(work, h.cfg.FunctionTimeout)
			_, err := h.sched.Invoke(ictx, payload)
			cancel()
			h.count("scheduler", err != nil)
			if err != nil {
				h.log.Error("scheduler invocation failed", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (h *Host) count(fn string, failed bool) {
	h.statsMu.Lock()
	defer h.statsMu.Unlock()
	h.invokes[fn]++
	if failed {
		h.failures[fn]++
	}
}

// Invocations returns how many times each queue's function (and the
// scheduler) was invoked, and how many invocations failed.
func (h *Host) Invocations() (invokes, failures map[string]int) {
	h.statsMu.Lock()
	defer h.statsMu.Unlock()
	invokes, failures = map[string]int{}, map[string]int{}
	for k, v := range h.invokes {
		invokes[k] = v
	}
	for k, v := range h.failures {
		failures[k] = v
	}
	return invokes, failures
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
