package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/events"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// flowArgs name a one-chunk job of the flow kind, which records every run
// of its chunk and fails for good if Fail is set.
type flowArgs struct {
	Name string `json:"name"`
	Fail bool   `json:"fail,omitempty"`
}

func (flowArgs) Kind() string { return "flowstep" }

// flowKind records the names of the jobs whose chunk ran, in order.
type flowKind struct{ rec *flowRecorder }

type flowRecorder struct {
	mu   sync.Mutex
	runs []string
}

func (k flowKind) Process(_ context.Context, c *engine.Chunk[flowArgs]) error {
	k.rec.mu.Lock()
	k.rec.runs = append(k.rec.runs, c.Args.Name)
	k.rec.mu.Unlock()
	if c.Args.Fail {
		return engine.Permanent(errors.New("told to fail"))
	}
	return nil
}

func (r *flowRecorder) ran() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// flowFaults wraps a store to inject the crashes of the workflow tests.
type flowFaults struct {
	store.Store
	mu sync.Mutex
	// crashTerminal names jobs whose terminal transition commits and then
	// reports a crash (once each).
	crashTerminal map[string]bool
	// failResolve fails this many ResolveDependency calls before they write.
	failResolve int
	// beforeCreate runs before CreateJob writes.
	beforeCreate func(j *job.Job)
}

func (f *flowFaults) Transition(ctx context.Context, id string, from []job.State, to job.State, p store.Patch) (*job.Job, error) {
	j, err := f.Store.Transition(ctx, id, from, to, p)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && to.Terminal() && f.crashTerminal[id] {
		delete(f.crashTerminal, id)
		return nil, errCrash
	}
	return j, err
}

func (f *flowFaults) ResolveDependency(ctx context.Context, dependant, dep, failure string) (store.Resolution, error) {
	f.mu.Lock()
	if f.failResolve > 0 {
		f.failResolve--
		f.mu.Unlock()
		return store.Resolution{}, errCrash
	}
	f.mu.Unlock()
	return f.Store.ResolveDependency(ctx, dependant, dep, failure)
}

func (f *flowFaults) CreateJob(ctx context.Context, j *job.Job) (*job.Job, error) {
	if f.beforeCreate != nil {
		f.beforeCreate(j)
	}
	return f.Store.CreateJob(ctx, j)
}

// flowRig is a rig with the flow kind, an in-process event bus and fault
// injection.
type flowRig struct {
	*rig
	rec    *flowRecorder
	faults *flowFaults
	mu     sync.Mutex
	events []events.JobFinished
}

func newFlowRig(t *testing.T, on string) *flowRig {
	t.Helper()
	fr := &flowRig{rec: &flowRecorder{}, faults: &flowFaults{crashTerminal: map[string]bool{}}}
	reg := engine.NewRegistry()
	engine.MustRegister[flowArgs](reg, flowKind{rec: fr.rec}, engine.Options{MaxAttempts: 1})
	bus := events.NewBus()
	bus.Subscribe(func(e events.JobFinished) { fr.mu.Lock(); fr.events = append(fr.events, e); fr.mu.Unlock() })
	fr.rig = newRigOn(t, on, reg, func(c *engine.Config) {
		fr.faults.Store = c.Store
		c.Store = fr.faults
		c.Events = bus
		c.Callbacks = engine.CallbackOptions{Attempts: 3, Backoff: time.Millisecond}
	})
	return fr
}

// submit submits a one-chunk flow job named name.
func (fr *flowRig) submit(name string, fail bool, opts engine.SubmitOptions) *job.Job {
	fr.t.Helper()
	opts.Input = job.Input{Type: job.InputIDRange, Start: 0, End: 1}
	j, err := fr.e.Submit(context.Background(), flowArgs{Name: name, Fail: fail}, opts)
	if err != nil {
		fr.t.Fatalf("submit %s: %v", name, err)
	}
	return j
}

// eventsOf returns the completion events published for job id.
func (fr *flowRig) eventsOf(id string) []events.JobFinished {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	var out []events.JobFinished
	for _, e := range fr.events {
		if e.JobID == id {
			out = append(out, e)
		}
	}
	return out
}

