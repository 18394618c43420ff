package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/slicework/slicework/shared/awsmetrics"
	"github.com/slicework/slicework/shared/blob/fsblob"
	"github.com/slicework/slicework/shared/cost"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/keycount"
	"github.com/slicework/slicework/shared/kinds/recompute"
)

type runFlags struct {
	hostFlags
	kind       string
	records    int64
	seed       uint64
	chunkBytes int64
	timeout    time.Duration
}

func runCmd() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run",
		Short: "Run a sample job end to end on the embedded backend, with live progress and a report",
		Long: `run starts the local function host on the embedded backend, submits a sample job
and shows its progress, then prints a report and exits 0 if the job succeeded.

  --kind keycount   (default) aggregate a generated NDJSON corpus per key; Finish writes one result object
  --kind recompute  recompute ids 1..1,000,000 in ranges; some chunks fail temporarily, one for good`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSample(cmd.Context(), f, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f.register(c)
	c.Flags().StringVar(&f.kind, "kind", keycount.Kind, "sample job: keycount or recompute")
	c.Flags().Int64Var(&f.records, "records", 100_000, "keycount: corpus records")
	c.Flags().Uint64Var(&f.seed, "seed", 1, "keycount: corpus seed")
	c.Flags().Int64Var(&f.chunkBytes, "chunk-bytes", 256<<10, "keycount: bytes per chunk")
	c.Flags().DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	return c
}

