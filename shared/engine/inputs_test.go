package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
)

// collectArgs is a kind that writes every item it sees as its chunk output.
type collectArgs struct{}

func (collectArgs) Kind() string { return "collect" }

type collectKind struct{}

type collected struct {
	Header string   `json:"header"`
	Items  []string `json:"items"`
}

func (collectKind) Process(ctx context.Context, c *engine.Chunk[collectArgs]) error {
	var out collected
	switch {
	case c.Job.Input.Type == job.InputLines:
		h, err := c.Header(ctx)
		if err != nil {
			return err
		}
		out.Header = string(h)
		if _, err := c.Lines(ctx, func(l []byte) error { out.Items = append(out.Items, string(l)); return nil }); err != nil {
			return err
		}
	case c.Job.Input.Type == job.InputItems:
		items, err := c.Items(ctx)
		if err != nil {
			return err
		}
		for _, it := range items {
			out.Items = append(out.Items, string(it))
		}
	default:
		start, end := c.IDs()
		out.Items = append(out.Items, fmt.Sprintf("%d-%d", start, end))
	}
	return c.WriteOutputJSON(ctx, out)
}

// Every input type is sliced, processed and accounted through the engine:
// each line or item reaches exactly one chunk, and the counters agree.
func TestInputs(t *testing.T) {
	t.Parallel()
	var ndjson, csv strings.Builder
	csv.WriteString("name,qty\r\n")
	var wantLines, wantRows []string
	for i := 0; i < 40; i++ {
		l := fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i, strings.Repeat("x", i%7))
		ndjson.WriteString(l + "\n")
		wantLines = append(wantLines, l)
		row := fmt.Sprintf("item-%d,%d", i, i*3)
		csv.WriteString(row + "\n")
		wantRows = append(wantRows, row)
	}
	var items []json.RawMessage
	var wantItems []string
	for i := 0; i < 25; i++ {
		s := fmt.Sprintf(`{"i":%d}`, i)
		items = append(items, json.RawMessage(fmt.Sprintf(`{ "i" : %d }`, i)))
		wantItems = append(wantItems, s)
	}
	tests := []struct {
		name       string
		object     string
		in         job.Input
		chunkSize  int64
		want       []string
		wantHeader string
		wantChunks int64
		wantItems  int64
	}{
		{name: "ndjson", object: ndjson.String(), in: job.Input{Type: job.InputLines, Key: "in/data.ndjson"}, chunkSize: 37,
			want: wantLines, wantChunks: int64((len(ndjson.String()) + 36) / 37), wantItems: 40},
		{name: "csv with header", object: csv.String(), in: job.Input{Type: job.InputLines, Key: "in/data.csv", Format: job.FormatCSV}, chunkSize: 50,
			want: wantRows, wantHeader: "name,qty", wantChunks: int64((len(csv.String()) - len("name,qty\r\n") + 49) / 50), wantItems: 40},
		{name: "items as data blocks", in: job.Input{Type: job.InputItems, Items: items}, chunkSize: 4,
			want: wantItems, wantChunks: 7, wantItems: 25},
		{name: "inverse-log id buckets", in: job.Input{Type: job.InputIDRange, Start: 0, End: 10_000, Buckets: &job.Buckets{Preset: "inverse-log", Count: 5}},
			wantChunks: 5, wantItems: 10_000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := engine.NewRegistry()
			engine.MustRegister[collectArgs](reg, collectKind{}, engine.Options{})
			r := newRig(t, reg)
			ctx := context.Background()
			if tc.object != "" {
				if err := r.be.Blobs.Put(ctx, tc.in.Key, strings.NewReader(tc.object)); err != nil {
					t.Fatal(err)
				}
			}
			j, err := r.e.Submit(ctx, collectArgs{}, engine.SubmitOptions{Input: tc.in, ChunkSize: tc.chunkSize})
			if err != nil {
				t.Fatal(err)
			}
			r.control()
			for _, m := range r.receiveAll(r.e.Queues().Channel(engine.DefaultChannel)) {
				if v := r.e.ProcessChunk(ctx, m.Body, engine.Delivery{ReceiveCount: 1}); !v.Ack || v.Outcome != job.OutcomeSucceeded {
					t.Fatalf("verdict %+v", v)
				}
			}
			r.control()
			got := r.job(j.ID)
			if got.State != job.StateSucceeded || got.Counters.ChunksTotal != tc.wantChunks || got.Counters.ItemsDone != tc.wantItems {
				t.Fatalf("job %s (%s) %+v; want %d chunks, %d items", got.State, got.Error, got.Counters, tc.wantChunks, tc.wantItems)
			}
			var seen []string
			var sizes []int64
			infos, err := r.be.Blobs.List(ctx, "jobs/"+j.ID+"/out/")
			if err != nil {
				t.Fatal(err)
			}
			for _, info := range infos {
				rc, err := r.be.Blobs.Get(ctx, info.Key)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(rc)
				rc.Close()
				var c collected
				if err := json.NewDecoder(bytes.NewReader(b)).Decode(&c); err != nil {
					t.Fatal(err)
				}
				if c.Header != tc.wantHeader {
					t.Fatalf("chunk header %q, want %q", c.Header, tc.wantHeader)
				}
				seen = append(seen, c.Items...)
				if tc.in.Buckets != nil {
					var s, e int64
					fmt.Sscanf(c.Items[0], "%d-%d", &s, &e)
					sizes = append(sizes, e-s)
				}
			}
			if tc.in.Buckets != nil {
				for i := 1; i < len(sizes); i++ {
					if sizes[i] > sizes[i-1] {
						t.Fatalf("inverse-log bucket sizes grow: %v", sizes)
					}
				}
				return
			}
			if strings.Join(seen, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("items seen (%d) differ from the input (%d)", len(seen), len(tc.want))
			}
		})
	}
}

func TestProgressOf(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start.Add(10 * time.Second)
	j := &job.Job{State: job.StateRunning, StartedAt: &start,
		Counters: job.Counters{Sliced: true, ChunksTotal: 100, ChunksDone: 20, ChunksFailed: 5, ItemsDone: 2000}}
	p := engine.ProgressOf(j, now)
	if p.Percent != 25 || p.ItemsPerSec != 200 || p.ETA != 30*time.Second || p.Elapsed != 10*time.Second {
		t.Fatalf("progress %+v; want 25%%, 200 items/s, ETA 30s", p)
	}
	j.Counters.Sliced = false
	if p := engine.ProgressOf(j, now); p.ETA != 0 {
		t.Fatalf("ETA %s before slicing ends; want unknown", p.ETA)
	}
	end := start.Add(40 * time.Second)
	j.State, j.FinishedAt, j.Counters = job.StateSucceeded, &end, job.Counters{Sliced: true, ChunksTotal: 100, ChunksDone: 100, ItemsDone: 8000}
	if p := engine.ProgressOf(j, end.Add(time.Hour)); p.Percent != 100 || p.ETA != 0 || p.Elapsed != 40*time.Second || p.ItemsPerSec != 200 {
		t.Fatalf("finished progress %+v", p)
	}
}
