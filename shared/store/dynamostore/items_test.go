package dynamostore

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/job"
)

func TestRunEntry(t *testing.T) {
	t.Parallel()
	started := time.Date(2031, 5, 6, 7, 8, 9, 123000000, time.UTC)
	for _, tc := range []struct {
		name    string
		a       job.Attempt
		updated time.Time
	}{
		{"Typical", job.Attempt{Worker: "169.254.76.1:8", Started: started, Duration: 987654321, Items: 42}, started.Add(time.Second)},
		{"Zero", job.Attempt{Started: started}, started},
		{"WorkerWithBars", job.Attempt{Worker: "a|b||c ✓", Started: started, Duration: time.Hour, Items: 1 << 40}, started.Add(time.Hour)},
		{"UpdatedBeforeStarted", job.Attempt{Worker: "w", Started: started, Duration: 1}, started.Add(-time.Minute)},
		{"BeforeEpoch", job.Attempt{Worker: "w", Started: time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC), Items: 3}, started},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, updated, err := decodeRun(encodeRun(tc.a, tc.updated))
			if err != nil {
				t.Fatal(err)
			}
			want := tc.a
			want.Outcome = job.OutcomeSucceeded
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("attempt (-want +got):\n%s", d)
			}
			if !updated.Equal(tc.updated) {
				t.Errorf("updated = %v, want %v", updated, tc.updated)
			}
		})
	}
	for _, bad := range []string{"", "a|b|c|d", "zz|!|0|0|w", "1|2|3|4"} {
		if _, _, err := decodeRun(bad); err == nil {
			t.Errorf("decodeRun(%q) succeeded", bad)
		}
	}
}

func TestCursors(t *testing.T) {
	t.Parallel()
	lsk := listKey(time.UnixMilli(1234567890123), "01ID")
	if got, err := decodeJobCursor(encodeJobCursor(lsk)); err != nil || got != lsk {
		t.Errorf("job cursor round trip = %q, %v", got, err)
	}
	if got, err := decodeChunkCursor(encodeChunkCursor(77)); err != nil || got != 77 {
		t.Errorf("chunk cursor round trip = %d, %v", got, err)
	}
	for _, bad := range []string{"!!not a cursor!!", "{", "\x00\xff", "%%%%",
		encodeJobCursor("")[:0] + "bDE6", // "l1:" with nothing after
		encodeChunkCursor(1)[:2],
	} {
		if _, err := decodeJobCursor(bad); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("decodeJobCursor(%q) = %v, want ErrInvalid", bad, err)
		}
		if _, err := decodeChunkCursor(bad); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("decodeChunkCursor(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	for _, lsk := range []string{"123#id", "12345678901234#", "abcdefghijklm#id", "1234567890123_id"} {
		if _, ok := idOfListKey(lsk); ok {
			t.Errorf("idOfListKey(%q) accepted a malformed key", lsk)
		}
	}
}

func TestCeilMs(t *testing.T) {
	t.Parallel()
	base := time.UnixMilli(1000).UTC()
	for _, tc := range []struct {
		t    time.Time
		want int64
	}{
		{base, 1000},
		{base.Add(1), 1001},
		{base.Add(999999), 1001},
		{base.Add(-1), 1000},
		{base.In(time.FixedZone("X", 3600)), 1000},
	} {
		if got := ceilMs(tc.t); got != tc.want {
			t.Errorf("ceilMs(%v) = %d, want %d", tc.t, got, tc.want)
		}
	}
}

func TestSegment(t *testing.T) {
	t.Parallel()
	started := time.UnixMilli(5000)
	item := map[string]types.AttributeValue{
		AttrPK: avS("J#x#G#0"), AttrSK: avS(skSegment),
		runAttr(0):     avS(encodeRun(job.Attempt{Worker: "w", Started: started, Items: 4}, started)),
		runAttr(15):    avS(encodeRun(job.Attempt{Worker: "w", Started: started, Items: 6}, started)),
		failedAttr(3):  avN(7),
		retriesAttr(3): avN(2),
		retriesAttr(9): avN(1),
	}
	g, err := decodeSegment(item)
	if err != nil {
		t.Fatal(err)
	}
	c, err := g.counters()
	if err != nil {
		t.Fatal(err)
	}
	if want := (job.Counters{ChunksDone: 2, ItemsDone: 10, ChunksFailed: 1, ItemsFailed: 7, Retries: 3}); c != want {
		t.Errorf("counters = %+v, want %+v", c, want)
	}
	for x, want := range map[int]bool{0: true, 3: true, 15: true, 9: false, 1: false} {
		if g.terminal(x) != want {
			t.Errorf("terminal(%d) = %v, want %v", x, !want, want)
		}
	}
	if g.full() {
		t.Error("a segment of 16 with 3 outcomes is full")
	}
	item[attrSize] = avN(3)
	if g, _ = decodeSegment(item); !g.full() {
		t.Error("a segment of size 3 with 3 outcomes is not full")
	}
	if g, err := decodeSegment(nil); g != nil || err != nil || g.full() || g.terminal(0) {
		t.Errorf("missing segment decoded as %+v, %v", g, err)
	}
}

