package cost

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/awsmetrics"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestUsageFrom(t *testing.T) {
	t.Parallel()
	r := awsmetrics.Report{Rows: []awsmetrics.Row{
		{Service: "DynamoDB", Operation: "GetItem", Calls: 40, Attempts: 41, RCU: 20},
		{Service: "DynamoDB", Operation: "UpdateItem", Calls: 12, Attempts: 12, WCU: 12.5},
		{Service: "S3", Operation: "DeleteObject", Calls: 3, Attempts: 3},
		{Service: "S3", Operation: "GetObject", Calls: 10, Attempts: 11},
		{Service: "S3", Operation: "HeadObject", Calls: 1, Attempts: 1},
		{Service: "S3", Operation: "PutObject", Calls: 10, Attempts: 10},
		{Service: "SQS", Operation: "ReceiveMessage", Calls: 5, Attempts: 6},
		{Service: "SQS", Operation: "SendMessageBatch", Calls: 2, Attempts: 2},
	}}
	got := UsageFrom(r, 3, 10, 1000, 0.25)
	want := Usage{
		Chunks: 10, Items: 1000, SQSRequests: 8, DynamoWRU: 12.5, DynamoRRU: 20, DynamoCalls: 52,
		S3Put: 10, S3Get: 12, Invocations: 3, ChunkSeconds: 0.25,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("UsageFrom (-want +got):\n%s", d)
	}
}

func TestCosts(t *testing.T) {
	t.Parallel()
	u := Usage{Chunks: 1000, Items: 1_000_000, SQSRequests: 300, DynamoWRU: 1500, DynamoRRU: 2000, S3Put: 1000, S3Get: 1000, Invocations: 100, ChunkSeconds: 0.23}
	p := USEast1
	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		// 300×0.4e-6 + 1500×0.625e-6 + 2000×0.125e-6 + 1000×5e-6 + 1000×0.4e-6 + 100×0.2e-6
		{"slicework", u.Cost(p), 0.00012 + 0.0009375 + 0.00025 + 0.005 + 0.0004 + 0.00002},
		// per chunk: 2 transitions + 1 Lambda request
		{"standard", DistributedMap{}.Cost(u, p), 1000 * (2*0.025e-3 + 0.2e-6)},
		// per chunk: 1 transition + 1 Lambda request + 1 Express request + 0.3 s (0.23 rounded up to 100 ms) at 64 MB
		{"express", DistributedMap{Express: true}.Cost(u, p), 1000 * (0.025e-3 + 0.2e-6 + 1e-6 + 0.3*0.064*0.00001667)},
		{"express minimum", DistributedMap{Express: true}.Cost(Usage{Chunks: 1, ChunkSeconds: 0.001}, p), 0.025e-3 + 0.2e-6 + 1e-6 + 0.1*0.064*0.00001667},
	} {
		if !near(tc.got, tc.want) {
			t.Errorf("%s: %.10f, want %.10f", tc.name, tc.got, tc.want)
		}
	}
}

func TestWriteTableGolden(t *testing.T) {
	t.Parallel()
	u := Usage{Chunks: 29, Items: 100_000, SQSRequests: 17, DynamoWRU: 44, DynamoRRU: 70, DynamoCalls: 120, S3Put: 30, S3Get: 30, Invocations: 8, ChunkSeconds: 0.02}
	var buf bytes.Buffer
	if err := WriteTable(&buf, u, USEast1); err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.golden")
	if *update {
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), buf.String()); d != "" {
		t.Errorf("table (-golden +got):\n%s", d)
	}
	if err := WriteTable(&buf, Usage{}, USEast1); err == nil {
		t.Error("WriteTable of an empty job succeeded")
	}
}
