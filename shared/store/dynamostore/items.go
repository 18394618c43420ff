package dynamostore

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/slicework/slicework/shared/job"
)

// Attribute names. Job and accounting attributes are readable; segment
// attributes are short because every byte of a segment counts towards the
// write unit of each chunk completion.
const (
	// job item
	attrID      = "id"
	attrChannel = "channel"
	attrUnique  = "uk"
	attrParent  = "parent"
	attrSpec    = "spec"
	attrError   = "error"
	// attrTransition holds the token of the last Transition call.
	attrTransition = "tx"
	attrResult     = "result"
	attrCreated    = "created_at"
	attrUpdated    = "updated_at"
	attrRunAt      = "run_at"
	attrStarted    = "started_at"
	attrSlicedAt   = "sliced_at"
	attrFinished   = "finished_at"

	// accounting item
	attrOpen         = "o"
	attrRV           = "rv"
	attrBlocks       = "hb"
	attrSliced       = "sl"
	attrChunksTotal  = "ct"
	attrItemsTotal   = "it"
	attrChunksDone   = "cd"
	attrChunksFailed = "cf"
	attrItemsDone    = "idn"
	attrItemsFailed  = "ifl"
	attrRetries      = "rt"

	// segment item: r<x>, f<x>, h<x> per slot x (one hex digit), and z
	attrSize = "z"

	// chunk record
	attrAttempts     = "at"
	attrChunkState   = "st"
	attrItems        = "items"
	attrChunkUpdated = "up"
	attrRetryAt      = "ra"
	attrTask         = "task"

	// unique key item
	attrJob = "job"

	// tag item
	attrTagKind = "tk"
)

// Sort keys of the fixed items and the due partitions.
const (
	skJob      = "J"
	skAcct     = "A"
	skSegment  = "G"
	skUnique   = "U"
	dueJobs    = "S"
	dueRetries = "R"
)

// blockSize is how many segments one element of the accounting item's
// block set hb stands for: hb holds k/blockSize of every segment k ever
// created, which bounds the segments ListChunks reads.
const blockSize = 256

// maxKeyTime is the largest epoch-ms time a 13-digit key holds (year 2286).
const maxKeyTime = 9999999999999

func jobPK(id string) string { return "J#" + id }

func jobKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: avS(jobPK(id)), AttrSK: avS(skJob)}
}

func acctKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: avS(jobPK(id)), AttrSK: avS(skAcct)}
}

func segKey(id string, k int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: avS(jobPK(id) + "#G#" + strconv.FormatInt(k, 10)), AttrSK: avS(skSegment)}
}

func recSK(index int64) string { return fmt.Sprintf("C#%019d", index) }

func recKey(id string, index int64) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: avS(jobPK(id)), AttrSK: avS(recSK(index))}
}

func uniqueKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: avS("U#" + key), AttrSK: avS(skUnique)}
}

func tagPK(tag string) string { return "T#" + tag }

// slot names of chunk x of a segment.
func runAttr(x int) string     { return "r" + strconv.FormatInt(int64(x), 16) }
func failedAttr(x int) string  { return "f" + strconv.FormatInt(int64(x), 16) }
func retriesAttr(x int) string { return "h" + strconv.FormatInt(int64(x), 16) }

// segOf returns the segment and slot of chunk index.
func segOf(index int64) (k int64, x int) { return index / SegmentSize, int(index % SegmentSize) }

