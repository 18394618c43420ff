package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"math/bits"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/store"
)

// failingQueue fails chosen sends to the slice queue, after sending the
// messages before the failing one: a slicer killed halfway through its
// fan-out.
type failingQueue struct {
	queue.Queue
	slice string
	mu    sync.Mutex
	sends int
	// failAt is the 1-based slice-queue send that fails (0: none).
	failAt int
}

var errSendFailed = errors.New("injected: send failed")

func (q *failingQueue) Send(ctx context.Context, name string, msgs ...queue.Outgoing) error {
	if name == q.slice {
		q.mu.Lock()
		q.sends++
		fail := q.sends == q.failAt
		q.mu.Unlock()
		if fail {
			return errSendFailed
		}
	}
	return q.Queue.Send(ctx, name, msgs...)
}

// countingStore counts SetSliced calls.
type countingStore struct {
	store.Store
	mu     sync.Mutex
	sliced []int64
}

func (c *countingStore) SetSliced(ctx context.Context, id string, chunks, items int64) (*job.Job, error) {
	j, err := c.Store.SetSliced(ctx, id, chunks, items)
	if err == nil {
		c.mu.Lock()
		c.sliced = append(c.sliced, chunks)
		c.mu.Unlock()
	}
	return j, err
}

// runControlTwice runs every control task until none is left. Each task is run
// twice (a duplicate delivery); a task that fails is made visible again
// and runs once more later, as a redelivery would.
func (r *rig) runControlTwice() (tasks []job.ControlTask, failures int) {
	r.t.Helper()
	ctx := context.Background()
	name := r.e.Queues().Slice()
	for rounds := 0; ; rounds++ {
		msgs := r.receiveAll(name)
		if len(msgs) == 0 {
			return tasks, failures
		}
		if rounds > 100 {
			r.t.Fatal("control tasks do not converge")
		}
		for _, m := range msgs {
			var t job.ControlTask
			if err := json.Unmarshal(m.Body, &t); err != nil {
				r.t.Fatal(err)
			}
			tasks = append(tasks, t)
			failed := false
			for range 2 {
				if err := r.e.Control(ctx, m.Body, m.ReceiveCount); err != nil {
					failed = true
					failures++
				}
			}
			if failed {
				if err := r.be.Queue.ChangeVisibility(ctx, name, queue.VisibilityChange{Receipt: m.Receipt}); err != nil {
					r.t.Fatal(err)
				}
				continue
			}
			r.ack(name, m)
		}
	}
}

