package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/eventfanout"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/split"
	"github.com/slicework/slicework/shared/store"
)

// replacerArgs: the job's one chunk replaces itself with N leaf jobs.
type replacerArgs struct {
	N int `json:"n"`
	// Keyed gives every leaf a unique key.
	Keyed bool `json:"keyed,omitempty"`
	// AfterMe makes every leaf depend on the replacing job.
	AfterMe bool `json:"after_me,omitempty"`
}

func (replacerArgs) Kind() string { return "replacer" }

type replacerKind struct{}

func (replacerKind) Process(_ context.Context, c *engine.Chunk[replacerArgs]) error {
	children := make([]engine.Child, c.Args.N)
	for i := range children {
		opts := engine.SubmitOptions{Input: oneID}
		if c.Args.Keyed {
			opts.UniqueKey = fmt.Sprintf("leaf-%s-%d", c.Job.ID, i)
		}
		if c.Args.AfterMe {
			opts.DependsOn = []string{c.Job.ID}
		}
		children[i] = engine.NewChild(leafArgs{I: i}, opts)
	}
	return engine.Replace(children...)
}

// leafArgs: a job of one chunk that succeeds.
type leafArgs struct {
	I int `json:"i"`
}

func (leafArgs) Kind() string { return "leaf" }

type leafKind struct{}

func (leafKind) Process(context.Context, *engine.Chunk[leafArgs]) error { return nil }

var oneID = job.Input{Type: job.InputIDRange, Start: 0, End: 1}

func replaceRegistry(t *testing.T) *engine.Registry {
	t.Helper()
	reg := engine.NewRegistry()
	engine.MustRegister[replacerArgs](reg, replacerKind{}, engine.Options{})
	engine.MustRegister[leafArgs](reg, leafKind{}, engine.Options{})
	return reg
}

// listAll lists every job matching q through the engine, checking that the
// pages hold no job twice.
func (r *rig) listAll(q job.Query) []*job.Job {
	r.t.Helper()
	q.Limit = job.MaxPageSize
	var out []*job.Job
	seen := map[string]bool{}
	for {
		page, err := r.e.List(context.Background(), q)
		if err != nil {
			r.t.Fatalf("List(%+v): %v", q, err)
		}
		for _, j := range page.Jobs {
			if seen[j.ID] {
				r.t.Fatalf("List(%+v) returned job %s twice", q, j.ID)
			}
			seen[j.ID] = true
		}
		out = append(out, page.Jobs...)
		if page.Next == "" {
			return out
		}
		q.Cursor = page.Next
	}
}

// controlTasks takes every pending control task off the slice queue,
// deleting them in batches.
func (r *rig) controlTasks() []job.ControlTask {
	r.t.Helper()
	var out []job.ControlTask
	var receipts []string
	name := r.e.Queues().Slice()
	for _, m := range r.receiveAll(name) {
		var ct job.ControlTask
		if err := json.Unmarshal(m.Body, &ct); err != nil {
			r.t.Fatal(err)
		}
		out = append(out, ct)
		receipts = append(receipts, m.Receipt)
	}
	for batch := range slices.Chunk(receipts, queue.MaxBatch) {
		if err := r.be.Queue.Delete(context.Background(), name, batch...); err != nil {
			r.t.Fatal(err)
		}
	}
	return out
}

// sliceOne submits a replacer job and slices it: it returns the job and
// its one chunk task's body.
func (r *rig) sliceOne(args replacerArgs) (*job.Job, []byte) {
	r.t.Helper()
	j, err := r.e.Submit(context.Background(), args, engine.SubmitOptions{Input: oneID})
	if err != nil {
		r.t.Fatal(err)
	}
	if n := r.control(); n != 1 {
		r.t.Fatalf("ran %d control tasks, want the slice task", n)
	}
	chq := r.e.Queues().Channel(engine.DefaultChannel)
	msgs := r.receiveAll(chq)
	if len(msgs) != 1 {
		r.t.Fatalf("%d chunk tasks, want 1", len(msgs))
	}
	r.ack(chq, msgs[0])
	return j, msgs[0].Body
}