// drainCrashing is drain for runs with injected crashes: a control task
// that fails with an injected crash is dropped, as its dead process would
// have left it (a redelivery finds the job past the step).
func (fr *flowRig) drainCrashing() {
	fr.t.Helper()
	ctx := context.Background()
	for {
		ran := 0
		for _, m := range fr.receiveAll(fr.e.Queues().Slice()) {
			if err := fr.e.Control(ctx, m.Body, m.ReceiveCount); err != nil && !errors.Is(err, errCrash) {
				fr.t.Fatalf("control task %s: %v", m.Body, err)
			}
			fr.ack(fr.e.Queues().Slice(), m)
			ran++
		}
		for _, ch := range fr.e.Registry().Channels() {
			name := fr.e.Queues().Channel(ch)
			for _, m := range fr.receiveAll(name) {
				if v := fr.e.ProcessChunk(ctx, m.Body, engine.Delivery{MessageID: m.ID, ReceiveCount: m.ReceiveCount}); !v.Ack {
					fr.t.Fatalf("chunk %s not acked: %v", m.Body, v.Err)
				}
				fr.ack(name, m)
				ran++
			}
		}
		if ran == 0 {
			return
		}
	}
}

// sweepStale advances the clock past StaleAfter and sweeps.
func (fr *flowRig) sweepStale() engine.SweepReport {
	fr.t.Helper()
	fr.clk.Advance(6 * time.Minute)
	rep, err := fr.e.Sweep(context.Background())
	if err != nil {
		fr.t.Fatalf("Sweep: %v", err)
	}
	return rep
}

// wantState fails the test unless job id is in state with error text
// containing errPart.
func (fr *flowRig) wantState(id string, state job.State, errPart string) *job.Job {
	fr.t.Helper()
	j := fr.job(id)
	if j.State != state || !strings.Contains(j.Error, errPart) {
		fr.t.Errorf("job %s: %s %q, want %s with %q", id, j.State, j.Error, state, errPart)
	}
	return j
}

// B and C depend on A, D on B and C: D runs once, after both.
func TestDependenciesDiamond(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		fr := newFlowRig(t, on)
		a := fr.submit("A", false, engine.SubmitOptions{})
		b := fr.submit("B", false, engine.SubmitOptions{DependsOn: []string{a.ID}})
		c := fr.submit("C", false, engine.SubmitOptions{DependsOn: []string{a.ID}})
		d := fr.submit("D", false, engine.SubmitOptions{DependsOn: []string{b.ID, c.ID}})
		for _, w := range []struct {
			j       *job.Job
			pending int
		}{{b, 1}, {c, 1}, {d, 2}} {
			if w.j.State != job.StateWaiting || w.j.DepsPending != w.pending {
				t.Errorf("job %s submitted %s with %d pending, want waiting with %d", w.j.ID, w.j.State, w.j.DepsPending, w.pending)
			}
		}
		deps, err := fr.e.Dependants(context.Background(), a.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{b.ID, c.ID}
		slices.Sort(want)
		if !slices.Equal(deps, want) {
			t.Errorf("Dependants(A) = %v, want %v", deps, want)
		}
		fr.drain()
		runs := fr.rec.ran()
		if len(runs) != 4 || runs[0] != "A" || runs[3] != "D" {
			t.Errorf("chunks ran in order %v, want A, then B and C, then D once", runs)
		}
		for _, j := range []*job.Job{a, b, c, d} {
			got := fr.wantState(j.ID, job.StateSucceeded, "")
			if got.DepsPending != 0 || got.FollowUp != "" {
				t.Errorf("job %s: %d pending, follow-up %q; want none", j.ID, got.DepsPending, got.FollowUp)
			}
			if n := len(fr.eventsOf(j.ID)); n != 1 {
				t.Errorf("job %s: %d completion events, want 1", j.ID, n)
			}
		}
		if got := fr.job(d.ID).DependsOn; !slices.Equal(got, []string{b.ID, c.ID}) {
			t.Errorf("D depends on %v, want B and C", got)
		}
		// Nothing is left for the sweeper, and it publishes nothing again.
		if rep := fr.sweepStale(); rep.FollowUps != 0 {
			t.Errorf("sweeper ran %d follow-ups, want 0", rep.FollowUps)
		}
		if n := len(fr.eventsOf(d.ID)); n != 1 {
			t.Errorf("after a sweep: %d events for D, want 1", n)
		}
	})
}

