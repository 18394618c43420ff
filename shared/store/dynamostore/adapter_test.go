package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
	"github.com/slicework/slicework/shared/store/dynamostore"
)

// forEach runs fn as a parallel subtest per emulator.
func forEach(t *testing.T, fn func(t *testing.T, k emulator.Kind)) {
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			fn(t, k)
		})
	}
}

func newRunningJob(kind string) *job.Job {
	now := time.Now().UTC()
	return &job.Job{ID: job.NewID(now), Kind: kind, Channel: "default", State: job.StateRunning, CreatedAt: now, UpdatedAt: now, MaxAttempts: 3}
}

func success(worker string, items int64) job.Attempt {
	return job.Attempt{Outcome: job.OutcomeSucceeded, Worker: worker, Started: time.Now(), Duration: 1234567 * time.Nanosecond, Items: items}
}

var errCrash = errors.New("simulated crash")

// rawAcct reads a job's accounting item as stored.
func rawAcct(t *testing.T, c *dynamodb.Client, table, id string) map[string]types.AttributeValue {
	t.Helper()
	out, err := c.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "J#" + id}, "SK": &types.AttributeValueMemberS{Value: "A"}}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func openSegments(item map[string]types.AttributeValue) []string {
	m, _ := item["o"].(*types.AttributeValueMemberM)
	if m == nil {
		return nil
	}
	var out []string
	for k := range m.Value {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func num(item map[string]types.AttributeValue, name string) int64 {
	n, _ := item[name].(*types.AttributeValueMemberN)
	if n == nil {
		return 0
	}
	v, _ := strconv.ParseInt(n.Value, 10, 64)
	return v
}

// TestCrashBetweenWrites stops a store between two of its writes, where a
// process could die, and checks that counters stay exact and that Settle
// (what the engine calls on the redelivered duplicate) repairs the rest.
func TestCrashBetweenWrites(t *testing.T) {
	forEach(t, func(t *testing.T, k emulator.Kind) {
		ctx := context.Background()
		c := newClient(t, k)
		s := dynamostore.New(c, testTable)
		crashAt := ""
		var mu sync.Mutex
		crash := func(point string) {
			mu.Lock()
			defer mu.Unlock()
			crashAt = point
		}
		dynamostore.SetCrash(s, func(point string) error {
			mu.Lock()
			defer mu.Unlock()
			if point == crashAt {
				return fmt.Errorf("%s: %w", point, errCrash)
			}
			return nil
		})
		j := newRunningJob("dynamostore.crash." + string(k))
		if _, err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		record := func(i int64, a job.Attempt, retryAt *time.Time) (store.Recorded, error) {
			var task *job.ChunkTask
			if retryAt != nil {
				task = &job.ChunkTask{JobID: j.ID, Kind: j.Kind, Index: i}
			}
			return s.RecordAttempt(ctx, j.ID, i, a, retryAt, task)
		}
		counters := func() job.Counters {
			t.Helper()
			got, err := s.GetJob(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			return got.Counters
		}

		// Segment 0: the 16th chunk fills it and the worker dies before the
		// roll-up.
		for i := range int64(15) {
			if _, err := record(i, success("w", 2), nil); err != nil {
				t.Fatal(err)
			}
		}
		crash("rollup")
		if _, err := record(15, success("w", 2), nil); !errors.Is(err, errCrash) {
			t.Fatalf("RecordAttempt(15) = %v, want the crash", err)
		}
		crash("")
		want := job.Counters{ChunksDone: 16, ItemsDone: 32}
		if got := counters(); got != want {
			t.Errorf("counters after a crash before the roll-up = %+v, want %+v", got, want)
		}
		if open := openSegments(rawAcct(t, c, testTable, j.ID)); !slices.Equal(open, []string{"0"}) {
			t.Fatalf("open segments after the crash = %v, want [0] (not rolled up)", open)
		}
		// The redelivery finds the chunk accounted; the engine settles.
		if r, err := record(15, success("w2", 2), nil); err != nil || r.Applied {
			t.Fatalf("redelivered chunk 15 = %+v, %v; want not applied", r, err)
		}
		for range 2 {
			got, err := s.Settle(ctx, j.ID, 15)
			if err != nil {
				t.Fatal(err)
			}
			if got.Counters != want {
				t.Errorf("Settle counters = %+v, want %+v", got.Counters, want)
			}
		}
		acct := rawAcct(t, c, testTable, j.ID)
		if open := openSegments(acct); len(open) != 0 || num(acct, "cd") != 16 || num(acct, "idn") != 32 || num(acct, "rv") != 1 {
			t.Errorf("accounting after Settle: open %v, cd %d, idn %d, rv %d; want rolled up once", open, num(acct, "cd"), num(acct, "idn"), num(acct, "rv"))
		}

		// Chunk 16 was parked, then succeeds, and the worker dies before
		// clearing the record's parking.
		retryAt := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
		retry := job.Attempt{Outcome: job.OutcomeRetry, Worker: "w", Started: time.Now(), Error: "later", RetryAfter: 24 * time.Hour}
		if _, err := record(16, retry, &retryAt); err != nil {
			t.Fatal(err)
		}
		crash("unpark")
		if _, err := record(16, success("w", 5), nil); !errors.Is(err, errCrash) {
			t.Fatalf("RecordAttempt(16) = %v, want the crash", err)
		}
		crash("")
		ch, err := s.GetChunk(ctx, j.ID, 16)
		if err != nil {
			t.Fatal(err)
		}
		if ch.State != job.ChunkSucceeded || ch.RetryAt != nil || ch.Task != nil || len(ch.Attempts) != 2 || ch.Attempts[1].N != 2 {
			t.Errorf("chunk 16 after the crash: %+v; want succeeded, unparked, 2 attempts", ch)
		}
		recordItem := func() map[string]types.AttributeValue {
			t.Helper()
			rec, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(testTable), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{"PK": &types.AttributeValueMemberS{Value: "J#" + j.ID}, "SK": &types.AttributeValueMemberS{Value: fmt.Sprintf("C#%019d", 16)}}})
			if err != nil {
				t.Fatal(err)
			}
			return rec.Item
		}
		if _, ok := recordItem()["ra"]; !ok {
			t.Fatalf("record of chunk 16 lost its parking before any repair: the crash point did not hold")
		}
		if err := s.ReleaseRetry(ctx, j.ID, 16); !errors.Is(err, job.ErrConflict) {
			t.Errorf("ReleaseRetry(terminal chunk) = %v, want ErrConflict", err)
		}
		if _, err := s.Settle(ctx, j.ID, 16); err != nil {
			t.Fatal(err)
		}
		rec := recordItem()
		for _, name := range []string{"ra", "task", "dpk", "dsk"} {
			if _, ok := rec[name]; ok {
				t.Errorf("record of chunk 16 still has %s after Settle", name)
			}
		}
		due, err := s.DueRetries(ctx, time.Now(), job.MaxPageSize)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range due {
			if d.JobID == j.ID {
				t.Errorf("DueRetries returned terminal chunk %d", d.Index)
			}
		}

		// Chunks finish before slicing ends, and the slicer dies between
		// SetSliced's transaction and the roll-up of the last segment.
		for i := int64(17); i < 20; i++ {
			if _, err := record(i, success("w", 1), nil); err != nil {
				t.Fatal(err)
			}
		}
		crash("sliced")
		if _, err := s.SetSliced(ctx, j.ID, 20, 0); !errors.Is(err, errCrash) {
			t.Fatalf("SetSliced = %v, want the crash", err)
		}
		crash("")
		want = job.Counters{Sliced: true, ChunksTotal: 20, ChunksDone: 20, ItemsDone: 32 + 5 + 3, Retries: 1}
		if got := counters(); got != want || !got.Accounted() {
			t.Errorf("counters after a crash in SetSliced = %+v, want %+v, accounted", got, want)
		}
		if got, err := s.SetSliced(ctx, j.ID, 20, 0); err != nil || got.Counters != want {
			t.Errorf("SetSliced again = %+v, %v", got, err)
		}
		if got, err := s.Settle(ctx, j.ID, 19); err != nil || got.Counters != want {
			t.Errorf("Settle(19) = %+v, %v", got, err)
		}
		if open := openSegments(rawAcct(t, c, testTable, j.ID)); len(open) != 0 {
			t.Errorf("open segments at the end = %v, want none", open)
		}
	})
}

// opStats counts the DynamoDB calls of one client, attributing writes to
// items, and sums the write capacity the emulator reports and the one
// computed from item sizes, by kind of write.
type opStats struct {
	mu          sync.Mutex
	jobPK       string
	calls       map[string]int
	jobWrites   int // applied writes of the job's own items (job and accounting)
	jobTried    int // the same, cancelled and failed ones included
	segWrites   int // writes of its segments (failed conditions included)
	reportedWCU float64
	computed    map[string]*cost // by kind of write
	maxSegment  int              // largest segment item seen (bytes)
	exprs       []string
}

// cost is a number of writes and their write units.
type cost struct {
	n   int
	wcu float64
}

func newOpStats(jobPK string) *opStats {
	return &opStats{jobPK: jobPK, calls: map[string]int{}, computed: map[string]*cost{}}
}

func (st *opStats) charge(kind string, wcu float64) {
	c := st.computed[kind]
	if c == nil {
		c = &cost{}
		st.computed[kind] = c
	}
	c.n++
	c.wcu += wcu
}

func (st *opStats) option() func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
			return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("opStats",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					st.before(in.Parameters)
					out, md, err := next.HandleInitialize(ctx, in)
					st.after(awsmiddleware.GetOperationName(ctx), in.Parameters, out.Result, err)
					return out, md, err
				}), middleware.After)
		})
	}
}