func ids(jobs []*job.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	slices.Sort(out)
	return out
}

// A chunk replaced by 3 jobs: the chunk's outcome and the 3 jobs are one
// write, their slice tasks follow it, and duplicate deliveries submit
// nothing more. Then the jobs run to the end.
func TestReplaceThree(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		for _, keyed := range []bool{false, true} {
			t.Run(fmt.Sprintf("keyed=%v", keyed), func(t *testing.T) {
				r := newRigOn(t, on, replaceRegistry(t))
				ctx := context.Background()
				j, body := r.sliceOne(replacerArgs{N: 3, Keyed: keyed})
				if v := r.e.ProcessChunk(ctx, body, engine.Delivery{ReceiveCount: 1}); !v.Ack || v.Outcome != job.OutcomeSucceeded || v.Err != nil {
					t.Fatalf("verdict %+v, want acked success", v)
				}
				c, err := r.be.Store.GetChunk(ctx, j.ID, 0)
				if err != nil || c.State != job.ChunkSucceeded || c.Items != 1 {
					t.Fatalf("chunk 0 = %+v, %v; want succeeded", c, err)
				}
				children := r.listAll(job.Query{Parent: j.ID})
				if len(children) != 3 {
					t.Fatalf("%d children, want 3", len(children))
				}
				for _, ch := range children {
					if ch.Kind != "leaf" || ch.Parent != j.ID || ch.State != job.StateQueued || (keyed && ch.UniqueKey == "") {
						t.Errorf("child %+v, want a queued leaf with parent %s", ch, j.ID)
					}
				}

				// Duplicate deliveries: acknowledged, nothing submitted.
				for range 2 {
					if v := r.e.ProcessChunk(ctx, body, engine.Delivery{ReceiveCount: 2}); !v.Ack || v.Outcome != "" {
						t.Fatalf("duplicate verdict %+v, want acked with no outcome", v)
					}
				}
				if got := r.listAll(job.Query{Parent: j.ID}); !slices.Equal(ids(got), ids(children)) {
					t.Fatalf("children after duplicates %v, want %v", ids(got), ids(children))
				}
				if got := r.listAll(job.Query{Kind: "leaf"}); len(got) != 3 {
					t.Fatalf("%d leaf jobs after duplicates, want 3", len(got))
				}
				sliceTasks := map[string]int{}
				finish := 0
				for _, ct := range r.controlTasks() {
					switch {
					case ct.Op == job.OpSlice:
						sliceTasks[ct.JobID]++
					case ct.Op == job.OpFinish && ct.JobID == j.ID:
						finish++
					}
				}
				for _, ch := range children {
					if sliceTasks[ch.ID] != 1 {
						t.Errorf("child %s has %d slice tasks, want 1", ch.ID, sliceTasks[ch.ID])
					}
				}
				if len(sliceTasks) != 3 || finish != 1 {
					t.Errorf("control tasks: slices %v, %d finish tasks of the replacer; want the 3 children's and 1", sliceTasks, finish)
				}
				// Run the children and finish the replacer.
				for _, ch := range children {
					if err := r.e.Slice(ctx, ch.ID); err != nil {
						t.Fatal(err)
					}
				}
				if err := r.e.Finish(ctx, j.ID, 1); err != nil {
					t.Fatal(err)
				}
				r.drain()
				if got := r.job(j.ID); got.State != job.StateSucceeded || got.Counters.ChunksDone != 1 {
					t.Errorf("replacer %s %+v, want succeeded", got.State, got.Counters)
				}
				for _, ch := range children {
					if got := r.job(ch.ID); got.State != job.StateSucceeded || got.Counters.ChunksDone != 1 {
						t.Errorf("child %s %s %+v, want succeeded", ch.ID, got.State, got.Counters)
					}
				}
			})
		}
	})
}

