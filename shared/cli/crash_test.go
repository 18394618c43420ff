package cli_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/api"
	"github.com/slicework/slicework/shared/cli"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/recompute"
)

// TestMain lets the test binary act as the slicework command, so crash
// tests can run the real host as a child process and kill it.
func TestMain(m *testing.M) {
	if os.Getenv("SLICEWORK_TEST_AS_CLI") == "1" {
		os.Exit(cli.Main(os.Args[1:]))
	}
	os.Exit(emulator.Run(m))
}

// child is a `slicework serve` process.
type child struct {
	cmd  *exec.Cmd
	addr string
}

func startServe(t *testing.T, dir, logName string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "serve", "--data", dir, "--addr", "127.0.0.1:0",
		"--visibility", "5s", "--workers", "4", "--sweep-every", "1s", "--log", filepath.Join(dir, logName))
	cmd.Env = append(os.Environ(), "SLICEWORK_TEST_AS_CLI=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, logName))
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s (tail):\n%s\nstderr:\n%s", logName, b, stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on http://") {
				lines <- sc.Text()
			}
		}
		io.Copy(io.Discard, out)
	}()
	select {
	case l := <-lines:
		addr := strings.Fields(strings.SplitN(l, "http://", 2)[1])[0]
		return &child{cmd: cmd, addr: addr}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not start; stderr:\n%s", stderr.String())
	}
	return nil
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// waitJob polls the API until cond holds for the job.
func waitJob(t *testing.T, c *child, id string, within time.Duration, cond func(*api.JobView) bool) *api.JobView {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var v api.JobView
		getJSON(t, fmt.Sprintf("http://%s/jobs/%s", c.addr, id), &v)
		if cond(&v) {
			return &v
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: condition not met within %s: state %s counters %+v", id, within, v.State, v.Counters)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The local host is killed with SIGKILL in the middle of a 1,000-chunk job
// and started again on the same data directory: the job finishes with exact
// counts, every chunk has exactly one recorded attempt, and the result's
// checksum shows every id counted once.
func TestSIGKILLMidJobThenRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts child processes")
	}
	dir := t.TempDir()
	first := startServe(t, dir, "first.log")

	const ids, chunkSize = 1_000_000, 1000
	body := fmt.Sprintf(`{"kind":"recompute","args":{"work_ms":15},"input":{"type":"ids","start":0,"end":%d},"chunk_size":%d}`, ids, chunkSize)
	resp, err := http.Post("http://"+first.addr+"/jobs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var submitted api.JobView
	if err := json.NewDecoder(resp.Body).Decode(&submitted); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %v", resp.StatusCode, err)
	}
	resp.Body.Close()

	mid := waitJob(t, first, submitted.ID, 2*time.Minute, func(v *api.JobView) bool { return v.Counters.ChunksDone >= 150 })
	if err := first.cmd.Process.Signal(os.Kill); err != nil {
		t.Fatal(err)
	}
	_ = first.cmd.Wait()
	if mid.Counters.ChunksDone >= ids/chunkSize {
		t.Fatalf("job finished before the kill: %+v", mid.Counters)
	}

	second := startServe(t, dir, "second.log")
	done := waitJob(t, second, submitted.ID, 3*time.Minute, func(v *api.JobView) bool { return v.State.Terminal() })
	c := done.Counters
	if done.State != job.StateSucceeded || c.ChunksTotal != 1000 || c.ChunksDone != 1000 || c.ChunksFailed != 0 || c.ItemsDone != ids || c.Retries != 0 {
		t.Fatalf("after restart: %s %q %+v; want succeeded with 1000 chunks and %d items exactly", done.State, done.Error, c, ids)
	}

	// Every chunk has exactly one recorded attempt.
	seen := map[int64]bool{}
	cursor := ""
	for {
		var page job.ChunkPage
		getJSON(t, fmt.Sprintf("http://%s/jobs/%s/chunks?limit=1000&cursor=%s", second.addr, submitted.ID, cursor), &page)
		for _, ch := range page.Chunks {
			if len(ch.Attempts) != 1 || ch.State != job.ChunkSucceeded || seen[ch.Index] {
				t.Fatalf("chunk %d: %s with %d attempts (seen before: %v)", ch.Index, ch.State, len(ch.Attempts), seen[ch.Index])
			}
			seen[ch.Index] = true
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	if len(seen) != 1000 {
		t.Fatalf("%d chunk records, want 1000", len(seen))
	}

	// The result object sums every chunk's output once.
	raw, err := os.ReadFile(filepath.Join(dir, "blobs", filepath.FromSlash(done.Result)))
	if err != nil {
		t.Fatal(err)
	}
	var got recompute.Output
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	var want uint64
	for id := int64(0); id < ids; id++ {
		want += recompute.Checksum(id)
	}
	if got.IDs != ids || got.Checksum != want || got.Chunks != 1000 {
		t.Fatalf("result %+v, want %d ids, checksum %d, 1000 chunks", got, ids, want)
	}
}