// A dependency that fails or is cancelled fails its dependant with the
// reason, unless the dependant runs anyway.
func TestDependencyFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		cancel    bool
		runAnyway bool
		want      job.State
		reason    string
	}{
		{"Failed", false, false, job.StateFailed, "failed: 1 of 1 chunks failed"},
		{"Cancelled", true, false, job.StateFailed, "cancelled: cancelled"},
		{"FailedRunAnyway", false, true, job.StateSucceeded, ""},
		{"CancelledRunAnyway", true, true, job.StateSucceeded, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, on string) {
				fr := newFlowRig(t, on)
				a := fr.submit("A", !tc.cancel, engine.SubmitOptions{})
				b := fr.submit("B", false, engine.SubmitOptions{DependsOn: []string{a.ID}, RunAnyway: tc.runAnyway})
				// C waits on B: a failure travels down the chain.
				c := fr.submit("C", false, engine.SubmitOptions{DependsOn: []string{b.ID}})
				if tc.cancel {
					if _, err := fr.e.Cancel(context.Background(), a.ID); err != nil {
						t.Fatal(err)
					}
				}
				fr.drain()
				reason := ""
				if tc.want == job.StateFailed {
					reason = fmt.Sprintf("dependency %s %s", a.ID, tc.reason)
				}
				got := fr.wantState(b.ID, tc.want, reason)
				if tc.want == job.StateFailed {
					if slices.Contains(fr.rec.ran(), "B") {
						t.Error("B ran although its dependency failed")
					}
					fr.wantState(c.ID, job.StateFailed, "dependency "+b.ID+" failed: dependency "+a.ID)
				} else {
					if !strings.Contains(got.DepFailure, a.ID) {
						t.Errorf("B's dependency_failure = %q, want it to name A", got.DepFailure)
					}
					fr.wantState(c.ID, job.StateSucceeded, "")
				}
				for _, j := range []*job.Job{a, b, c} {
					if n := len(fr.eventsOf(j.ID)); n != 1 {
						t.Errorf("job %s: %d completion events, want 1", j.ID, n)
					}
				}
			})
		})
	}
}

// A dependency that finished before its dependant was submitted, or while
// it was being created (after the dependency's follow-up listed its
// dependants), is counted by the dependant's own creation check.
func TestDependencyFinishedAtSubmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fail   bool
		race   bool
		want   job.State
		submit job.State
	}{
		{"Before", false, false, job.StateSucceeded, job.StateQueued},
		{"BeforeFailed", true, false, job.StateFailed, job.StateFailed},
		{"WhileCreating", false, true, job.StateSucceeded, job.StateQueued},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, on string) {
				fr := newFlowRig(t, on)
				a := fr.submit("A", tc.fail, engine.SubmitOptions{})
				if tc.race {
					// A finishes, follow-up and all, after B's submission
					// checked it but before B's edge is written.
					var once sync.Once
					fr.faults.beforeCreate = func(j *job.Job) {
						if len(j.DependsOn) > 0 {
							once.Do(func() { fr.drain() })
						}
					}
				} else {
					fr.drain()
				}
				b := fr.submit("B", false, engine.SubmitOptions{DependsOn: []string{a.ID}})
				if b.State != tc.submit {
					t.Errorf("B submitted in state %s, want %s", b.State, tc.submit)
				}
				fr.drain()
				fr.wantState(b.ID, tc.want, "")
				if n := len(fr.eventsOf(b.ID)); n != 1 {
					t.Errorf("B: %d completion events, want 1", n)
				}
			})
		})
	}
}