// A data space over the budget is sliced by sub-slice tasks spread over
// several invocations, on every backend, with every control task delivered
// twice and a slicer dying between its writes: each chunk index is sent,
// the totals are recorded once and exactly, and the job completes with
// exact counts.
func TestRecursiveSlicingOnEveryBackend(t *testing.T) {
	t.Parallel()
	const chunks, step, budget, fanout = 25, 10, 3, 2
	tests := []struct {
		name        string
		crashSliced int // SetSliced commits, then the slicer dies
		failSend    int // the n-th send to the slice queue fails
	}{
		{name: "duplicates"},
		{name: "crash after the totals", crashSliced: 1},
		{name: "crash in the fan-out", failSend: 2},
	}
	forEachBackend(t, func(t *testing.T, on string) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				cs := &crashStore{crashSliced: tc.crashSliced}
				counting := &countingStore{}
				fq := &failingQueue{failAt: tc.failSend}
				r := newRigOn(t, on, recomputeRegistry(t), func(c *engine.Config) {
					c.SliceBudget, c.SliceFanout, c.SendBatch = budget, fanout, 2
					counting.Store = c.Store
					cs.Store = counting
					c.Store = cs
					fq.Queue, fq.slice = c.Queue, c.Queues.Slice()
					c.Queue = fq
				})
				ctx := context.Background()
				j, err := r.e.Submit(ctx, recompute.Args{}, engine.SubmitOptions{
					Input: job.Input{Type: job.InputIDRange, Start: 0, End: chunks * step}, ChunkSize: step})
				if err != nil {
					t.Fatal(err)
				}
				tasks, failures := r.runControlTwice()
				if want := tc.crashSliced + min(tc.failSend, 1); failures < want {
					t.Errorf("%d failed control runs, want at least %d", failures, want)
				}
				sub := 0
				for _, task := range tasks {
					if task.To == 0 {
						continue
					}
					sub++
					if task.From < 0 || task.To <= task.From || task.To > chunks {
						t.Errorf("sub-slice task %+v out of [0, %d)", task, chunks)
					}
				}
				// 25 chunks at 3 per leaf: 9 leaves, at most 2 per fan-out.
				if sub < 9 {
					t.Errorf("%d sub-slice tasks, want at least 9 leaves", sub)
				}
				if got := r.job(j.ID); !got.Counters.Sliced || got.Counters.ChunksTotal != chunks || got.Counters.ItemsTotal != chunks*step {
					t.Fatalf("after slicing: %+v", got.Counters)
				}
				counting.mu.Lock()
				if len(counting.sliced) == 0 || counting.sliced[0] != chunks {
					t.Errorf("SetSliced calls %v, want totals of %d", counting.sliced, chunks)
				}
				counting.mu.Unlock()

				chq := r.e.Queues().Channel(engine.DefaultChannel)
				seen := map[int64]bool{}
				for _, m := range r.receiveAll(chq) {
					task := r.chunkTask(m.Body)
					if task.Input.Start != task.Index*step || task.Input.End != (task.Index+1)*step {
						t.Fatalf("chunk %d has input %+v", task.Index, task.Input)
					}
					seen[task.Index] = true
					if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: 1}); !v.Ack {
						t.Fatalf("verdict %+v", v)
					}
					r.ack(chq, m)
				}
				for i := int64(0); i < chunks; i++ {
					if !seen[i] {
						t.Errorf("chunk %d was never sent", i)
					}
				}
				r.drain()
				got := r.job(j.ID)
				c := got.Counters
				if got.State != job.StateSucceeded || c.ChunksTotal != chunks || c.ChunksDone != chunks || c.ItemsDone != chunks*step || c.ChunksFailed != 0 {
					t.Fatalf("job %s %+v, want succeeded with %d chunks and %d items", got.State, c, chunks, chunks*step)
				}
				if n := r.terminalCalls(j.ID); n != 1 {
					t.Errorf("terminal hook ran %d times, want 1", n)
				}
			})
		}
	})
}

// sinkQueue records the chunk tasks sent to one queue in a bitset instead of
// storing them (a million messages would only slow the test down), passes
// every other send through, and samples the heap on each send.
type sinkQueue struct {
	queue.Queue
	chunks string
	n      int64
	seen   []uint64
	dups   int64
	sent   int64 // chunk tasks in the current invocation
	ctl    int64 // control tasks in the current invocation
	peak   uint64
	ms     runtime.MemStats
}

func (q *sinkQueue) Send(ctx context.Context, name string, msgs ...queue.Outgoing) error {
	runtime.ReadMemStats(&q.ms)
	q.peak = max(q.peak, q.ms.HeapAlloc)
	if name != q.chunks {
		q.ctl += int64(len(msgs))
		return q.Queue.Send(ctx, name, msgs...)
	}
	for _, m := range msgs {
		var t struct {
			Index int64 `json:"i"`
		}
		if err := json.Unmarshal(m.Body, &t); err != nil {
			return err
		}
		if t.Index < 0 || t.Index >= q.n {
			return errors.New("chunk index out of range")
		}
		w, b := t.Index/64, uint(t.Index%64)
		if q.seen[w]&(1<<b) != 0 {
			q.dups++
		}
		q.seen[w] |= 1 << b
		q.sent++
	}
	return nil
}

func (q *sinkQueue) distinct() int64 {
	n := 0
	for _, w := range q.seen {
		n += bits.OnesCount64(w)
	}
	return int64(n)
}