func TestBuildChunk(t *testing.T) {
	t.Parallel()
	started := time.UnixMilli(5000).UTC()
	retryAt := started.Add(time.Hour)
	rec := &record{
		attempts: []job.Attempt{{N: 1, Outcome: job.OutcomeRetry, Worker: "a", Started: started, Error: "x"}},
		state:    job.ChunkRetrying, updated: started, retryAt: &retryAt, task: &job.ChunkTask{JobID: "j"},
	}
	run := job.Attempt{Outcome: job.OutcomeSucceeded, Worker: "b", Started: started, Items: 9}
	done := &segment{runs: map[int]string{1: encodeRun(run, started)}, failed: map[int]int64{}, hist: map[int]int64{1: 1}, size: 16}
	c, err := buildChunk("j", 17, done, rec)
	if err != nil {
		t.Fatal(err)
	}
	run.N = 2
	want := &job.Chunk{JobID: "j", Index: 17, State: job.ChunkSucceeded, Items: 9, Attempts: []job.Attempt{rec.attempts[0], run}, UpdatedAt: started}
	if d := cmp.Diff(want, c); d != "" {
		t.Errorf("succeeded after a parked retry (-want +got):\n%s", d)
	}
	retrying := &segment{runs: map[int]string{}, failed: map[int]int64{}, hist: map[int]int64{1: 1}, size: 16}
	if c, _ := buildChunk("j", 17, retrying, rec); c.State != job.ChunkRetrying || c.RetryAt == nil || c.Task == nil || len(c.Attempts) != 1 {
		t.Errorf("parked chunk: %+v", c)
	}
	if c, err := buildChunk("j", 18, retrying, nil); c != nil || err != nil {
		t.Errorf("unrecorded chunk = %+v, %v", c, err)
	}
}

func TestAcctLast(t *testing.T) {
	t.Parallel()
	ns := func(v ...string) types.AttributeValue { return &types.AttributeValueMemberNS{Value: v} }
	open := func(k ...string) types.AttributeValue {
		m := map[string]types.AttributeValue{}
		for _, s := range k {
			m[s] = avN(1)
		}
		return &types.AttributeValueMemberM{Value: m}
	}
	for _, tc := range []struct {
		name string
		item map[string]types.AttributeValue
		want int64
	}{
		{"Nothing", map[string]types.AttributeValue{attrOpen: open()}, -1},
		{"Blocks", map[string]types.AttributeValue{attrOpen: open("3"), attrBlocks: ns("0", "2")}, 3*blockSize - 1},
		{"Sliced", map[string]types.AttributeValue{attrOpen: open(), attrBlocks: ns("0"), attrSliced: &types.AttributeValueMemberBOOL{Value: true}, attrChunksTotal: avN(33)}, 2},
		{"SlicedEmpty", map[string]types.AttributeValue{attrOpen: open(), attrSliced: &types.AttributeValueMemberBOOL{Value: true}, attrChunksTotal: avN(0)}, -1},
		{"OpenAboveSliced", map[string]types.AttributeValue{attrOpen: open("9"), attrSliced: &types.AttributeValueMemberBOOL{Value: true}, attrChunksTotal: avN(16)}, 9},
	} {
		a, err := decodeAcct(tc.item)
		if err != nil {
			t.Fatal(err)
		}
		if a.last != tc.want {
			t.Errorf("%s: last = %d, want %d", tc.name, a.last, tc.want)
		}
	}
}

// TestSchema checks that the CreateTable request is Schema: every index,
// its keys and projection, and exactly the key attributes defined.
func TestSchema(t *testing.T) {
	t.Parallel()
	sc := Schema()
	in := CreateTableInput("t")
	if in.BillingMode != types.BillingModePayPerRequest || len(in.GlobalSecondaryIndexes) != len(sc.Indexes) {
		t.Fatalf("CreateTableInput = %+v", in)
	}
	keys := []string{sc.PartitionKey, sc.SortKey}
	for i, ix := range sc.Indexes {
		g := in.GlobalSecondaryIndexes[i]
		if aws.ToString(g.IndexName) != ix.Name || aws.ToString(g.KeySchema[0].AttributeName) != ix.PartitionKey ||
			aws.ToString(g.KeySchema[1].AttributeName) != ix.SortKey || !slices.Equal(g.Projection.NonKeyAttributes, ix.NonKeyAttributes) {
			t.Errorf("index %d = %+v, want %+v", i, g, ix)
		}
		keys = append(keys, ix.PartitionKey, ix.SortKey)
	}
	var defined []string
	for _, d := range in.AttributeDefinitions {
		defined = append(defined, aws.ToString(d.AttributeName))
	}
	slices.Sort(keys)
	slices.Sort(defined)
	if d := cmp.Diff(slices.Compact(keys), defined); d != "" {
		t.Errorf("attribute definitions (-want +got):\n%s", d)
	}
}
