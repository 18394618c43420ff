// Package recompute is example kind (b): "recompute ids 1..1,000,000 in
// ranges". Each chunk is an id range; the handler derives a checksum of its
// ids. To show retries and failure history, it fails chosen chunks
// temporarily for their first attempts and one chunk permanently.
package recompute

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/slicework/slicework/shared/engine"
)

// Kind is the kind name.
const Kind = "recompute"

// Args configure a recompute run.
type Args struct {
	// FlakyEvery makes every FlakyEvery-th chunk (index % FlakyEvery == 1)
	// fail temporarily on its first FlakyAttempts attempts (0: none).
	FlakyEvery    int64 `json:"flaky_every,omitempty"`
	FlakyAttempts int   `json:"flaky_attempts,omitempty"`
	// PoisonChunk fails permanently (-1 or absent: none).
	PoisonChunk *int64 `json:"poison_chunk,omitempty"`
	// PanicChunk panics on its first attempt (absent: none).
	PanicChunk *int64 `json:"panic_chunk,omitempty"`
	// WorkMillis simulates this much work per chunk.
	WorkMillis int `json:"work_ms,omitempty"`
}

// Kind implements engine.Args.
func (Args) Kind() string { return Kind }

// Validate implements engine.Validator.
func (a Args) Validate() error {
	switch {
	case a.FlakyEvery < 0:
		return errors.New("flaky_every must be ≥ 0")
	case a.FlakyAttempts < 0 || a.FlakyAttempts > 50:
		return errors.New("flaky_attempts must be 0..50")
	case a.WorkMillis < 0 || a.WorkMillis > 60_000:
		return errors.New("work_ms must be 0..60000")
	}
	return nil
}

// Checksum is the value derived for one id; the job's result is the sum over
// all ids, so a chunk counted twice or lost changes it.
func Checksum(id int64) uint64 {
	x := uint64(id) * 0x9E3779B97F4A7C15
	x ^= x >> 31
	return x % 1_000_003
}

// Output is one chunk's output and, summed, the job's result.
type Output struct {
	IDs      int64  `json:"ids"`
	Checksum uint64 `json:"checksum"`
	Chunks   int64  `json:"chunks,omitempty"`
}

// ResultName is the result object's name.
const ResultName = "recompute.json"

// Handler processes recompute chunks.
type Handler struct{}

// Process checksums the chunk's id range, failing on purpose as Args say.
func (Handler) Process(ctx context.Context, c *engine.Chunk[Args]) error {
	a := c.Args
	if a.WorkMillis > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(a.WorkMillis) * time.Millisecond):
		}
	}
	if a.PoisonChunk != nil && *a.PoisonChunk == c.Index() {
		return engine.Permanent(fmt.Errorf("recompute: chunk %d: ids %d..%d reference a deleted table", c.Index(), c.Task.Input.Start, c.Task.Input.End))
	}
	if a.PanicChunk != nil && *a.PanicChunk == c.Index() && c.Attempt == 1 {
		panic(fmt.Sprintf("recompute: chunk %d: nil map in cache", c.Index()))
	}
	if a.FlakyEvery > 0 && c.Index()%a.FlakyEvery == 1 && c.Attempt <= a.FlakyAttempts {
		return engine.RetryIn(time.Second, fmt.Errorf("recompute: chunk %d: database busy (attempt %d)", c.Index(), c.Attempt))
	}
	start, end := c.IDs()
	var out Output
	for id := start; id < end; id++ {
		out.Checksum += Checksum(id)
	}
	out.IDs = end - start
	return c.WriteOutputJSON(ctx, out)
}

// Finish sums the chunk outputs into the result object.
func (Handler) Finish(ctx context.Context, j *engine.Job[Args], s engine.Summary) error {
	var total Output
	err := j.Outputs(ctx, func(idx int64, r io.Reader) error {
		var o Output
		if err := json.NewDecoder(r).Decode(&o); err != nil {
			return fmt.Errorf("recompute: output of chunk %d: %w", idx, err)
		}
		total.IDs += o.IDs
		total.Checksum += o.Checksum
		total.Chunks++
		return nil
	})
	if err != nil {
		return err
	}
	b, _ := json.Marshal(total)
	_, err = j.WriteResult(ctx, ResultName, bytes.NewReader(b))
	return err
}

// Register adds the kind to r: chunks of 10,000 ids, 4 attempts, 2% of
// chunks may fail.
func Register(r *engine.Registry) error {
	return engine.Register[Args](r, Handler{}, engine.Options{
		ChunkSize: 10_000, MaxAttempts: 4, TolerateFailedPct: 2,
		Backoff: engine.Backoff{Base: time.Second, Max: 30 * time.Second},
	})
}
