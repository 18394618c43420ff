package cli

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/faults"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/keycount"
)

// sampleRun runs sample job (a) through the run command's code path and
// returns its output. The run checks the job's result against the corpus
// and fails on any difference.
func sampleRun(t *testing.T, bf backendFlags, records int64) string {
	t.Helper()
	bf.data = t.TempDir()
	f := runFlags{
		// A task lost to an injected fault (a send that failed every
		// retry) is re-driven by the sweeper after staleAfter, as in a
		// deployment, but within the test's time.
		hostFlags:  hostFlags{backendFlags: bf, workers: 4, visibility: 15 * time.Second, sweep: 10 * time.Second, staleAfter: 30 * time.Second},
		kind:       keycount.Kind,
		records:    records,
		seed:       7,
		chunkBytes: 48 << 10,
		timeout:    5 * time.Minute,
	}
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if err := runSample(ctx, f, &out, &errOut); err != nil {
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	return out.String()
}

var chunksLine = regexp.MustCompile(`chunks\s+(\d+) total: (\d+) succeeded, (\d+) failed`)

// checkExact asserts that the report shows every chunk succeeded and the
// result matched the corpus record for record.
func checkExact(t *testing.T, out string, records int64) {
	t.Helper()
	m := chunksLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no chunk counts in the report:\n%s", out)
	}
	total, _ := strconv.Atoi(m[1])
	if total < 2 || m[2] != m[1] || m[3] != "0" {
		t.Errorf("chunks: %s total, %s succeeded, %s failed; want all of ≥2 succeeded", m[1], m[2], m[3])
	}
	if want := "result matches the corpus: " + strconv.FormatInt(records, 10) + " records"; !strings.Contains(out, want) {
		t.Errorf("report lacks %q:\n%s", want, out)
	}
	if !strings.Contains(out, strings.ToUpper(string(job.StateSucceeded))) {
		t.Errorf("job did not succeed:\n%s", out)
	}
}

func awsFlags(t *testing.T, k emulator.Kind, client *http.Client) backendFlags {
	name := "cli-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	name = regexp.MustCompile(`[^a-z0-9-]`).ReplaceAllString(name, "")
	if len(name) > 40 {
		name = name[:40]
	}
	return backendFlags{
		backend: "aws", endpoint: emulator.Endpoint(t, k), region: emulator.Region,
		table: name, bucket: name, queuePrefix: name + "-", httpClient: client,
	}
}

func TestSampleJobEmbedded(t *testing.T) {
	t.Parallel()
	out := sampleRun(t, backendFlags{backend: "embedded"}, 20_000)
	checkExact(t, out, 20_000)
	if strings.Contains(out, "orchestration cost") {
		t.Error("the embedded backend priced AWS requests")
	}
}

// Sample job (a) on DynamoDB, SQS and S3, served by MiniStack.
func TestSampleJobOnMiniStack(t *testing.T) {
	t.Parallel()
	out := sampleRun(t, awsFlags(t, emulator.MiniStack, nil), 20_000)
	t.Log(out)
	checkExact(t, out, 20_000)
	for _, want := range []string{"AWS requests of the job", "SendMessageBatch", "orchestration cost", "Step Functions Distributed Map"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// Sample job (a) on every emulator while a fraction of all AWS calls fail:
// throttling and 5xx answers before the request reaches the emulator, and
// 5xx answers replacing the response of requests that did take effect.
func TestSampleJobUnderInjectedFaults(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			lost := &faults.Transport{Rate: 0.03, Seed: 2, Mode: faults.After}
			failing := &faults.Transport{Base: lost, Rate: 0.10, Seed: 1, Mode: faults.Before}
			out := sampleRun(t, awsFlags(t, k, &http.Client{Transport: failing}), 20_000)
			checkExact(t, out, 20_000)
			t.Log(out)
			perService := map[faults.Service]int{}
			for key, n := range failing.Injected() {
				perService[key.Service] += n
			}
			for key, n := range lost.Injected() {
				perService[key.Service] += n
			}
			for _, s := range []faults.Service{faults.S3, faults.SQS, faults.DynamoDB} {
				if perService[s] == 0 {
					t.Errorf("no faults injected into %s calls (of %d requests)", s, failing.Seen())
				}
			}
			t.Logf("injected before: %v; after (lost responses): %v; requests seen: %d", failing.Injected(), lost.Injected(), failing.Seen())
		})
	}
}