// A process that dies after a job's terminal transition, before it
// released the dependants and published the event, leaves the follow-up
// token: the sweeper does the work, once.
func TestFollowUpAfterCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// crash: the finish step's terminal transition commits, then the
		// process dies; else resolving the dependants fails once.
		crash bool
	}{
		{"CrashAfterTerminalTransition", true},
		{"ResolveFails", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, on string) {
				fr := newFlowRig(t, on)
				a := fr.submit("A", false, engine.SubmitOptions{})
				b := fr.submit("B", false, engine.SubmitOptions{DependsOn: []string{a.ID}})
				if tc.crash {
					fr.faults.crashTerminal[a.ID] = true
				} else {
					fr.faults.failResolve = 1
				}
				fr.drainCrashing()
				if got := fr.wantState(a.ID, job.StateSucceeded, ""); got.FollowUp == "" {
					t.Fatal("A's follow-up token is gone although its follow-up did not run")
				}
				fr.wantState(b.ID, job.StateWaiting, "")
				if n := len(fr.eventsOf(a.ID)); n != 0 {
					t.Fatalf("A: %d events before the sweep, want 0", n)
				}
				// A sweep within StaleAfter leaves it to the process.
				if rep, err := fr.e.Sweep(context.Background()); err != nil || rep.FollowUps != 0 {
					t.Fatalf("early sweep: %+v, %v; want no follow-up run", rep, err)
				}
				if rep := fr.sweepStale(); rep.FollowUps != 1 {
					t.Errorf("sweep ran %d follow-ups, want 1", rep.FollowUps)
				}
				if fr.job(a.ID).FollowUp != "" {
					t.Error("A's follow-up token is left after the sweep")
				}
				fr.drain()
				fr.wantState(b.ID, job.StateSucceeded, "")
				if runs := fr.rec.ran(); !slices.Equal(runs, []string{"A", "B"}) {
					t.Errorf("runs %v, want A then B once", runs)
				}
				fr.sweepStale()
				for _, j := range []*job.Job{a, b} {
					if n := len(fr.eventsOf(j.ID)); n != 1 {
						t.Errorf("job %s: %d completion events, want 1", j.ID, n)
					}
				}
			})
		})
	}
}

// Every terminal job publishes exactly one completion event, whatever its
// state, with a stable id.
func TestCompletionEvents(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		fr := newFlowRig(t, on)
		ok := fr.submit("ok", false, engine.SubmitOptions{Tags: []string{"t1"}})
		bad := fr.submit("bad", true, engine.SubmitOptions{})
		gone := fr.submit("gone", false, engine.SubmitOptions{RunAt: fr.clk.Now().Add(time.Hour)})
		if _, err := fr.e.Cancel(context.Background(), gone.ID); err != nil {
			t.Fatal(err)
		}
		fr.drain()
		fr.sweepStale()
		for _, w := range []struct {
			j     *job.Job
			state job.State
		}{{ok, job.StateSucceeded}, {bad, job.StateFailed}, {gone, job.StateCancelled}} {
			evs := fr.eventsOf(w.j.ID)
			if len(evs) != 1 {
				t.Errorf("job %s: %d events, want 1", w.j.ID, len(evs))
				continue
			}
			e := evs[0]
			if e.ID != events.EventID(w.j.ID, w.state) || e.State != w.state || e.Kind != "flowstep" || e.FinishedAt == nil {
				t.Errorf("job %s: event %+v, want state %s", w.j.ID, e, w.state)
			}
		}
		if evs := fr.eventsOf(ok.ID); len(evs) == 1 && (evs[0].Counters.ChunksDone != 1 || !slices.Equal(evs[0].Tags, []string{"t1"})) {
			t.Errorf("event of ok: %+v", evs[0])
		}
	})
}

// callbackServer answers the first fails requests with 500, then 200, and
// records every request.
type callbackServer struct {
	*httptest.Server
	mu    sync.Mutex
	fails int
	got   []callbackRequest
}

type callbackRequest struct {
	id, attempt string
	event       events.JobFinished
}

