package engine_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
)

func recomputeRegistry(t *testing.T) *engine.Registry {
	t.Helper()
	reg := engine.NewRegistry()
	if err := recompute.Register(reg); err != nil {
		t.Fatal(err)
	}
	return reg
}

func wantChecksum(start, end int64) (ids int64, sum uint64) {
	for id := start; id < end; id++ {
		sum += recompute.Checksum(id)
	}
	return end - start, sum
}

func readOutput(t *testing.T, r *rig, key string) recompute.Output {
	t.Helper()
	rc, err := r.be.Blobs.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var o recompute.Output
	if err := json.NewDecoder(rc).Decode(&o); err != nil {
		t.Fatal(err)
	}
	return o
}

// Every chunk message is delivered twice, in random order, and a worker
// dies right after its outcome write in a fifth of the first deliveries and
// right after the job's finishing transition: the counts stay exact and the
// job ends exactly once.
func TestDuplicatesRandomOrderAndCrashBetweenWrites(t *testing.T) {
	t.Parallel()
	cs := &crashStore{crashFinish: 1}
	r := newRig(t, recomputeRegistry(t), func(c *engine.Config) { cs.Store = c.Store; c.Store = cs })
	ctx := context.Background()
	crashed := map[int64]bool{}
	rng := rand.New(rand.NewPCG(7, 7))
	cs.crashRecord = func(_ string, index int64, a job.Attempt) bool {
		if a.Outcome != job.OutcomeSucceeded || crashed[index] || rng.IntN(5) != 0 {
			return false
		}
		crashed[index] = true
		return true
	}

	const chunks, step = 300, 100
	j, err := r.e.Submit(ctx, recompute.Args{}, engine.SubmitOptions{Input: job.Input{Type: job.InputIDRange, Start: 0, End: chunks * step}, ChunkSize: step})
	if err != nil {
		t.Fatal(err)
	}
	if n := r.control(); n != 1 {
		t.Fatalf("ran %d control tasks, want the slice task", n)
	}
	chq := r.e.Queues().Channel(engine.DefaultChannel)
	msgs := r.receiveAll(chq)
	if len(msgs) != chunks {
		t.Fatalf("sliced %d chunk tasks, want %d", len(msgs), chunks)
	}
	bodies := make([][]byte, 0, 2*len(msgs))
	for _, m := range msgs {
		bodies = append(bodies, m.Body, m.Body)
		r.ack(chq, m)
	}
	rng.Shuffle(len(bodies), func(a, b int) { bodies[a], bodies[b] = bodies[b], bodies[a] })

	deliveries := 0
	for len(bodies) > 0 {
		b := bodies[0]
		bodies = bodies[1:]
		deliveries++
		v := r.e.ProcessChunk(ctx, b, engine.Delivery{ReceiveCount: 1})
		if !v.Ack {
			// Not acknowledged: the queue would deliver it again later.
			bodies = append(bodies, b)
		}
		if deliveries > 10*chunks {
			t.Fatal("deliveries do not converge")
		}
	}
	if len(crashed) == 0 {
		t.Fatal("no crash was injected")
	}

	got := r.job(j.ID)
	if got.State != job.StateFinishing {
		t.Fatalf("state %s, want finishing: the crash after the transition lost the finish task", got.State)
	}
	// The sweeper re-drives a job stuck in finishing once it is stale.
	r.clk.Advance(6 * time.Minute)
	rep, err := r.e.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redriven != 1 {
		t.Fatalf("sweep re-drove %d jobs, want 1", rep.Redriven)
	}
	r.control()

	got = r.job(j.ID)
	c := got.Counters
	if got.State != job.StateSucceeded || c.ChunksTotal != chunks || c.ChunksDone != chunks || c.ChunksFailed != 0 || c.ItemsDone != chunks*step || c.Retries != 0 {
		t.Fatalf("job %s counters %+v, want %d chunks and %d items done exactly", got.State, c, chunks, chunks*step)
	}
	if n := r.terminalCalls(j.ID); n != 1 {
		t.Fatalf("job reached a terminal state %d times, want 1", n)
	}
	ids, sum := wantChecksum(0, chunks*step)
	if o := readOutput(t, r, got.Result); o.IDs != ids || o.Checksum != sum || o.Chunks != chunks {
		t.Fatalf("result %+v, want %d ids checksum %d over %d chunks", o, ids, sum, chunks)
	}
	page, err := r.e.Chunks(ctx, j.ID, job.ChunkQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range page.Chunks {
		if len(ch.Attempts) != 1 {
			t.Fatalf("chunk %d has %d recorded attempts, want 1 (duplicates record nothing)", ch.Index, len(ch.Attempts))
		}
	}
}

// blockingSlicer emits its chunks in groups and lets the test process every
// chunk sent so far before it emits more, so all chunks complete before
// slicing has ended.
type blockingArgs struct{ Chunks int64 }

func (blockingArgs) Kind() string { return "blocking" }

type blockingKind struct {
	afterGroup func()
}

func (k *blockingKind) Slice(ctx context.Context, j *engine.Job[blockingArgs], emit func(job.ChunkInput, int64) error) error {
	for i := int64(0); i < j.Args.Chunks; i++ {
		if err := emit(job.ChunkInput{Start: i, End: i + 1}, 1); err != nil {
			return err
		}
		if (i+1)%10 == 0 && k.afterGroup != nil {
			k.afterGroup()
		}
	}
	return nil
}

func (k *blockingKind) Process(ctx context.Context, c *engine.Chunk[blockingArgs]) error { return nil }

func TestChunksCompleteBeforeSlicingEnds(t *testing.T) {
	t.Parallel()
	for _, crashSliced := range []int{0, 1} {
		kind := &blockingKind{}
		reg := engine.NewRegistry()
		engine.MustRegister[blockingArgs](reg, kind, engine.Options{})
		cs := &crashStore{crashSliced: crashSliced}
		r := newRig(t, reg, func(c *engine.Config) { cs.Store = c.Store; c.Store = cs; c.SendBatch = 10 })
		ctx := context.Background()
		chq := r.e.Queues().Channel(engine.DefaultChannel)
		processed := 0
		kind.afterGroup = func() {
			for _, m := range r.receiveAll(chq) {
				if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: m.ReceiveCount}); !v.Ack {
					t.Fatalf("chunk not acked: %+v", v)
				}
				r.ack(chq, m)
				processed++
			}
		}
		j, err := r.e.Submit(ctx, blockingArgs{Chunks: 50}, engine.SubmitOptions{Input: job.Input{Type: job.InputCustom}})
		if err != nil {
			t.Fatal(err)
		}
		msgs := r.receiveAll(r.e.Queues().Slice())
		if len(msgs) != 1 {
			t.Fatalf("%d slice tasks", len(msgs))
		}
		err = r.e.Control(ctx, msgs[0].Body, 1)
		if crashSliced > 0 {
			// The slicer died after recording its totals: the slice task
			// comes back and runs again.
			if err == nil {
				t.Fatal("injected crash not reported")
			}
			if got := r.job(j.ID); got.State != job.StateRunning || !got.Counters.Sliced || got.Counters.ChunksDone != 50 {
				t.Fatalf("after crash: %s %+v", got.State, got.Counters)
			}
			if err := r.e.Control(ctx, msgs[0].Body, 2); err != nil {
				t.Fatal(err)
			}
		} else if err != nil {
			t.Fatal(err)
		}
		r.ack(r.e.Queues().Slice(), msgs[0])
		if processed != 50 {
			t.Fatalf("processed %d chunks during slicing, want 50", processed)
		}
		if n := r.control(); n != 1 {
			t.Fatalf("%d finish tasks, want 1", n)
		}
		got := r.job(j.ID)
		if got.State != job.StateSucceeded || got.Counters.ChunksDone != 50 || got.Counters.ChunksTotal != 50 || got.Counters.ItemsDone != 50 {
			t.Fatalf("crashSliced=%d: job %s %+v", crashSliced, got.State, got.Counters)
		}
		if n := r.terminalCalls(j.ID); n != 1 {
			t.Fatalf("terminal %d times", n)
		}
		// Any chunk task still queued is acknowledged as a duplicate.
		for _, m := range r.receiveAll(chq) {
			if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: 1}); !v.Ack || v.Outcome != "" {
				t.Fatalf("late duplicate: %+v", v)
			}
		}
		if got := r.job(j.ID); got.Counters.ChunksDone != 50 {
			t.Fatalf("late duplicates changed counts: %+v", got.Counters)
		}
	}
}