// before asks for consumed capacity and notes every expression string.
func (st *opStats) before(params any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	add := func(ss ...*string) {
		for _, s := range ss {
			if s != nil {
				st.exprs = append(st.exprs, *s)
			}
		}
	}
	switch p := params.(type) {
	case *dynamodb.UpdateItemInput:
		p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		add(p.UpdateExpression, p.ConditionExpression)
	case *dynamodb.PutItemInput:
		p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		add(p.ConditionExpression)
	case *dynamodb.TransactWriteItemsInput:
		p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
		for _, it := range p.TransactItems {
			if u := it.Update; u != nil {
				add(u.UpdateExpression, u.ConditionExpression)
			}
			if u := it.Put; u != nil {
				add(u.ConditionExpression)
			}
			if u := it.ConditionCheck; u != nil {
				add(u.ConditionExpression)
			}
		}
	case *dynamodb.QueryInput:
		add(p.KeyConditionExpression, p.FilterExpression, p.ProjectionExpression)
	case *dynamodb.BatchGetItemInput:
		for _, ka := range p.RequestItems {
			add(ka.ProjectionExpression)
		}
	}
}

func (st *opStats) after(op string, params, result any, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.calls[op]++
	target := func(key map[string]types.AttributeValue) {
		pk := getPK(key)
		switch sk := key["SK"].(*types.AttributeValueMemberS).Value; {
		case pk == st.jobPK && (sk == "J" || sk == "A"):
			st.jobTried++
			if err == nil {
				st.jobWrites++
			}
		case strings.HasPrefix(pk, st.jobPK+"#G#"):
			st.segWrites++
		}
	}
	var ccf *types.ConditionalCheckFailedException
	switch p := params.(type) {
	case *dynamodb.UpdateItemInput:
		target(p.Key)
		switch out, _ := result.(*dynamodb.UpdateItemOutput); {
		case out != nil:
			if out.ConsumedCapacity != nil {
				st.reportedWCU += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
			}
			if size := itemSize(out.Attributes); p.ReturnValues == types.ReturnValueAllNew && strings.HasPrefix(getPK(p.Key), st.jobPK+"#G#") {
				// The fast path: the item after the write is the larger one.
				st.maxSegment = max(st.maxSegment, size)
				st.charge("fast path", units(size))
			} else {
				st.charge("other update", units(size)) // items here are under 1 KB
			}
		case errors.As(err, &ccf):
			// A failed condition still costs the item's write units.
			st.charge("failed condition", units(itemSize(ccf.Item)))
		}
	case *dynamodb.PutItemInput:
		target(p.Item)
		if out, _ := result.(*dynamodb.PutItemOutput); out != nil && out.ConsumedCapacity != nil {
			st.reportedWCU += aws.ToFloat64(out.ConsumedCapacity.CapacityUnits)
		}
		st.charge("other update", units(itemSize(p.Item)))
	case *dynamodb.TransactWriteItemsInput:
		var wcu float64
		for _, it := range p.TransactItems {
			switch {
			case it.Update != nil:
				target(it.Update.Key)
				wcu += 2 // every item here is under 1 KB: 2 units per item in a transaction
			case it.Put != nil:
				target(it.Put.Item)
				wcu += 2 * units(itemSize(it.Put.Item))
			}
		}
		if err != nil {
			st.charge("cancelled transaction", wcu)
		} else {
			st.charge("transaction", wcu)
		}
		if out, _ := result.(*dynamodb.TransactWriteItemsOutput); out != nil {
			for _, cc := range out.ConsumedCapacity {
				st.reportedWCU += aws.ToFloat64(cc.CapacityUnits)
			}
		}
	}
}