// Replaced jobs may depend on existing jobs, the replacing job included:
// they wait until it has finished, then run.
func TestReplaceChildrenWaitForParent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		r := newRigOn(t, on, replaceRegistry(t))
		ctx := context.Background()
		j, body := r.sliceOne(replacerArgs{N: 2, AfterMe: true})
		if v := r.e.ProcessChunk(ctx, body, engine.Delivery{ReceiveCount: 1}); !v.Ack || v.Outcome != job.OutcomeSucceeded {
			t.Fatalf("verdict %+v", v)
		}
		children := r.listAll(job.Query{Parent: j.ID})
		if len(children) != 2 {
			t.Fatalf("%d children, want 2", len(children))
		}
		for _, ch := range children {
			if got := r.job(ch.ID); got.State != job.StateWaiting || !slices.Equal(got.DependsOn, []string{j.ID}) {
				t.Errorf("child %s is %s depending on %v, want waiting on %s", ch.ID, got.State, got.DependsOn, j.ID)
			}
		}
		r.drainLogged()
		for _, id := range []string{j.ID, children[0].ID, children[1].ID} {
			if got := r.job(id); got.State != job.StateSucceeded {
				t.Errorf("job %s is %s, want succeeded", id, got.State)
			}
		}
	})
}

// replaceFaults injects a crash right after ReplaceChunk commits.
type replaceFaults struct {
	store.Store
	mu      sync.Mutex
	crashes int
}

func (f *replaceFaults) ReplaceChunk(ctx context.Context, jobID string, index int64, a job.Attempt, jobs []*job.Job) (store.Replaced, error) {
	res, err := f.Store.ReplaceChunk(ctx, jobID, index, a, jobs)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.crashes > 0 {
		f.crashes--
		return store.Replaced{}, errCrash
	}
	return res, err
}

// sliceQueueDown fails every Send to the slice queue while down is set.
type sliceQueueDown struct {
	queue.Queue
	slice string
	mu    sync.Mutex
	down  bool
}

func (q *sliceQueueDown) Send(ctx context.Context, name string, msgs ...queue.Outgoing) error {
	q.mu.Lock()
	down := q.down
	q.mu.Unlock()
	if down && name == q.slice {
		return errors.New("injected: slice queue unavailable")
	}
	return q.Queue.Send(ctx, name, msgs...)
}

// The jobs of a Replace are committed but their slice tasks are lost (the
// worker dies after the commit, or the queue is down): the sweeper
// re-drives them once they are stale, and they run.
func TestReplaceLostSliceTasks(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		for _, tc := range []struct {
			name      string
			crash     bool
			wantFirst bool // the first delivery is acknowledged
			// wantRedriven: the 3 children, and the replacer stuck in
			// finishing when its finish task was lost too.
			wantRedriven int
		}{
			{"CrashAfterCommit", true, false, 3},
			{"SliceQueueDown", false, true, 4},
		} {
			t.Run(tc.name, func(t *testing.T) {
				faults := &replaceFaults{}
				if tc.crash {
					faults.crashes = 1
				}
				q := &sliceQueueDown{}
				r := newRigOn(t, on, replaceRegistry(t), func(c *engine.Config) {
					faults.Store, c.Store = c.Store, faults
					q.Queue, c.Queue, q.slice = c.Queue, q, c.Queues.Slice()
				})
				ctx := context.Background()
				j, body := r.sliceOne(replacerArgs{N: 3})
				q.mu.Lock()
				q.down = !tc.crash
				q.mu.Unlock()
				v := r.e.ProcessChunk(ctx, body, engine.Delivery{ReceiveCount: 1})
				if v.Ack != tc.wantFirst {
					t.Fatalf("first delivery verdict %+v, want ack %v", v, tc.wantFirst)
				}
				q.mu.Lock()
				q.down = false
				q.mu.Unlock()
				if !v.Ack {
					// The message comes back: a duplicate, acknowledged.
					if v := r.e.ProcessChunk(ctx, body, engine.Delivery{ReceiveCount: 2}); !v.Ack {
						t.Fatalf("redelivery verdict %+v, want ack", v)
					}
				}
				children := r.listAll(job.Query{Parent: j.ID})
				if len(children) != 3 {
					t.Fatalf("%d children, want 3", len(children))
				}
				for _, ct := range r.controlTasks() {
					if ct.Op == job.OpSlice {
						t.Fatalf("slice task %+v survived the fault", ct)
					}
					if err := r.e.Finish(ctx, ct.JobID, 1); err != nil {
						t.Fatal(err)
					}
				}
				rep, err := r.e.Sweep(ctx)
				if err != nil || rep.Redriven != 0 {
					t.Fatalf("sweep before StaleAfter: %+v, %v; want nothing re-driven", rep, err)
				}
				r.clk.Advance(6 * time.Minute)
				if rep, err = r.e.Sweep(ctx); err != nil || rep.Redriven != tc.wantRedriven {
					t.Fatalf("sweep after StaleAfter: %+v, %v; want %d jobs re-driven", rep, err, tc.wantRedriven)
				}
				r.drain()
				for _, ch := range append(children, j) {
					if got := r.job(ch.ID); got.State != job.StateSucceeded {
						t.Errorf("job %s (%s) is %s, want succeeded", ch.ID, ch.Kind, got.State)
					}
				}
			})
		}
	})
}