// sliceStats is what slicing one data space took.
type sliceStats struct {
	invocations int
	maxChunks   int64  // most chunk tasks one invocation sent
	maxControl  int64  // most control tasks one invocation sent
	peakGrowth  uint64 // largest heap growth within one invocation
	liveGrowth  int64  // heap growth after all invocations, after a GC
}

// sliceSpace slices a data space of n chunks on the embedded backend and
// reports per-invocation work and heap use.
func sliceSpace(t *testing.T, n, budget int64, fanout int) sliceStats {
	sink := &sinkQueue{n: n, seen: make([]uint64, (n+63)/64)}
	counting := &countingStore{}
	r := newRig(t, recomputeRegistry(t), func(c *engine.Config) {
		c.SliceBudget, c.SliceFanout = budget, fanout
		sink.Queue, sink.chunks = c.Queue, c.Queues.Channel(engine.DefaultChannel)
		c.Queue = sink
		counting.Store = c.Store
		c.Store = counting
	})
	ctx := context.Background()
	j, err := r.e.Submit(ctx, recompute.Args{}, engine.SubmitOptions{
		Input: job.Input{Type: job.InputIDRange, Start: 0, End: n}, ChunkSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	var st sliceStats
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	start := ms.HeapAlloc
	name := r.e.Queues().Slice()
	for {
		msgs := r.receiveAll(name)
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			runtime.GC()
			runtime.ReadMemStats(&ms)
			base := ms.HeapAlloc
			sink.peak, sink.sent, sink.ctl = base, 0, 0
			if err := r.e.Control(ctx, m.Body, m.ReceiveCount); err != nil {
				t.Fatal(err)
			}
			r.ack(name, m)
			st.invocations++
			st.maxChunks = max(st.maxChunks, sink.sent)
			st.maxControl = max(st.maxControl, sink.ctl)
			st.peakGrowth = max(st.peakGrowth, sink.peak-base)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	st.liveGrowth = int64(ms.HeapAlloc) - int64(start)

	if got := sink.distinct(); got != n {
		t.Fatalf("%d distinct chunk indices enqueued, want %d", got, n)
	}
	if sink.dups != 0 {
		t.Errorf("%d chunk tasks sent twice without any redelivery", sink.dups)
	}
	got := r.job(j.ID)
	if !got.Counters.Sliced || got.Counters.ChunksTotal != n || got.Counters.ItemsTotal != n {
		t.Fatalf("totals %+v, want %d chunks and items", got.Counters, n)
	}
	if len(counting.sliced) != 1 {
		t.Errorf("SetSliced recorded %d times, want once", len(counting.sliced))
	}
	return st
}

// A million chunks are sliced by many invocations that each send at most
// the budget of chunk tasks and the fan-out of control tasks, every index
// is enqueued exactly once, and the slicer's heap does not grow with the
// data space: slicing 1,000,000 chunks peaks like slicing 100,000.
func TestRecursiveSlicingMillionChunks(t *testing.T) {
	if testing.Short() {
		t.Skip("slices a million chunks; skipped with -short")
	}
	if raceDetector {
		t.Skip("slices a million chunks on SQLite, some twenty times slower under the race detector: make scale runs it without")
	}
	// Not parallel: the heap is measured for the whole process.
	const budget, fanout = 10_000, 8
	const MiB = 1 << 20
	small := sliceSpace(t, 100_000, budget, fanout)
	large := sliceSpace(t, 1_000_000, budget, fanout)
	t.Logf("100k chunks: %+v", small)
	t.Logf("1M chunks:   %+v", large)
	for _, st := range []sliceStats{small, large} {
		if st.maxChunks > budget || st.maxControl > fanout {
			t.Errorf("an invocation sent %d chunk and %d control tasks, want at most %d and %d", st.maxChunks, st.maxControl, budget, fanout)
		}
		if st.peakGrowth > 64*MiB {
			t.Errorf("an invocation grew the heap by %d MiB, want at most 64", st.peakGrowth/MiB)
		}
	}
	// 1M chunks need 100 leaves of 10k, plus the first task and the inner
	// nodes of the fan-out tree.
	if large.invocations < 101 {
		t.Errorf("%d invocations for 1M chunks, want at least 101", large.invocations)
	}
	if large.peakGrowth > 2*small.peakGrowth+16*MiB {
		t.Errorf("heap peak grows with the data space: %d MiB for 1M chunks, %d MiB for 100k",
			large.peakGrowth/MiB, small.peakGrowth/MiB)
	}
	if large.liveGrowth > 16*MiB {
		t.Errorf("live heap grew by %d MiB after slicing 1M chunks", large.liveGrowth/MiB)
	}
}

// The first slice task cuts a data space over the budget into at most
// fan-out sub-slice ranges on multiples of the budget; one that fits the
// budget emits its chunks itself.
func TestSubSliceFanOutShape(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name           string
		chunks, budget int64
		fanout         int
		wantFirst      [][2]int64 // the first task's sub-slice ranges
	}{
		{"fits the budget", 10, 10, 4, nil},
		{"one level", 10, 3, 4, [][2]int64{{0, 3}, {3, 6}, {6, 9}, {9, 10}}},
		{"two levels", 100, 3, 4, [][2]int64{{0, 27}, {27, 54}, {54, 81}, {81, 100}}},
		{"exact multiple", 40, 10, 2, [][2]int64{{0, 20}, {20, 40}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, recomputeRegistry(t), func(c *engine.Config) { c.SliceBudget, c.SliceFanout = tc.budget, tc.fanout })
			ctx := context.Background()
			if _, err := r.e.Submit(ctx, recompute.Args{}, engine.SubmitOptions{
				Input: job.Input{Type: job.InputIDRange, Start: 0, End: tc.chunks}, ChunkSize: 1}); err != nil {
				t.Fatal(err)
			}
			name := r.e.Queues().Slice()
			root := r.receiveAll(name)
			if err := r.e.Control(ctx, root[0].Body, 1); err != nil {
				t.Fatal(err)
			}
			var got [][2]int64
			for _, m := range r.receiveAll(name) {
				var task job.ControlTask
				if err := json.Unmarshal(m.Body, &task); err != nil {
					t.Fatal(err)
				}
				got = append(got, [2]int64{task.From, task.To})
			}
			slices.SortFunc(got, func(a, b [2]int64) int { return int(a[0] - b[0]) })
			if len(got) != len(tc.wantFirst) {
				t.Fatalf("sub-slice ranges %v, want %v", got, tc.wantFirst)
			}
			for i := range got {
				if got[i] != tc.wantFirst[i] {
					t.Fatalf("sub-slice ranges %v, want %v", got, tc.wantFirst)
				}
			}
			if tc.wantFirst == nil {
				if n := len(r.receiveAll(r.e.Queues().Channel(engine.DefaultChannel))); int64(n) != tc.chunks {
					t.Fatalf("the first slicer sent %d chunk tasks, want all %d", n, tc.chunks)
				}
			}
		})
	}
}

// A sub-slice task of a job that is no longer running sends nothing, and a
// malformed range is poison.
func TestSubSliceOfStoppedJob(t *testing.T) {
	t.Parallel()
	r := newRig(t, recomputeRegistry(t), func(c *engine.Config) { c.SliceBudget = 2 })
	ctx := context.Background()
	j, err := r.e.Submit(ctx, recompute.Args{}, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: 10}, ChunkSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	root := r.receiveAll(r.e.Queues().Slice())
	if err := r.e.Control(ctx, root[0].Body, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := r.e.Cancel(ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if n := r.control(); n == 0 {
		t.Fatal("no sub-slice tasks were enqueued")
	}
	if n := len(r.receiveAll(r.e.Queues().Channel(engine.DefaultChannel))); n != 0 {
		t.Fatalf("sub-slices of a cancelled job sent %d chunk tasks", n)
	}
	body, _ := json.Marshal(job.ControlTask{Op: job.OpSlice, JobID: j.ID, From: 5, To: 3})
	if err := r.e.Control(ctx, body, 1); !errors.Is(err, engine.ErrPoison) {
		t.Fatalf("range [5, 3): %v, want ErrPoison", err)
	}
}