func getPK(key map[string]types.AttributeValue) string {
	s, _ := key["PK"].(*types.AttributeValueMemberS)
	if s == nil {
		return ""
	}
	return s.Value
}

// units is the write units of an item of size bytes (at least one).
func units(size int) float64 { return max(1, math.Ceil(float64(size)/1024)) }

// itemSize is an item's size as DynamoDB bills it: attribute names plus
// values (numbers: one byte per two significant digits plus one).
func itemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + valueSize(v)
	}
	return n
}

func valueSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		digits := len(strings.Trim(strings.TrimLeft(strings.ReplaceAll(v.Value, "-", ""), "0"), "."))
		return (digits+1)/2 + 1
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += valueSize(e) + 1
		}
		return n
	}
	return 0
}

// TestJobItemWritesPerChunk records a 1,000-chunk job from 16 goroutines,
// every chunk delivered twice, and checks that the job's own items are
// written O(chunks/16) times, not per chunk. It logs the DynamoDB calls and
// write units per successful chunk, as the emulator reports them and as
// computed from item sizes.
func TestJobItemWritesPerChunk(t *testing.T) {
	forEach(t, func(t *testing.T, k emulator.Kind) {
		ctx := context.Background()
		const (
			chunks  = 1000
			workers = 16
		)
		j := newRunningJob("dynamostore.writes." + string(k))
		stats := newOpStats("J#" + j.ID)
		table := testTable
		if k == emulator.Moto {
			table = freshTable(t, newClient(t, k))
		}
		s := dynamostore.New(newClient(t, k, stats.option()), table)
		if _, err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		ops := make([]int64, 0, 2*chunks)
		for i := range int64(chunks) {
			ops = append(ops, i, i)
		}
		rand.Shuffle(len(ops), func(a, b int) { ops[a], ops[b] = ops[b], ops[a] })
		applied := make([]int, chunks)
		var mu sync.Mutex
		next := make(chan int64)
		var wg sync.WaitGroup
		start := time.Now()
		for w := range workers {
			wg.Go(func() {
				// Lambda workers are host:pid, like the engine's default.
				worker := fmt.Sprintf("169.254.%d.%d:%d", 10+w, 100+w, 7+w)
				for i := range next {
					r, err := s.RecordAttempt(ctx, j.ID, i, success(worker, i%7+1), nil, nil)
					if err != nil {
						t.Errorf("RecordAttempt(%d): %v", i, err)
						continue
					}
					if r.Applied {
						mu.Lock()
						applied[i]++
						mu.Unlock()
					}
				}
			})
		}
		for _, i := range ops {
			next <- i
		}
		close(next)
		wg.Wait()
		elapsed := time.Since(start)
		var items int64
		for i, n := range applied {
			if n != 1 {
				t.Errorf("chunk %d applied %d times", i, n)
			}
			items += int64(i%7 + 1)
		}
		stats.mu.Lock()
		jobWrites, jobTried, segWrites := stats.jobWrites, stats.jobTried, stats.segWrites
		calls := 0
		for _, n := range stats.calls {
			calls += n
		}
		callsByOp := fmt.Sprint(stats.calls)
		var computed float64
		var breakdown []string
		for _, kind := range slices.Sorted(maps.Keys(stats.computed)) {
			c := stats.computed[kind]
			computed += c.wcu
			breakdown = append(breakdown, fmt.Sprintf("%s %d×=%.0f", kind, c.n, c.wcu))
		}
		reported, maxSeg := stats.reportedWCU, stats.maxSegment
		fast := stats.computed["fast path"]
		stats.mu.Unlock()

		got, err := s.SetSliced(ctx, j.ID, chunks, items)
		if err != nil {
			t.Fatal(err)
		}
		want := job.Counters{Sliced: true, ChunksTotal: chunks, ItemsTotal: items, ChunksDone: chunks, ItemsDone: items}
		if got.Counters != want || !got.Counters.Accounted() {
			t.Errorf("counters = %+v, want %+v", got.Counters, want)
		}
		segments := (chunks + dynamostore.SegmentSize - 1) / dynamostore.SegmentSize
		// CreateJob (two items), then per segment one registration and one
		// roll-up.
		if limit := 2 + 2*segments; jobWrites > limit {
			t.Errorf("the job's items were written %d times for %d chunks, want at most %d (two per segment of %d)",
				jobWrites, chunks, limit, dynamostore.SegmentSize)
		}
		if acct := rawAcct(t, newClient(t, k), table, j.ID); len(openSegments(acct)) != 0 {
			t.Errorf("open segments after every chunk and SetSliced: %v", openSegments(acct))
		}
		if fast == nil || fast.wcu != float64(fast.n) || maxSeg > 1024 {
			t.Errorf("fast-path writes %+v, largest segment %d bytes: want one write unit each (segments under 1 KB)", fast, maxSeg)
		}
		t.Logf("%s: %d chunks ×2 deliveries by %d goroutines in %v: %d DynamoDB calls (%.2f per successful chunk) %s; "+
			"job+accounting item writes %d applied, %d tried (%.3f per chunk); segment writes %d; "+
			"WCU per successful chunk: emulator-reported %.3f, computed from item sizes %.3f [%s]; largest segment item %d bytes",
			k, chunks, workers, elapsed.Round(time.Millisecond), calls, float64(calls)/chunks, callsByOp,
			jobWrites, jobTried, float64(jobWrites)/chunks, segWrites, reported/chunks, computed/chunks, strings.Join(breakdown, ", "), maxSeg)
	})
}