// A Replace of 10,000 jobs becomes one fan-out child job whose requests are
// data blocks; its chunks (each delivered twice) submit exactly 10,000
// grandchildren with their parent set and one slice task each. Smaller
// counts still take the same path, in several chunks: on moto, whose every
// transaction copies the whole table (a fan-out chunk takes seconds once
// the table holds a few hundred jobs), 150 jobs; on the embedded backend
// under the race detector, which slows its pure-Go SQLite twenty-fold,
// 1,000 (10,000 take 10 s without it, over 4 min with it).
func TestReplaceLarge(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		n := 10_000
		switch {
		case on == onMoto:
			n = 150
		case on == onEmbedded && raceDetector:
			n = 1_000
		}
		r := newRigOn(t, on, replaceRegistry(t))
		ctx := context.Background()
		j, body := r.sliceOne(replacerArgs{N: n})
		for d := range 2 {
			if v := r.e.ProcessChunk(ctx, body, engine.Delivery{ReceiveCount: d + 1}); !v.Ack || v.Err != nil {
				t.Fatalf("delivery %d: verdict %+v", d, v)
			}
		}
		children := r.listAll(job.Query{Parent: j.ID})
		if len(children) != 1 || children[0].Kind != engine.FanoutKind {
			t.Fatalf("children %+v, want one %s job", children, engine.FanoutKind)
		}
		fan := children[0]
		per := int64((store.MaxTransactItems - store.ReplaceChunkItems) / 2)
		wantChunks := (int64(n) + per - 1) / per
		if in := fan.Input; in.Type != job.InputItems || in.Key != engine.BlocksPrefix(fan.ID) || in.End != int64(n) || fan.ChunkSize != per || fan.State != job.StateQueued {
			t.Fatalf("fan-out job %+v, want %d items in blocks of %d under %s", fan, n, per, engine.BlocksPrefix(fan.ID))
		}
		infos, err := r.be.Blobs.List(ctx, "jobs/")
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(infos)) != wantChunks {
			t.Fatalf("%d blobs under jobs/, want the fan-out job's %d blocks (the duplicate's are gone)", len(infos), wantChunks)
		}
		for _, info := range infos {
			if items, err := split.ReadBlock(ctx, r.be.Blobs, info.Key); err != nil || int64(len(items)) > per {
				t.Fatalf("block %s: %d items, %v", info.Key, len(items), err)
			}
		}

		// Run the replacer's and the fan-out job's tasks, every chunk twice;
		// keep the grandchildren's slice tasks.
		ours := map[string]bool{j.ID: true, fan.ID: true}
		held := map[string]int{}
		chq := r.e.Queues().Channel(engine.DefaultChannel)
		var idle time.Time
		for {
			ran := 0
			for _, ct := range r.controlTasks() {
				if !ours[ct.JobID] {
					if ct.Op != job.OpSlice {
						t.Fatalf("unexpected control task %+v", ct)
					}
					held[ct.JobID]++
					continue
				}
				b, _ := json.Marshal(ct)
				if err := r.e.Control(ctx, b, 1); err != nil {
					t.Fatal(err)
				}
				ran++
			}
			for _, m := range r.receiveAll(chq) {
				for d := range 2 {
					if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: d + 1}); !v.Ack || v.Err != nil {
						t.Fatalf("chunk %s delivery %d: verdict %+v", m.Body, d, v)
					}
				}
				r.ack(chq, m)
				ran++
			}
			if ran == 0 {
				// Wait out chunk leases lost with a receive's answer; the
				// grandchildren's slice tasks stay leased on purpose.
				if idle.IsZero() {
					idle = time.Now()
				}
				if r.awaitLeases(idle, chq) {
					continue
				}
				break
			}
			idle = time.Time{}
		}
		if got := r.job(fan.ID); got.State != job.StateSucceeded || got.Counters.ChunksDone != wantChunks || got.Counters.ItemsDone != int64(n) {
			t.Errorf("fan-out job %s %+v, want succeeded with %d chunks and %d items", got.State, got.Counters, wantChunks, n)
		}
		if got := r.job(j.ID); got.State != job.StateSucceeded {
			t.Errorf("replacer %s, want succeeded", got.State)
		}
		grand := r.listAll(job.Query{Parent: fan.ID})
		if len(grand) != n {
			t.Fatalf("%d grandchildren, want %d", len(grand), n)
		}
		seenI := map[string]bool{}
		for _, g := range grand {
			// The embedded queue delivers each message once; SQS at least
			// once (a SendMessageBatch retried after a lost answer sends its
			// entries again), and a repeated slice task is harmless.
			tasksOK := held[g.ID] == 1 || (on != onEmbedded && held[g.ID] >= 1)
			if g.Kind != "leaf" || g.Parent != fan.ID || g.State != job.StateQueued || !tasksOK {
				t.Fatalf("grandchild %+v with %d slice tasks, want a queued leaf of %s with 1 (at least 1 on SQS)", g, held[g.ID], fan.ID)
			}
			seenI[string(g.Args)] = true
		}
		if len(held) != n || len(seenI) != n {
			t.Errorf("%d jobs with slice tasks and %d distinct args, want %d", len(held), len(seenI), n)
		}
		if on == onEmbedded {
			// No leaf exists but the fan-out job's (a second listing of
			// 10,000 jobs takes half a minute on the emulators).
			if got := r.listAll(job.Query{Kind: "leaf"}); len(got) != n {
				t.Errorf("%d leaf jobs in all, want %d", len(got), n)
			}
		}
	})
}