// A slicer with a small budget hands the rest of the data space on to
// sub-slice tasks (a seekable plan: ids) or continuation tasks (a kind's own
// Slice); the totals and every chunk come out exactly once.
func TestSlicingHandsOnWhenBudgetIsUsed(t *testing.T) {
	t.Parallel()
	for _, custom := range []bool{false, true} {
		kind := &blockingKind{}
		reg := engine.NewRegistry()
		engine.MustRegister[blockingArgs](reg, kind, engine.Options{})
		r := newRig(t, reg, func(c *engine.Config) { c.SliceBudget = 7; c.SendBatch = 3 })
		ctx := context.Background()
		in := job.Input{Type: job.InputCustom}
		if !custom {
			in = job.Input{Type: job.InputIDRange, Start: 0, End: 50}
		}
		j, err := r.e.Submit(ctx, blockingArgs{Chunks: 50}, engine.SubmitOptions{Input: in, ChunkSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		invocations := 0
		for {
			n := r.control()
			if n == 0 {
				break
			}
			invocations += n
		}
		// 50 chunks at 7 per invocation: 8 slice invocations for a kind's
		// own Slice (a chain of continuations); for ids the first task
		// spreads the 8 ranges over sub-slice tasks (recursive slicing).
		want := 8
		if !custom {
			want = 9
		}
		if invocations != want {
			t.Fatalf("custom=%v: %d slice invocations, want %d", custom, invocations, want)
		}
		chq := r.e.Queues().Channel(engine.DefaultChannel)
		seen := map[int64]bool{}
		for _, m := range r.receiveAll(chq) {
			task := r.chunkTask(m.Body)
			if seen[task.Index] || task.Input.Start != task.Index {
				t.Fatalf("custom=%v: chunk %d sent twice or with input %+v", custom, task.Index, task.Input)
			}
			seen[task.Index] = true
			if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: 1}); !v.Ack {
				t.Fatalf("verdict %+v", v)
			}
		}
		if n := r.control(); n != 1 {
			t.Fatalf("custom=%v: %d finish tasks, want 1", custom, n)
		}
		got := r.job(j.ID)
		if len(seen) != 50 || got.State != job.StateSucceeded || got.Counters.ChunksTotal != 50 || got.Counters.ItemsTotal != 50 || got.Counters.ItemsDone != 50 {
			t.Fatalf("custom=%v: %d chunks sent; job %s %+v", custom, len(seen), got.State, got.Counters)
		}
	}
}