func avS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func avN(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func getS(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// getN returns a number attribute, or ok false if it is absent.
func getN(item map[string]types.AttributeValue, name string) (v int64, ok bool, err error) {
	av, ok := item[name]
	if !ok {
		return 0, false, nil
	}
	n, isN := av.(*types.AttributeValueMemberN)
	if !isN {
		return 0, false, fmt.Errorf("attribute %s is %T, not a number", name, av)
	}
	v, err = strconv.ParseInt(n.Value, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("attribute %s: %w", name, err)
	}
	return v, true, nil
}

// numbers reads several number attributes, absent ones as zero.
func numbers(item map[string]types.AttributeValue, dst map[string]*int64) error {
	for name, p := range dst {
		v, _, err := getN(item, name)
		if err != nil {
			return err
		}
		*p = v
	}
	return nil
}

// norm is the stored form of a time: UTC, truncated to the millisecond.
func norm(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

func fromMs(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// key13 is an epoch-ms time as a fixed-width key prefix. ms must be in
// [0, maxKeyTime].
func key13(ms int64) string { return fmt.Sprintf("%013d", ms) }

func keyTimeOK(t time.Time) bool {
	ms := t.UnixMilli()
	return ms >= 0 && ms <= maxKeyTime
}

// listKey is the lsk of a job: CreatedAt in epoch ms, then the id.
func listKey(created time.Time, id string) string { return key13(created.UnixMilli()) + "#" + id }

// idOfListKey returns the id part of an lsk.
func idOfListKey(lsk string) (string, bool) {
	if len(lsk) < 15 || lsk[13] != '#' {
		return "", false
	}
	for _, c := range lsk[:13] {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return lsk[14:], true
}

func dueJobSK(runAt time.Time, id string) string { return key13(runAt.UnixMilli()) + "#" + id }

func dueRetrySK(retryAt time.Time, jobID string, index int64) string {
	return key13(retryAt.UnixMilli()) + "#" + jobID + "#" + fmt.Sprintf("%019d", index)
}

// spec is the JSON document of a job's immutable fields.
type spec struct {
	Args              json.RawMessage `json:"args,omitempty"`
	Input             job.Input       `json:"input"`
	Tags              []string        `json:"tags,omitempty"`
	ChunkSize         int64           `json:"chunk_size,omitempty"`
	MaxAttempts       int             `json:"max_attempts,omitempty"`
	TolerateFailedPct float64         `json:"tolerate_failed_pct,omitempty"`
}

// jobItems returns the job and accounting items of a new job, normalising
// its times; j must be valid.
func jobItems(j *job.Job) (jobItem, acctItem map[string]types.AttributeValue, err error) {
	sp, err := json.Marshal(spec{
		Args: j.Args, Input: j.Input, Tags: j.Tags,
		ChunkSize: j.ChunkSize, MaxAttempts: j.MaxAttempts, TolerateFailedPct: j.TolerateFailedPct,
	})
	if err != nil {
		return nil, nil, err
	}
	updated := j.UpdatedAt
	if updated.IsZero() {
		updated = j.CreatedAt
	}
	jobItem = jobKey(j.ID)
	jobItem[attrID] = avS(j.ID)
	jobItem[AttrKind] = avS(j.Kind)
	jobItem[AttrState] = avS(string(j.State))
	jobItem[AttrListKey] = avS(listKey(j.CreatedAt, j.ID))
	jobItem[attrSpec] = avS(string(sp))
	jobItem[attrCreated] = avN(j.CreatedAt.UnixMilli())
	jobItem[attrUpdated] = avN(updated.UnixMilli())
	for name, v := range map[string]string{attrChannel: j.Channel, attrUnique: j.UniqueKey, attrParent: j.Parent, attrError: j.Error, attrResult: j.Result} {
		if v != "" {
			jobItem[name] = avS(v)
		}
	}
	for name, t := range map[string]*time.Time{attrRunAt: j.RunAt, attrStarted: j.StartedAt, attrSlicedAt: j.SlicedAt, attrFinished: j.FinishedAt} {
		if t != nil {
			jobItem[name] = avN(t.UnixMilli())
		}
	}
	if j.State == job.StateScheduled && j.RunAt != nil {
		jobItem[AttrDuePK] = avS(dueJobs)
		jobItem[AttrDueSK] = avS(dueJobSK(*j.RunAt, j.ID))
	}
	c := j.Counters
	acctItem = acctKey(j.ID)
	acctItem[attrOpen] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
	acctItem[attrRV] = avN(0)
	acctItem[attrSliced] = &types.AttributeValueMemberBOOL{Value: c.Sliced}
	for name, v := range map[string]int64{
		attrChunksTotal: c.ChunksTotal, attrItemsTotal: c.ItemsTotal, attrChunksDone: c.ChunksDone, attrChunksFailed: c.ChunksFailed,
		attrItemsDone: c.ItemsDone, attrItemsFailed: c.ItemsFailed, attrRetries: c.Retries,
	} {
		acctItem[name] = avN(v)
	}
	return jobItem, acctItem, nil
}

// decodeJob decodes a job item; its Counters are left zero.
func decodeJob(item map[string]types.AttributeValue) (*job.Job, error) {
	j := &job.Job{
		ID: getS(item, attrID), Kind: getS(item, AttrKind), State: job.State(getS(item, AttrState)),
		Channel: getS(item, attrChannel), UniqueKey: getS(item, attrUnique), Parent: getS(item, attrParent),
		Error: getS(item, attrError), Result: getS(item, attrResult),
	}
	var sp spec
	if err := json.Unmarshal([]byte(getS(item, attrSpec)), &sp); err != nil {
		return nil, fmt.Errorf("decode job %s: spec: %w", j.ID, err)
	}
	j.Args, j.Input, j.Tags = sp.Args, sp.Input, sp.Tags
	j.ChunkSize, j.MaxAttempts, j.TolerateFailedPct = sp.ChunkSize, sp.MaxAttempts, sp.TolerateFailedPct
	for name, dst := range map[string]*time.Time{attrCreated: &j.CreatedAt, attrUpdated: &j.UpdatedAt} {
		v, ok, err := getN(item, name)
		if err != nil || !ok {
			return nil, fmt.Errorf("decode job %s: %s missing or malformed: %v", j.ID, name, err)
		}
		*dst = fromMs(v)
	}
	for name, dst := range map[string]**time.Time{attrRunAt: &j.RunAt, attrStarted: &j.StartedAt, attrSlicedAt: &j.SlicedAt, attrFinished: &j.FinishedAt} {
		v, ok, err := getN(item, name)
		if err != nil {
			return nil, fmt.Errorf("decode job %s: %w", j.ID, err)
		}
		if ok {
			t := fromMs(v)
			*dst = &t
		}
	}
	if err := decodeFlow(item, j); err != nil {
		return nil, err
	}
	return j, nil
}

// acct is a decoded accounting item: the counters of the rolled-up
// segments and the open ones.
type acct struct {
	c    job.Counters
	open []int64 // ascending
	rv   int64
	// last is the highest segment that may exist, -1 if none was created:
	// the end of the highest block in hb, or the last sliced segment.
	last int64
}

func decodeAcct(item map[string]types.AttributeValue) (*acct, error) {
	a := &acct{last: -1}
	c := &a.c
	if b, ok := item[attrSliced].(*types.AttributeValueMemberBOOL); ok {
		c.Sliced = b.Value
	}
	err := numbers(item, map[string]*int64{
		attrChunksTotal: &c.ChunksTotal, attrItemsTotal: &c.ItemsTotal, attrChunksDone: &c.ChunksDone, attrChunksFailed: &c.ChunksFailed,
		attrItemsDone: &c.ItemsDone, attrItemsFailed: &c.ItemsFailed, attrRetries: &c.Retries, attrRV: &a.rv,
	})
	if err != nil {
		return nil, err
	}
	if a.open, err = openSet(item); err != nil {
		return nil, err
	}
	if ns, ok := item[attrBlocks].(*types.AttributeValueMemberNS); ok {
		for _, v := range ns.Value {
			b, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("block %q: %w", v, err)
			}
			a.last = max(a.last, (b+1)*blockSize-1)
		}
	}
	if c.Sliced {
		// Slicing is over: no segment lies beyond the last one (a segment
		// above it is a caller's error, but still listed if it is open).
		a.last = (c.ChunksTotal+SegmentSize-1)/SegmentSize - 1
	}
	for _, k := range a.open {
		a.last = max(a.last, k)
	}
	return a, nil
}

// openSet returns the segments registered in an accounting item's o.
func openSet(item map[string]types.AttributeValue) ([]int64, error) {
	m, _ := item[attrOpen].(*types.AttributeValueMemberM)
	if m == nil {
		return nil, nil
	}
	out := make([]int64, 0, len(m.Value))
	for k := range maps.Keys(m.Value) {
		v, err := strconv.ParseInt(k, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("open segment %q: %w", k, err)
		}
		out = append(out, v)
	}
	slices.Sort(out)
	return out, nil
}

// segment is a decoded segment item.
type segment struct {
	runs   map[int]string // slot → run entry (succeeded)
	failed map[int]int64  // slot → items (failed)
	hist   map[int]int64  // slot → recorded retries
	size   int            // chunks in the segment: z, or SegmentSize
}

func decodeSegment(item map[string]types.AttributeValue) (*segment, error) {
	if len(item) == 0 {
		return nil, nil
	}
	g := &segment{runs: map[int]string{}, failed: map[int]int64{}, hist: map[int]int64{}, size: SegmentSize}
	for name, av := range item {
		if name == attrSize {
			v, _, err := getN(item, name)
			if err != nil {
				return nil, err
			}
			g.size = int(v)
			continue
		}
		if len(name) != 2 || !strings.ContainsRune("rfh", rune(name[0])) {
			continue
		}
		x, err := strconv.ParseInt(name[1:], 16, 64)
		if err != nil {
			continue
		}
		switch name[0] {
		case 'r':
			s, ok := av.(*types.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("segment attribute %s is %T", name, av)
			}
			g.runs[int(x)] = s.Value
		case 'f', 'h':
			v, _, err := getN(item, name)
			if err != nil {
				return nil, err
			}
			if name[0] == 'f' {
				g.failed[int(x)] = v
			} else {
				g.hist[int(x)] = v
			}
		}
	}
	return g, nil
}

// terminal reports whether slot x has an outcome.
func (g *segment) terminal(x int) bool {
	if g == nil {
		return false
	}
	_, r := g.runs[x]
	_, f := g.failed[x]
	return r || f
}

// recorded reports whether slot x has any recorded attempt.
func (g *segment) recorded(x int) bool { return g.terminal(x) || (g != nil && g.hist[x] > 0) }

// full reports whether every chunk of the segment is terminal.
func (g *segment) full() bool { return g != nil && len(g.runs)+len(g.failed) >= g.size }

// counters returns what the segment adds to its job's counters.
func (g *segment) counters() (job.Counters, error) {
	var c job.Counters
	if g == nil {
		return c, nil
	}
	for _, r := range g.runs {
		a, _, err := decodeRun(r)
		if err != nil {
			return c, err
		}
		c.ChunksDone++
		c.ItemsDone += a.Items
	}
	for _, items := range g.failed {
		c.ChunksFailed++
		c.ItemsFailed += items
	}
	for _, n := range g.hist {
		c.Retries += n
	}
	return c, nil
}

func addCounters(a *job.Counters, b job.Counters) {
	a.ChunksDone += b.ChunksDone
	a.ChunksFailed += b.ChunksFailed
	a.ItemsDone += b.ItemsDone
	a.ItemsFailed += b.ItemsFailed
	a.Retries += b.Retries
}

// encodeRun is the run entry of a successful attempt: started (epoch ms),
// duration (ns), items and the update time (ms after started), in base 36,
// then the worker; '|'-separated, the worker last so it may contain '|'.
func encodeRun(a job.Attempt, updated time.Time) string {
	st := a.Started.UnixMilli()
	return strconv.FormatInt(st, 36) + "|" + strconv.FormatInt(int64(a.Duration), 36) + "|" +
		strconv.FormatInt(a.Items, 36) + "|" + strconv.FormatInt(updated.UnixMilli()-st, 36) + "|" + a.Worker
}

// decodeRun decodes a run entry into a succeeded attempt (N unset) and the
// chunk's update time.
func decodeRun(s string) (job.Attempt, time.Time, error) {
	parts := strings.SplitN(s, "|", 5)
	if len(parts) != 5 {
		return job.Attempt{}, time.Time{}, fmt.Errorf("malformed run entry %q", s)
	}
	var v [4]int64
	for i := range v {
		n, err := strconv.ParseInt(parts[i], 36, 64)
		if err != nil {
			return job.Attempt{}, time.Time{}, fmt.Errorf("malformed run entry %q: %w", s, err)
		}
		v[i] = n
	}
	return job.Attempt{
		Outcome: job.OutcomeSucceeded, Worker: parts[4], Started: fromMs(v[0]),
		Duration: time.Duration(v[1]), Items: v[2],
	}, fromMs(v[0] + v[3]), nil
}

// storedAttempt is one attempt in a chunk record's history; N is its
// position.
type storedAttempt struct {
	Outcome    job.Outcome `json:"o"`
	Worker     string      `json:"w,omitempty"`
	Started    int64       `json:"s"`
	Duration   int64       `json:"d,omitempty"`
	Items      int64       `json:"i,omitempty"`
	Error      string      `json:"e,omitempty"`
	Stack      string      `json:"k,omitempty"`
	RetryAfter int64       `json:"r,omitempty"`
}

func encodeAttempt(a job.Attempt) (string, error) {
	b, err := json.Marshal(storedAttempt{
		Outcome: a.Outcome, Worker: a.Worker, Started: a.Started.UnixMilli(), Duration: int64(a.Duration),
		Items: a.Items, Error: a.Error, Stack: a.Stack, RetryAfter: int64(a.RetryAfter),
	})
	return string(b), err
}

// record is a decoded chunk record.
type record struct {
	attempts []job.Attempt
	state    job.ChunkState
	items    int64
	updated  time.Time
	retryAt  *time.Time
	task     *job.ChunkTask
}

func decodeRecord(item map[string]types.AttributeValue) (*record, error) {
	if len(item) == 0 {
		return nil, nil
	}
	r := &record{state: job.ChunkState(getS(item, attrChunkState))}
	if l, ok := item[attrAttempts].(*types.AttributeValueMemberL); ok {
		for n, av := range l.Value {
			s, ok := av.(*types.AttributeValueMemberS)
			if !ok {
				return nil, fmt.Errorf("attempt %d is %T", n+1, av)
			}
			var sa storedAttempt
			if err := json.Unmarshal([]byte(s.Value), &sa); err != nil {
				return nil, fmt.Errorf("attempt %d: %w", n+1, err)
			}
			r.attempts = append(r.attempts, job.Attempt{
				N: n + 1, Outcome: sa.Outcome, Worker: sa.Worker, Started: fromMs(sa.Started), Duration: time.Duration(sa.Duration),
				Items: sa.Items, Error: sa.Error, Stack: sa.Stack, RetryAfter: time.Duration(sa.RetryAfter),
			})
		}
	}
	var up int64
	if err := numbers(item, map[string]*int64{attrItems: &r.items, attrChunkUpdated: &up}); err != nil {
		return nil, err
	}
	r.updated = fromMs(up)
	if v, ok, err := getN(item, attrRetryAt); err != nil {
		return nil, err
	} else if ok {
		t := fromMs(v)
		r.retryAt = &t
	}
	if s := getS(item, attrTask); s != "" {
		r.task = new(job.ChunkTask)
		if err := json.Unmarshal([]byte(s), r.task); err != nil {
			return nil, fmt.Errorf("task: %w", err)
		}
	}
	return r, nil
}

// buildChunk merges a chunk's segment slot and record into the chunk as
// the port shows it, or nil if no attempt of it is recorded.
func buildChunk(jobID string, index int64, g *segment, r *record) (*job.Chunk, error) {
	_, x := segOf(index)
	if !g.recorded(x) && r == nil {
		return nil, nil
	}
	c := &job.Chunk{JobID: jobID, Index: index, State: job.ChunkRetrying}
	if r != nil {
		c.Attempts = r.attempts
		c.State, c.Items, c.UpdatedAt = r.state, r.items, r.updated
		c.RetryAt, c.Task = r.retryAt, r.task
	}
	if g == nil {
		return c, nil
	}
	if run, ok := g.runs[x]; ok {
		a, updated, err := decodeRun(run)
		if err != nil {
			return nil, fmt.Errorf("chunk %s/%d: %w", jobID, index, err)
		}
		a.N = len(c.Attempts) + 1
		c.Attempts = append(c.Attempts, a)
		c.State, c.Items, c.UpdatedAt = job.ChunkSucceeded, a.Items, updated
		c.RetryAt, c.Task = nil, nil
	} else if items, ok := g.failed[x]; ok {
		c.State, c.Items = job.ChunkFailed, items
		c.RetryAt, c.Task = nil, nil
	}
	return c, nil
}