// A Replace that breaks the rules fails its chunk for good and submits
// nothing.
func TestReplaceInvalid(t *testing.T) {
	t.Parallel()
	reg := engine.NewRegistry()
	engine.MustRegister[badReplaceArgs](reg, badReplaceKind{}, engine.Options{})
	engine.MustRegister[leafArgs](reg, leafKind{}, engine.Options{})
	for _, tc := range []struct {
		name string
		args badReplaceArgs
		want string
	}{
		{"UnknownKind", badReplaceArgs{Case: "unknown-kind"}, "unknown kind"},
		{"BadInput", badReplaceArgs{Case: "bad-input"}, "input.type"},
		{"SharedUniqueKey", badReplaceArgs{Case: "shared-key"}, "unique key"},
		{"OtherParent", badReplaceArgs{Case: "other-parent"}, "parent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, reg)
			ctx := context.Background()
			j, err := r.e.Submit(ctx, tc.args, engine.SubmitOptions{Input: oneID})
			if err != nil {
				t.Fatal(err)
			}
			r.drain()
			got := r.job(j.ID)
			if got.State != job.StateFailed || got.Counters.ChunksFailed != 1 {
				t.Fatalf("job %s %+v, want failed", got.State, got.Counters)
			}
			c, err := r.be.Store.GetChunk(ctx, j.ID, 0)
			if err != nil || len(c.Attempts) != 1 || !strings.Contains(c.Attempts[0].Error, tc.want) {
				t.Fatalf("chunk %+v, %v; want one failed attempt mentioning %q", c, err, tc.want)
			}
			if kids := r.listAll(job.Query{Parent: j.ID}); len(kids) != 0 {
				t.Errorf("%d children submitted", len(kids))
			}
		})
	}
}

