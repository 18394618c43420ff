// Package keycount is example kind (a): it aggregates an NDJSON corpus per
// key — record count and sum of a numeric field — chunk by chunk, and its
// Finish step reduces the chunk outputs into one result object.
package keycount

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/slicework/slicework/shared/engine"
)

// Kind is the kind name.
const Kind = "keycount"

// Args configure an aggregation.
type Args struct {
	// KeyField names the string field to group by ("key").
	KeyField string `json:"key_field,omitempty"`
	// SumField names the numeric field to sum ("amount").
	SumField string `json:"sum_field,omitempty"`
}

// Kind implements engine.Args.
func (Args) Kind() string { return Kind }

// Validate implements engine.Validator.
func (a Args) Validate() error {
	if len(a.KeyField) > 128 || len(a.SumField) > 128 {
		return errors.New("field names are limited to 128 bytes")
	}
	return nil
}

func (a Args) fields() (string, string) {
	k, s := a.KeyField, a.SumField
	if k == "" {
		k = "key"
	}
	if s == "" {
		s = "amount"
	}
	return k, s
}

// Agg is the aggregate of one key.
type Agg struct {
	Count int64   `json:"count"`
	Sum   float64 `json:"sum"`
}

// Partial is one chunk's output.
type Partial struct {
	Records int64          `json:"records"`
	Skipped int64          `json:"skipped"`
	Keys    map[string]Agg `json:"keys"`
}

// Result is the job's result object.
type Result struct {
	Records int64 `json:"records"`
	// Skipped counts lines that were not a JSON object with the key field.
	Skipped int64 `json:"skipped"`
	Chunks  int64 `json:"chunks"`
	// Keys are sorted by key.
	Keys []KeyAgg `json:"keys"`
}

// KeyAgg is one row of the result.
type KeyAgg struct {
	Key string `json:"key"`
	Agg
}

// ResultName is the result object's name under the job's result prefix.
const ResultName = "keycount.json"

// Handler processes keycount chunks.
type Handler struct{}

// Process aggregates the chunk's lines and writes a Partial as its output.
// Blank lines are ignored; lines that are not objects with a string key are
// counted as skipped, not failed, so one bad record does not sink a chunk.
func (Handler) Process(ctx context.Context, c *engine.Chunk[Args]) error {
	keyField, sumField := c.Args.fields()
	p := Partial{Keys: map[string]Agg{}}
	_, err := c.Lines(ctx, func(line []byte) error {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			return nil
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(line, &rec); err != nil {
			p.Skipped++
			return nil
		}
		var key string
		if err := json.Unmarshal(rec[keyField], &key); err != nil || rec[keyField] == nil {
			p.Skipped++
			return nil
		}
		var v float64
		if raw, ok := rec[sumField]; ok {
			_ = json.Unmarshal(raw, &v)
		}
		a := p.Keys[key]
		a.Count++
		a.Sum += v
		p.Keys[key] = a
		p.Records++
		return nil
	})
	if err != nil {
		return fmt.Errorf("keycount: read chunk %d: %w", c.Index(), err)
	}
	c.SetItems(p.Records + p.Skipped)
	return c.WriteOutputJSON(ctx, p)
}

// Finish merges every chunk's Partial into the Result object.
func (Handler) Finish(ctx context.Context, j *engine.Job[Args], s engine.Summary) error {
	total := map[string]Agg{}
	var res Result
	err := j.Outputs(ctx, func(idx int64, r io.Reader) error {
		var p Partial
		if err := json.NewDecoder(r).Decode(&p); err != nil {
			return fmt.Errorf("keycount: output of chunk %d: %w", idx, err)
		}
		res.Records += p.Records
		res.Skipped += p.Skipped
		res.Chunks++
		for k, a := range p.Keys {
			t := total[k]
			t.Count += a.Count
			t.Sum += a.Sum
			total[k] = t
		}
		return nil
	})
	if err != nil {
		return err
	}
	res.Keys = make([]KeyAgg, 0, len(total))
	for k, a := range total {
		// Sums are rounded to 1e-6 so that the result does not depend on
		// the order of float additions, which follows the chunking.
		a.Sum = math.Round(a.Sum*1e6) / 1e6
		res.Keys = append(res.Keys, KeyAgg{Key: k, Agg: a})
	}
	sort.Slice(res.Keys, func(i, k int) bool { return res.Keys[i].Key < res.Keys[k].Key })
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	_, err = j.WriteResult(ctx, ResultName, bytes.NewReader(b))
	return err
}

// Register adds the kind to r with its default options: 256 KiB chunks.
func Register(r *engine.Registry) error {
	return engine.Register[Args](r, Handler{}, engine.Options{ChunkSize: 256 << 10, MaxAttempts: 5})
}
