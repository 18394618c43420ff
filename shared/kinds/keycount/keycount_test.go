package keycount_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/host"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/keycount"
)

var update = flag.Bool("update", false, "rewrite golden files")

const samplePath = "../../../testdata/corpus/sample.ndjson"

// The committed corpus sample is exactly what the generator makes.
func TestCorpusSampleIsReproducible(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if _, err := keycount.GenerateCorpus(&buf, 200, 1); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(samplePath, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("generator output differs from %s; run go test -update if the change is intended", samplePath)
	}
}

// The sample corpus, with a malformed line and a blank line added, runs
// through the local host in small chunks; the result object matches the
// golden file and the generator's own expectation.
func TestKeycountOnSample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sample, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	corpus := append(append([]byte{}, sample...), []byte("not json\n\n{\"id\":0}\n")...)
	be, err := embedded.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if err := be.Blobs.Put(ctx, "inputs/sample.ndjson", bytes.NewReader(corpus)); err != nil {
		t.Fatal(err)
	}
	reg := engine.NewRegistry()
	if err := keycount.Register(reg); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{Engine: e, Logger: log, Visibility: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(hctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-h.Ready():
	case err := <-done:
		t.Fatal(err)
	}

	j, err := e.Submit(ctx, keycount.Args{}, engine.SubmitOptions{Input: job.Input{Type: job.InputLines, Key: "inputs/sample.ndjson"}, ChunkSize: 700})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for !j.State.Terminal() {
		if time.Now().After(deadline) {
			t.Fatalf("job still %s", j.State)
		}
		time.Sleep(20 * time.Millisecond)
		if j, err = e.Get(ctx, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	wantChunks := (int64(len(corpus)) + 699) / 700
	if j.State != job.StateSucceeded || j.Counters.ChunksDone != wantChunks || j.Counters.ItemsDone != 202 {
		t.Fatalf("job %s (%s) %+v; want %d chunks and 202 items (200 records, 2 skipped)", j.State, j.Error, j.Counters, wantChunks)
	}
	rc, err := be.Blobs.Get(ctx, j.Result)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()

	golden := filepath.Join("testdata", "sample-result.golden.json")
	var res keycount.Result
	if err := json.Unmarshal(got, &res); err != nil {
		t.Fatal(err)
	}
	res.Chunks = 0 // depends on the chunk size, not on the data
	norm, _ := json.MarshalIndent(res, "", "  ")
	if *update {
		if err := os.WriteFile(golden, norm, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(norm)); diff != "" {
		t.Fatalf("result differs from %s (-want +got):\n%s", golden, diff)
	}

	expect, _ := keycount.GenerateCorpus(io.Discard, 200, 1)
	if res.Records != 200 || res.Skipped != 2 || len(res.Keys) != len(expect) {
		t.Fatalf("result: %d records, %d skipped, %d keys", res.Records, res.Skipped, len(res.Keys))
	}
	for _, k := range res.Keys {
		if w := expect[k.Key]; w.Count != k.Count || w.Sum-k.Sum > 1e-6 || k.Sum-w.Sum > 1e-6 {
			t.Fatalf("key %s: %+v, want %+v", k.Key, k.Agg, w)
		}
	}
}