type badReplaceArgs struct {
	Case string `json:"case"`
}

func (badReplaceArgs) Kind() string { return "badreplace" }

type badReplaceKind struct{}

func (badReplaceKind) Process(_ context.Context, c *engine.Chunk[badReplaceArgs]) error {
	ok := engine.NewChild(leafArgs{}, engine.SubmitOptions{Input: oneID})
	switch c.Args.Case {
	case "unknown-kind":
		return engine.Replace(ok, engine.ChildRequest(engine.Request{Kind: "nope", Input: oneID}))
	case "bad-input":
		return engine.Replace(ok, engine.NewChild(leafArgs{}, engine.SubmitOptions{}))
	case "shared-key":
		return engine.Replace(
			engine.NewChild(leafArgs{I: 1}, engine.SubmitOptions{Input: oneID, UniqueKey: "k"}),
			engine.NewChild(leafArgs{I: 2}, engine.SubmitOptions{Input: oneID, UniqueKey: "k"}))
	case "other-parent":
		return engine.Replace(engine.ChildRequest(engine.Request{Kind: "leaf", Input: oneID, Parent: job.NewID(time.Now())}))
	}
	return nil
}

// drainLogged is drain for tests that count effects, not deliveries: it
// logs every verdict that is not a clean acknowledgement (an emulator
// under load may time out a request, and the chunk then comes back).
// sweepAndDrain repairs what a failed send left behind, as the deployed
// sweeper does: it moves the clock past StaleAfter, sweeps, and drains,
// until a sweep finds nothing to re-drive. (Slice tasks of replaced jobs
// are sent after their transaction; when that send fails, on an emulator
// under load for instance, the jobs stay queued until a sweep.)
func (r *rig) sweepAndDrain() {
	r.t.Helper()
	for range 5 {
		r.clk.Advance(6 * time.Minute)
		rep, err := r.e.Sweep(context.Background())
		if err != nil {
			r.t.Fatal(err)
		}
		if rep == (engine.SweepReport{}) {
			return
		}
		r.t.Logf("sweep repaired %+v", rep)
		r.drainLogged()
	}
	r.t.Fatal("the sweeper still re-drives jobs after 5 sweeps")
}

func (r *rig) drainLogged() {
	r.t.Helper()
	ctx := context.Background()
	var idle time.Time
	for {
		ran := r.control()
		for _, ch := range r.e.Registry().Channels() {
			name := r.e.Queues().Channel(ch)
			for _, m := range r.receiveAll(name) {
				v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{MessageID: m.ID, ReceiveCount: m.ReceiveCount})
				if v.Err != nil || !v.Ack {
					r.t.Logf("chunk %s: verdict %+v", m.Body, v)
				}
				if v.Ack {
					r.ack(name, m)
				} else if err := r.be.Queue.ChangeVisibility(ctx, name, queue.VisibilityChange{Receipt: m.Receipt, Timeout: 0}); err != nil {
					r.t.Fatal(err)
				}
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
			return
		}
		idle = time.Time{}
	}
}

