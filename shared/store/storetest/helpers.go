package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// cmpOpts compares the suite's values under its conventions: times to
// within a millisecond, JSON as JSON, nil slices equal to empty ones.
var cmpOpts = cmp.Options{
	cmp.Comparer(func(a, b time.Time) bool {
		return a.Sub(b).Abs() < time.Millisecond
	}),
	cmp.FilterValues(func(a, b json.RawMessage) bool { return len(a) > 0 || len(b) > 0 }, cmp.Comparer(jsonEqual)),
	cmpopts.EquateEmpty(),
}

// ignoreUpdated ignores the store-set UpdatedAt of jobs and chunks.
var ignoreUpdated = cmp.Options{
	cmpopts.IgnoreFields(job.Job{}, "UpdatedAt"),
	cmpopts.IgnoreFields(job.Chunk{}, "UpdatedAt"),
}

// jsonEqual reports whether a and b are the same JSON value, or the same
// bytes if either is not JSON.
func jsonEqual(a, b json.RawMessage) bool {
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return bytes.Equal(a, b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(ca.Bytes(), cb.Bytes())
	}
	return reflect.DeepEqual(va, vb)
}

// uniq returns a fresh random token for ids, keys, kinds and tags.
func uniq() string { return strings.ToLower(rand.Text()[:16]) }

// newJob returns a valid queued job of kind created at created, with an
// id derived from created.
func newJob(kind string, created time.Time) *job.Job {
	return &job.Job{
		ID:          job.NewID(created),
		Kind:        kind,
		Input:       job.Input{Type: job.InputIDRange, Start: 0, End: 1000},
		Channel:     "default",
		ChunkSize:   10,
		MaxAttempts: 3,
		State:       job.StateQueued,
		CreatedAt:   created,
		UpdatedAt:   created,
	}
}

// create stores j and returns the stored job, failing the test on error.
func create(t *testing.T, s store.Store, j *job.Job) *job.Job {
	t.Helper()
	got, err := s.CreateJob(context.Background(), j)
	if err != nil {
		t.Fatalf("CreateJob(%s): %v", j.ID, err)
	}
	return got
}

// get returns job id, failing the test on error.
func get(t *testing.T, s store.Store, id string) *job.Job {
	t.Helper()
	got, err := s.GetJob(context.Background(), id)
	if err != nil {
		t.Fatalf("GetJob(%s): %v", id, err)
	}
	return got
}

// getChunk returns chunk index of jobID, failing the test on error.
func getChunk(t *testing.T, s store.Store, jobID string, index int64) *job.Chunk {
	t.Helper()
	got, err := s.GetChunk(context.Background(), jobID, index)
	if err != nil {
		t.Fatalf("GetChunk(%s, %d): %v", jobID, index, err)
	}
	return got
}

// parallel runs fn(0) … fn(ops-1) on workers goroutines, which all start
// together, and waits for them.
func parallel(workers, ops int, fn func(i int)) {
	next := make(chan int)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			<-start
			for i := range next {
				fn(i)
			}
		})
	}
	close(start)
	for i := range ops {
		next <- i
	}
	close(next)
	wg.Wait()
}

// zeroFields lists the fields of v (a struct or pointer to one, recursing
// into nested structs other than time.Time) that hold their zero value.
func zeroFields(v any) []string {
	var out []string
	var walk func(prefix string, rv reflect.Value)
	walk = func(prefix string, rv reflect.Value) {
		for rv.Kind() == reflect.Pointer {
			if rv.IsNil() {
				out = append(out, prefix)
				return
			}
			rv = rv.Elem()
		}
		if rv.Kind() != reflect.Struct || rv.Type() == reflect.TypeFor[time.Time]() {
			if rv.IsZero() {
				out = append(out, prefix)
			}
			return
		}
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if f.IsExported() {
				walk(strings.TrimPrefix(prefix+"."+f.Name, "."), rv.Field(i))
			}
		}
	}
	walk("", reflect.ValueOf(v))
	return out
}

// checkUTC fails the test if a time of j is not in UTC.
func checkUTC(t *testing.T, j *job.Job) {
	t.Helper()
	times := map[string]*time.Time{
		"CreatedAt": &j.CreatedAt, "UpdatedAt": &j.UpdatedAt, "RunAt": j.RunAt,
		"StartedAt": j.StartedAt, "SlicedAt": j.SlicedAt, "FinishedAt": j.FinishedAt,
	}
	for name, v := range times {
		if v != nil && v.Location() != time.UTC {
			t.Errorf("%s is in %v, want UTC", name, v.Location())
		}
	}
}

// checkChunkUTC fails the test if a time of c is not in UTC.
func checkChunkUTC(t *testing.T, c *job.Chunk) {
	t.Helper()
	if c.UpdatedAt.Location() != time.UTC {
		t.Errorf("chunk UpdatedAt is in %v, want UTC", c.UpdatedAt.Location())
	}
	if c.RetryAt != nil && c.RetryAt.Location() != time.UTC {
		t.Errorf("chunk RetryAt is in %v, want UTC", c.RetryAt.Location())
	}
	for _, a := range c.Attempts {
		if a.Started.Location() != time.UTC {
			t.Errorf("attempt %d Started is in %v, want UTC", a.N, a.Started.Location())
		}
	}
}