func runSample(ctx context.Context, f runFlags, stdout, stderr io.Writer) error {
	if f.logFile == "" {
		f.logFile = filepath.Join(f.data, "slicework.log")
	}
	finished := make(chan struct{}, 1)
	s, err := openStack(ctx, f.hostFlags, "127.0.0.1:0", stdout, stderr, func() {
		select {
		case finished <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer s.close()

	var req engine.Request
	var check func(*job.Job) (string, error)
	switch f.kind {
	case keycount.Kind:
		key := fmt.Sprintf("inputs/corpus-%d-%d.ndjson", f.records, f.seed)
		want, err := prepareCorpus(ctx, s, key, f.records, f.seed, stdout)
		if err != nil {
			return err
		}
		req = engine.Request{Kind: keycount.Kind, Input: job.Input{Type: job.InputLines, Key: key, Format: job.FormatNDJSON}, ChunkSize: f.chunkBytes, Tags: []string{"sample"}}
		check = func(j *job.Job) (string, error) { return checkKeycount(ctx, s, j, want, f.records) }
	case recompute.Kind:
		poison, panicky := int64(42), int64(13)
		args, _ := json.Marshal(recompute.Args{FlakyEvery: 7, FlakyAttempts: 2, PoisonChunk: &poison, PanicChunk: &panicky})
		req = engine.Request{Kind: recompute.Kind, Args: args, Input: job.Input{Type: job.InputIDRange, Start: 1, End: 1_000_001}, Tags: []string{"sample"}}
		check = func(j *job.Job) (string, error) { return checkRecompute(ctx, s, j, 1, 1_000_001, 10_000, poison) }
	default:
		return fmt.Errorf("unknown sample kind %q (keycount, recompute)", f.kind)
	}

	hctx, stopHost := context.WithCancel(ctx)
	defer stopHost()
	errc := make(chan error, 1)
	go func() { errc <- s.host.Run(hctx) }()
	select {
	case err := <-errc:
		return err
	case <-s.host.Ready():
	}
	fmt.Fprintf(stdout, "local host up: API http://%s, %s, log %s\n", s.host.Addr(), s.where, f.logFile)

	var before awsmetrics.Report
	if s.metrics != nil {
		before = s.metrics.Snapshot()
	}
	j, err := s.eng.SubmitRequest(ctx, req)
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Fprintf(stdout, "submitted job %s (%s)\n", j.ID, j.Kind)

	pp := &progressPrinter{w: stdout, tty: isTTY(stdout)}
	deadline := time.Now().Add(f.timeout)
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for {
		j, err = s.view.GetJob(ctx, j.ID)
		if err != nil {
			return err
		}
		pp.update(j, engine.ProgressOf(j, time.Now()), time.Now())
		if j.State.Terminal() {
			break
		}
		if time.Now().After(deadline) {
			pp.done()
			return fmt.Errorf("job %s still %s after %s", j.ID, j.State, f.timeout)
		}
		select {
		case <-ctx.Done():
			pp.done()
			return ctx.Err()
		case <-tick.C:
		case <-finished:
		}
	}
	pp.done()
	stopHost()
	<-errc
	var spent *awsmetrics.Report
	if s.metrics != nil {
		d := s.metrics.Snapshot().Sub(before)
		spent = &d
	}

	verdict, checkErr := "", error(nil)
	if j.State == job.StateSucceeded {
		verdict, checkErr = check(j)
	}
	if err := printReport(ctx, stdout, s, j, verdict, checkErr, f.logFile, spent); err != nil {
		return err
	}
	if j.State != job.StateSucceeded {
		return exitCode(1)
	}
	if checkErr != nil {
		return exitCode(2)
	}
	return nil
}

func prepareCorpus(ctx context.Context, s *stack, key string, records int64, seed uint64, out io.Writer) (map[string]keycount.Agg, error) {
	// The expectation is recomputed from the generator every time; the
	// object is written only when missing.
	var buf bytes.Buffer
	start := time.Now()
	want, err := keycount.GenerateCorpus(&buf, records, seed)
	if err != nil {
		return nil, err
	}
	if info, err := s.be.Blobs.Head(ctx, key); err == nil && info.Size == int64(buf.Len()) {
		return want, nil
	}
	if err := s.be.Blobs.Put(ctx, key, &buf); err != nil {
		return nil, fmt.Errorf("store corpus: %w", err)
	}
	fmt.Fprintf(out, "generated corpus %s: %d records in %s\n", key, records, time.Since(start).Round(time.Millisecond))
	return want, nil
}

func checkKeycount(ctx context.Context, s *stack, j *job.Job, want map[string]keycount.Agg, records int64) (string, error) {
	var res keycount.Result
	if err := readJSON(ctx, s, j.Result, &res); err != nil {
		return "", err
	}
	if res.Records != records {
		return "", fmt.Errorf("result has %d records, corpus has %d", res.Records, records)
	}
	if len(res.Keys) != len(want) {
		return "", fmt.Errorf("result has %d keys, corpus has %d", len(res.Keys), len(want))
	}
	for _, k := range res.Keys {
		w := want[k.Key]
		if k.Count != w.Count || fmt.Sprintf("%.2f", k.Sum) != fmt.Sprintf("%.2f", w.Sum) {
			return "", fmt.Errorf("key %s: got count %d sum %.2f, want %d %.2f", k.Key, k.Count, k.Sum, w.Count, w.Sum)
		}
	}
	return fmt.Sprintf("result matches the corpus: %d records, %d keys, every count and sum", res.Records, len(res.Keys)), nil
}

func checkRecompute(ctx context.Context, s *stack, j *job.Job, start, end, step, poison int64) (string, error) {
	var res recompute.Output
	if err := readJSON(ctx, s, j.Result, &res); err != nil {
		return "", err
	}
	var want recompute.Output
	for id := start; id < end; id++ {
		if (id-start)/step == poison {
			continue
		}
		want.IDs++
		want.Checksum += recompute.Checksum(id)
	}
	if res.IDs != want.IDs || res.Checksum != want.Checksum {
		return "", fmt.Errorf("result %d ids checksum %d, want %d ids checksum %d", res.IDs, res.Checksum, want.IDs, want.Checksum)
	}
	return fmt.Sprintf("result matches: %d ids, checksum %d (the failed chunk's ids excluded)", res.IDs, res.Checksum), nil
}

func readJSON(ctx context.Context, s *stack, key string, v any) error {
	if key == "" {
		return errors.New("job has no result object")
	}
	rc, err := s.be.Blobs.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	return json.NewDecoder(rc).Decode(v)
}

// printReport prints the job's outcome; spent, when set, holds the AWS
// requests the job made, which are printed and priced.
func printReport(ctx context.Context, w io.Writer, s *stack, j *job.Job, verdict string, checkErr error, logFile string, spent *awsmetrics.Report) error {
	p := engine.ProgressOf(j, time.Now())
	c := j.Counters
	var chunks []*job.Chunk
	q := job.ChunkQuery{Limit: job.MaxPageSize}
	for {
		page, err := s.eng.Chunks(ctx, j.ID, q)
		if err != nil {
			return err
		}
		chunks = append(chunks, page.Chunks...)
		if page.Next == "" {
			break
		}
		q.Cursor = page.Next
	}
	var attempts int
	var handlerTime time.Duration
	var troubled []*job.Chunk
	for _, ch := range chunks {
		attempts += len(ch.Attempts)
		for _, a := range ch.Attempts {
			handlerTime += a.Duration
		}
		if ch.State == job.ChunkFailed || len(ch.Attempts) > 1 {
			troubled = append(troubled, ch)
		}
	}
	// Failed chunks first, then those that needed retries, each by index.
	sort.Slice(troubled, func(a, b int) bool {
		fa, fb := troubled[a].State == job.ChunkFailed, troubled[b].State == job.ChunkFailed
		if fa != fb {
			return fa
		}
		return troubled[a].Index < troubled[b].Index
	})

	fmt.Fprintf(w, "\n── report ─────────────────────────────────────────────\n")
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "  %-11s %s\n", k, fmt.Sprintf(format, a...)) }
	row("job", "%s  kind %s  state %s", j.ID, j.Kind, strings.ToUpper(string(j.State)))
	if j.Error != "" {
		row("reason", "%s", j.Error)
	}
	row("chunks", "%d total: %d succeeded, %d failed", c.ChunksTotal, c.ChunksDone, c.ChunksFailed)
	row("items", "%d done, %d in failed chunks", c.ItemsDone, c.ItemsFailed)
	row("attempts", "%d (%d retries)", attempts, c.Retries)
	row("duration", "%s", p.Elapsed.Round(time.Millisecond))
	row("throughput", "%.0f items/s, %.1f chunks/s", p.ItemsPerSec, float64(c.ChunksDone+c.ChunksFailed)/max(p.Elapsed.Seconds(), 1e-9))
	if len(troubled) == 0 {
		row("failures", "none")
	} else {
		row("failures", "%d chunk(s) needed more than one attempt or failed:", len(troubled))
		for i, ch := range troubled {
			if i == 10 {
				fmt.Fprintf(w, "              … %d more (GET /jobs/%s/chunks)\n", len(troubled)-10, j.ID)
				break
			}
			fmt.Fprintf(w, "    chunk %-5d %s after %d attempt(s)\n", ch.Index, ch.State, len(ch.Attempts))
			for _, a := range ch.Attempts {
				if a.Error == "" {
					continue
				}
				msg := a.Error
				if a.Stack != "" {
					msg += " [stack recorded]"
				}
				fmt.Fprintf(w, "      #%d %-9s %s\n", a.N, a.Outcome, msg)
			}
		}
	}
	if j.Result != "" {
		loc := j.Result
		if fb, ok := s.be.Blobs.(*fsblob.Store); ok {
			if p, err := fb.Path(j.Result); err == nil {
				if abs, err := filepath.Abs(p); err == nil {
					loc += "  →  " + abs
				}
			}
		}
		row("result", "%s", loc)
	}
	switch {
	case checkErr != nil:
		row("check", "FAILED: %v", checkErr)
	case verdict != "":
		row("check", "%s", verdict)
	}
	inv, fails := s.host.Invocations()
	var parts []string
	for k, v := range inv {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	row("invocations", "%s (failed %d)", strings.Join(parts, ", "), sum(fails))
	row("log", "%s", logFile)
	if spent == nil {
		return nil
	}
	fmt.Fprintf(w, "\n── AWS requests of the job (submit to finish) ─────────\n")
	if err := spent.WriteTable(w); err != nil {
		return err
	}
	calls := 0
	for fn, n := range inv {
		if fn != "scheduler" { // the sweeper runs once a minute whatever the jobs
			calls += n
		}
	}
	fmt.Fprintf(w, "\n── orchestration cost ─────────────────────────────────\n")
	meanChunk := 0.0
	if attempts > 0 {
		meanChunk = handlerTime.Seconds() / float64(attempts)
	}
	u := cost.UsageFrom(*spent, calls, c.ChunksTotal, c.ItemsDone+c.ItemsFailed, meanChunk)
	if err := cost.WriteTable(w, u, cost.USEast1); err != nil {
		fmt.Fprintf(w, "  %v\n", err)
	}
	return nil
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