// The event fan-out of the seed: firedevent → processsubscription per
// subscriber → processnotification per channel, counted exactly, with
// the lineage listed at every level. 60 subscribers take the fan-out path
// (a tagged subscription costs 3 transaction items: 32 fit one
// transaction); on moto, whose transactions copy the whole table, 12
// subscribers keep the test short and take the direct path (the fan-out
// path is tested on moto by TestReplaceLarge).
func TestEventFanoutChain(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		reg := engine.NewRegistry()
		if err := eventfanout.Register(reg); err != nil {
			t.Fatal(err)
		}
		r := newRigOn(t, on, reg)
		ctx := context.Background()
		subscribers, fanChunks := 60, int64(2)
		if on == onMoto {
			subscribers, fanChunks = 12, 0
		}
		const event = "signup-42"
		ev, err := r.e.Submit(ctx, eventfanout.FiredEvent{Event: event, Subscribers: subscribers}, engine.SubmitOptions{Input: eventfanout.Input})
		if err != nil {
			t.Fatal(err)
		}
		notes := eventfanout.Notifications(subscribers)
		r.drainLogged()
		r.sweepAndDrain()
		if got := r.job(ev.ID); got.State != job.StateSucceeded || got.Counters.ChunksDone != 1 {
			t.Fatalf("event job %s %+v, want succeeded", got.State, got.Counters)
		}
		subsParent := ev.ID
		if fanChunks > 0 {
			fans := r.listAll(job.Query{Parent: ev.ID})
			if len(fans) != 1 || fans[0].Kind != engine.FanoutKind || fans[0].State != job.StateSucceeded ||
				fans[0].Counters.ChunksDone != fanChunks || fans[0].Counters.ItemsDone != int64(subscribers) {
				t.Fatalf("event's children %+v, want one succeeded fan-out job of %d chunks", fans, fanChunks)
			}
			subsParent = fans[0].ID
		}
		subs := r.listAll(job.Query{Parent: subsParent})
		if len(subs) != subscribers {
			t.Fatalf("%d subscriptions, want %d", len(subs), subscribers)
		}
		total := 0
		seen := map[int]bool{}
		for _, s := range subs {
			var a eventfanout.ProcessSubscription
			if err := json.Unmarshal(s.Args, &a); err != nil {
				t.Fatal(err)
			}
			seen[a.Subscriber] = true
			kids := r.listAll(job.Query{Parent: s.ID})
			want := eventfanout.Channels(a.Subscriber)
			if s.Kind != eventfanout.ProcessSubscriptionKind || s.State != job.StateSucceeded || s.Counters.ChunksDone != 1 || len(kids) != len(want) {
				t.Errorf("subscription %d: %s %s %+v with %d notifications, want succeeded with %d", a.Subscriber, s.Kind, s.State, s.Counters, len(kids), len(want))
			}
			for _, k := range kids {
				if k.Kind != eventfanout.ProcessNotificationKind || k.State != job.StateSucceeded || k.Counters.ChunksDone != 1 {
					t.Errorf("notification %s: %s %s %+v, want a succeeded notification", k.ID, k.Kind, k.State, k.Counters)
				}
			}
			total += len(kids)
		}
		if total != notes || len(seen) != subscribers {
			t.Errorf("%d notifications for %d distinct subscribers, want %d for %d", total, len(seen), notes, subscribers)
		}
		jobs := 1 + subscribers + notes
		if fanChunks > 0 {
			jobs++
		}
		for _, tc := range []struct {
			q    job.Query
			want int
		}{
			{job.Query{Kind: eventfanout.ProcessNotificationKind}, notes},
			{job.Query{Kind: eventfanout.ProcessSubscriptionKind, State: job.StateSucceeded}, subscribers},
			{job.Query{Tag: eventfanout.Tag(event)}, subscribers + notes},
			{job.Query{Tag: eventfanout.Tag(event), Kind: eventfanout.ProcessSubscriptionKind}, subscribers},
			{job.Query{State: job.StateSucceeded}, jobs},
			{job.Query{}, jobs},
		} {
			if got := r.listAll(tc.q); len(got) != tc.want {
				t.Errorf("List(%+v) = %d jobs, want %d", tc.q, len(got), tc.want)
			}
		}
	})
}