func newCallbackServer(t *testing.T, fails int) *callbackServer {
	cs := &callbackServer{fails: fails}
	cs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var e events.JobFinished
		if err := json.Unmarshal(body, &e); err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("callback: %s %s %q: %v", r.Method, r.Header.Get("Content-Type"), body, err)
		}
		cs.mu.Lock()
		defer cs.mu.Unlock()
		cs.got = append(cs.got, callbackRequest{id: r.Header.Get(engine.HeaderEventID), attempt: r.Header.Get(engine.HeaderAttempt), event: e})
		if len(cs.got) <= cs.fails {
			http.Error(w, "not now", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(cs.Close)
	return cs
}

func (cs *callbackServer) requests() []callbackRequest {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return slices.Clone(cs.got)
}

// The completion event is POSTed to the callback URL, retried after a 500;
// a callback that keeps failing is given up without touching the job.
func TestCallback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fails    int
		requests int
	}{
		{"RetriedAfter500", 1, 2},
		{"GivesUp", 100, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, on string) {
				fr := newFlowRig(t, on)
				cs := newCallbackServer(t, tc.fails)
				j := fr.submit("hooked", false, engine.SubmitOptions{CallbackURL: cs.URL + "/done?x=1"})
				fr.drain()
				got := fr.wantState(j.ID, job.StateSucceeded, "")
				if got.CallbackURL != cs.URL+"/done?x=1" || got.FollowUp != "" {
					t.Errorf("job callback %q, follow-up %q", got.CallbackURL, got.FollowUp)
				}
				reqs := cs.requests()
				if len(reqs) != tc.requests {
					t.Fatalf("%d callback requests, want %d", len(reqs), tc.requests)
				}
				for i, r := range reqs {
					if r.id != events.EventID(j.ID, job.StateSucceeded) || r.attempt != fmt.Sprint(i+1) ||
						r.event.JobID != j.ID || r.event.State != job.StateSucceeded {
						t.Errorf("request %d: %+v", i, r)
					}
				}
				// The sweeper does not call again.
				fr.sweepStale()
				if n := len(cs.requests()); n != tc.requests {
					t.Errorf("after a sweep: %d requests, want %d", n, tc.requests)
				}
			})
		})
	}
}

// Bad workflow fields are rejected with a ValidationError naming the field,
// and nothing is written.
func TestSubmitFlowValidation(t *testing.T) {
	t.Parallel()
	fr := newFlowRig(t, onEmbedded)
	a := fr.submit("A", false, engine.SubmitOptions{})
	missing := job.NewID(time.Now())
	tooMany := make([]string, engine.MaxDependsOn+1)
	for i := range tooMany {
		tooMany[i] = a.ID
	}
	for _, tc := range []struct {
		name  string
		req   engine.Request
		field string
	}{
		{"MissingDependency", engine.Request{DependsOn: []string{a.ID, missing}}, "depends_on"},
		{"Duplicate", engine.Request{DependsOn: []string{a.ID, a.ID}}, "depends_on"},
		{"Empty", engine.Request{DependsOn: []string{""}}, "depends_on"},
		{"TooMany", engine.Request{DependsOn: tooMany}, "depends_on"},
		{"RunAnywayAlone", engine.Request{RunAnyway: true}, "run_anyway"},
		{"CallbackScheme", engine.Request{CallbackURL: "ftp://example.com/x"}, "callback_url"},
		{"CallbackNoHost", engine.Request{CallbackURL: "https:///x"}, "callback_url"},
		{"CallbackTooLong", engine.Request{CallbackURL: "https://example.com/" + strings.Repeat("x", engine.MaxCallbackURL)}, "callback_url"},
		{"CallbackUserInfo", engine.Request{CallbackURL: "https://u:p@example.com/"}, "callback_url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req
			req.Kind = "flowstep"
			req.Args = json.RawMessage(`{"name":"x"}`)
			req.Input = job.Input{Type: job.InputIDRange, Start: 0, End: 1}
			j, err := fr.e.SubmitRequest(context.Background(), req)
			var ve *engine.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, job.ErrInvalid) || j != nil {
				t.Fatalf("SubmitRequest = %v, %v; want a ValidationError on %s", j, err, tc.field)
			}
		})
	}
	page, err := fr.e.List(context.Background(), job.Query{Kind: "flowstep"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 {
		t.Errorf("%d jobs stored, want only A", len(page.Jobs))
	}
	if deps, err := fr.e.Dependants(context.Background(), a.ID); err != nil || len(deps) != 0 {
		t.Errorf("Dependants(A) = %v, %v; want none", deps, err)
	}
}