// TestListPlans covers the listings the suite cannot run on a shared
// table: every job (merged over the state partitions) and the sweeper's
// scheduled-and-due query, through the Due index and through its fallback.
func TestListPlans(t *testing.T) {
	forEach(t, func(t *testing.T, k emulator.Kind) {
		ctx := context.Background()
		c := newClient(t, k)
		s := dynamostore.New(c, freshTable(t, c))
		base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
		var all []*job.Job
		for i := range 24 {
			created := base.Add(time.Duration(i) * time.Second)
			j := &job.Job{ID: job.NewID(created), Kind: fmt.Sprintf("kind-%d", i%3), State: job.AllStates[i%len(job.AllStates)],
				CreatedAt: created, UpdatedAt: created}
			if i%2 == 0 {
				r := base.Add(time.Duration(i) * time.Minute)
				j.RunAt = &r
			}
			got, err := s.CreateJob(ctx, j)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, got)
		}
		// One job enters the schedule by a transition that keeps its RunAt,
		// another leaves it.
		moved := map[string]job.State{}
		for _, j := range all {
			switch {
			case j.State == job.StateQueued && j.RunAt != nil && len(moved) == 0:
				moved[j.ID] = job.StateScheduled
			case j.State == job.StateScheduled && j.RunAt != nil && len(moved) == 1:
				moved[j.ID] = job.StateQueued
			}
		}
		for i, j := range all {
			if to, ok := moved[j.ID]; ok {
				got, err := s.Transition(ctx, j.ID, []job.State{j.State}, to, store.Patch{})
				if err != nil {
					t.Fatal(err)
				}
				all[i] = got
			}
		}
		if len(moved) != 2 {
			t.Fatalf("test bug: moved %v", moved)
		}
		slices.SortFunc(all, func(a, b *job.Job) int { return strings.Compare(b.ID, a.ID) })
		due := base.Add(30 * time.Minute)
		for _, tc := range []struct {
			name   string
			q      job.Query
			dueCap int
		}{
			{"All", job.Query{}, 0},
			{"AllCreatedBetween", job.Query{CreatedAfter: base.Add(5 * time.Second), CreatedBefore: base.Add(20 * time.Second)}, 0},
			{"AllUpdatedBefore", job.Query{UpdatedBefore: base.Add(10 * time.Second)}, 0},
			{"ScheduledDue", job.Query{State: job.StateScheduled, RunAtBefore: due}, 0},
			{"ScheduledDueKind", job.Query{State: job.StateScheduled, RunAtBefore: due, Kind: "kind-1"}, 0},
			{"ScheduledDueFallback", job.Query{State: job.StateScheduled, RunAtBefore: due}, 1},
			{"TerminalState", job.Query{State: job.StateSucceeded}, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.dueCap > 0 {
					dynamostore.SetDueCap(s, tc.dueCap)
					defer dynamostore.SetDueCap(s, 2000)
				}
				var want []string
				for _, j := range all {
					if matchesQuery(tc.q, j) {
						want = append(want, j.ID)
					}
				}
				if len(want) == 0 {
					t.Fatalf("test bug: %s selects nothing", tc.name)
				}
				for _, limit := range []int{1, 3, 1000} {
					q := tc.q
					q.Limit = limit
					var got []string
					for range len(all) + 2 {
						page, err := s.ListJobs(ctx, q)
						if err != nil {
							t.Fatal(err)
						}
						for _, j := range page.Jobs {
							got = append(got, j.ID)
						}
						if q.Cursor = page.Next; q.Cursor == "" {
							break
						}
					}
					if d := cmp.Diff(want, got); d != "" {
						t.Errorf("limit %d (-want +got):\n%s", limit, d)
					}
				}
			})
		}
	})
}