// Job search on every backend: by kind, state, tag, parent and creation
// time, paginated with the cursor; bad queries are refused.
func TestSearchJobs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, on string) {
		r := newRigOn(t, on, replaceRegistry(t))
		ctx := context.Background()
		t0 := r.clk.Now().UTC()
		submit := func(args engine.Args, tags []string, parent string) *job.Job {
			t.Helper()
			r.clk.Advance(time.Minute)
			raw, _ := json.Marshal(args)
			j, err := r.e.SubmitRequest(ctx, engine.Request{Kind: args.Kind(), Args: raw, Input: oneID, Tags: tags, Parent: parent})
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
		a1 := submit(leafArgs{I: 1}, []string{"red"}, "")         // t0+1m
		a2 := submit(leafArgs{I: 2}, []string{"blue"}, "")        // t0+2m
		a3 := submit(replacerArgs{}, []string{"red", "blue"}, "") // t0+3m
		a4 := submit(leafArgs{I: 4}, nil, "")                     // t0+4m
		a5 := submit(leafArgs{I: 5}, []string{"red"}, a3.ID)      // t0+5m
		a6 := submit(leafArgs{I: 6}, nil, a3.ID)                  // t0+6m
		if _, err := r.e.Cancel(ctx, a4.ID); err != nil {
			t.Fatal(err)
		}
		at := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Minute) }
		for _, tc := range []struct {
			name string
			q    job.Query
			want []*job.Job // newest first
		}{
			{"All", job.Query{}, []*job.Job{a6, a5, a4, a3, a2, a1}},
			{"Kind", job.Query{Kind: "leaf"}, []*job.Job{a6, a5, a4, a2, a1}},
			{"KindState", job.Query{Kind: "leaf", State: job.StateQueued}, []*job.Job{a6, a5, a2, a1}},
			{"State", job.Query{State: job.StateCancelled}, []*job.Job{a4}},
			{"Tag", job.Query{Tag: "red"}, []*job.Job{a5, a3, a1}},
			{"TagKind", job.Query{Tag: "red", Kind: "leaf"}, []*job.Job{a5, a1}},
			{"Parent", job.Query{Parent: a3.ID}, []*job.Job{a6, a5}},
			{"ParentTag", job.Query{Parent: a3.ID, Tag: "red"}, []*job.Job{a5}},
			{"NoChildren", job.Query{Parent: a1.ID}, nil},
			{"CreatedFrom", job.Query{CreatedAfter: at(4)}, []*job.Job{a6, a5, a4}},
			{"CreatedTo", job.Query{CreatedBefore: at(3)}, []*job.Job{a2, a1}},
			{"CreatedRange", job.Query{CreatedAfter: at(2), CreatedBefore: at(5)}, []*job.Job{a4, a3, a2}},
			{"Everything", job.Query{Kind: "leaf", State: job.StateQueued, Tag: "red", Parent: a3.ID, CreatedAfter: at(5), CreatedBefore: at(6)}, []*job.Job{a5}},
		} {
			for _, limit := range []int{1, 2, 0} {
				q := tc.q
				q.Limit = limit
				var got []string
				for pages := 0; ; pages++ {
					page, err := r.e.List(ctx, q)
					if err != nil {
						t.Fatalf("%s: List(%+v): %v", tc.name, q, err)
					}
					if limit > 0 && len(page.Jobs) > limit {
						t.Fatalf("%s: page of %d, limit %d", tc.name, len(page.Jobs), limit)
					}
					for _, j := range page.Jobs {
						got = append(got, j.ID)
					}
					if page.Next == "" || pages > 10 {
						break
					}
					q.Cursor = page.Next
				}
				var want []string
				for _, j := range tc.want {
					want = append(want, j.ID)
				}
				if !slices.Equal(got, want) {
					t.Errorf("%s (limit %d): listed %v, want %v", tc.name, limit, got, want)
				}
			}
		}
		for _, tc := range []struct {
			name  string
			q     job.Query
			field string
		}{
			{"BadKind", job.Query{Kind: "Not A Kind"}, "kind"},
			{"BadState", job.Query{State: "sleeping"}, "state"},
			{"BadTag", job.Query{Tag: "no spaces"}, "tag"},
			{"BadParent", job.Query{Parent: "not-an-id"}, "parent"},
			{"EmptyRange", job.Query{CreatedAfter: at(3), CreatedBefore: at(3)}, "created_after"},
			{"NegativeLimit", job.Query{Limit: -1}, "limit"},
			{"OverLimit", job.Query{Limit: job.MaxPageSize + 1}, "limit"},
		} {
			_, err := r.e.List(ctx, tc.q)
			var ve *engine.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field || !errors.Is(err, job.ErrInvalid) {
				t.Errorf("%s: List = %v, want a validation error on %s", tc.name, err, tc.field)
			}
		}
		if _, err := r.e.List(ctx, job.Query{Cursor: "!not-a-cursor"}); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("bad cursor: List = %v, want ErrInvalid", err)
		}
	})
}