func matchesQuery(q job.Query, j *job.Job) bool {
	switch {
	case q.Kind != "" && j.Kind != q.Kind,
		q.State != "" && j.State != q.State,
		!q.CreatedAfter.IsZero() && j.CreatedAt.Before(q.CreatedAfter),
		!q.CreatedBefore.IsZero() && !j.CreatedAt.Before(q.CreatedBefore),
		!q.RunAtBefore.IsZero() && (j.RunAt == nil || j.RunAt.After(q.RunAtBefore)),
		!q.UpdatedBefore.IsZero() && !j.UpdatedAt.Before(q.UpdatedBefore):
		return false
	}
	return true
}

// TestNoDataInExpressions drives every method with kinds, tags and keys
// that look like expression syntax and checks that none of them reaches an
// expression string: they travel only as placeholder values and keys.
func TestNoDataInExpressions(t *testing.T) {
	forEach(t, func(t *testing.T, k emulator.Kind) {
		ctx := context.Background()
		const marker = "ZQXMARK"
		stats := newOpStats("")
		s := dynamostore.New(newClient(t, k, stats.option()), testTable)
		u := strconv.FormatInt(time.Now().UnixNano(), 36)
		j := newRunningJob(marker + "kind) OR attribute_exists(PK) OR (#0 = :0" + u)
		j.Tags = []string{marker + "tag, :1 #1" + u}
		j.UniqueKey = marker + "key\" ; DROP" + u
		if _, err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		dup := newRunningJob(j.Kind)
		dup.UniqueKey = j.UniqueKey
		if _, err := s.CreateJob(ctx, dup); !errors.Is(err, job.ErrDuplicate) {
			t.Errorf("duplicate unique key: %v", err)
		}
		worker := marker + "worker|with|bars"
		for i := range int64(17) {
			a := success(worker, 1)
			if i == 3 {
				a = job.Attempt{Outcome: job.OutcomeFailed, Worker: worker, Started: time.Now(), Error: marker + "err"}
			}
			if _, err := s.RecordAttempt(ctx, j.ID, i, a, nil, nil); err != nil {
				t.Fatal(err)
			}
		}
		retryAt := time.Now().Add(time.Hour)
		if _, err := s.RecordAttempt(ctx, j.ID, 20, job.Attempt{Outcome: job.OutcomeRetry, Worker: worker, Started: time.Now()}, &retryAt,
			&job.ChunkTask{JobID: j.ID, Kind: j.Kind, Index: 20}); err != nil {
			t.Fatal(err)
		}
		c, err := s.GetChunk(ctx, j.ID, 5)
		if err != nil || c.Attempts[0].Worker != worker {
			t.Errorf("GetChunk = %+v, %v; want the worker back", c, err)
		}
		for _, q := range []job.Query{{Kind: j.Kind}, {Tag: j.Tags[0]}, {Tag: j.Tags[0], Kind: j.Kind}, {State: job.StateRunning, Kind: j.Kind}} {
			page, err := s.ListJobs(ctx, q)
			if err != nil || len(page.Jobs) != 1 || page.Jobs[0].ID != j.ID {
				t.Errorf("ListJobs(%+v) = %d jobs, %v; want the job", q, len(page.Jobs), err)
			}
		}
		if _, err := s.ListChunks(ctx, j.ID, job.ChunkQuery{}); err != nil {
			t.Fatal(err)
		}
		if err := s.ReleaseRetry(ctx, j.ID, 20); err != nil {
			t.Fatal(err)
		}
		if _, err := s.SetSliced(ctx, j.ID, 21, 21); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Transition(ctx, j.ID, []job.State{job.StateRunning}, job.StateFinishing, store.Patch{}); err != nil {
			t.Fatal(err)
		}
		stats.mu.Lock()
		defer stats.mu.Unlock()
		if len(stats.exprs) < 20 {
			t.Fatalf("only %d expressions seen", len(stats.exprs))
		}
		for _, e := range stats.exprs {
			if strings.Contains(e, marker) || strings.Contains(e, j.ID) {
				t.Errorf("expression carries data: %q", e)
			}
		}
	})
}
