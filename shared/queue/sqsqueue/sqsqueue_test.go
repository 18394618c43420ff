package sqsqueue_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/queue/queuetest"
	"github.com/slicework/slicework/shared/queue/sqsqueue"
)

func TestMain(m *testing.M) { os.Exit(emulator.Run(m)) }

// long is a visibility that outlives every test here.
const long = time.Minute

// TestConformance runs the port's suite against every emulator; each
// subtest of the suite gets its own queue prefix.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, kind := range emulator.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			client := awsconfig.SQS(emulator.Config(t, kind, nil))
			queuetest.Run(t, func(t *testing.T) queue.Queue {
				if kind == emulator.Moto && strings.HasSuffix(t.Name(), "/ConcurrentConsumers") {
					// Reproduced with plain boto3 against moto_server 5.2.5: 8
					// threads receiving 400 messages with a 60 s visibility got
					// 1 in 2 runs a message twice.
					t.Skip("moto deviation: ReceiveMessage is not atomic across concurrent requests " +
						"(the threaded server marks a message received without a lock), so concurrent " +
						"consumers sometimes both get the same message within its visibility timeout")
				}
				return sqsqueue.New(client, sqsqueue.Options{Prefix: prefix(t)})
			})
		})
	}
}

// call is one SQS request seen by a recorder.
type call struct {
	target string // operation, e.g. "SendMessageBatch"
	body   map[string]any
}

// recorder is an http.RoundTripper that records the SQS (JSON protocol)
// requests it carries and lets a test answer some of them itself.
type recorder struct {
	next http.RoundTripper
	// fault, if set, may answer a request instead of the emulator.
	fault func(c call) *http.Response

	mu    sync.Mutex
	calls []call
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var raw []byte
	if req.Body != nil {
		var err error
		if raw, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(raw))
	}
	c := call{target: strings.TrimPrefix(req.Header.Get("X-Amz-Target"), "AmazonSQS.")}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &c.body); err != nil {
			return nil, fmt.Errorf("recorder: request body: %w", err)
		}
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	fault := r.fault
	r.mu.Unlock()
	if fault != nil {
		if resp := fault(c); resp != nil {
			resp.Request = req
			return resp, nil
		}
	}
	return r.next.RoundTrip(req)
}

// of returns the recorded calls of operation target.
func (r *recorder) of(target string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.target == target {
			out = append(out, c)
		}
	}
	return out
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = nil
}

// newClient returns an SQS client for emulator kind whose requests pass
// through a new recorder.
func newClient(t *testing.T, kind emulator.Kind) (*sqs.Client, *recorder) {
	t.Helper()
	rec := &recorder{next: http.DefaultTransport.(*http.Transport).Clone()}
	// The client goes in through the service options, not emulator.Config:
	// the config loader refuses a plain *http.Client when AWS_CA_BUNDLE is
	// set, and the emulators are plain HTTP anyway.
	cfg := emulator.Config(t, kind, nil)
	return awsconfig.SQS(cfg, func(o *sqs.Options) { o.HTTPClient = &http.Client{Transport: rec} }), rec
}

// forEach runs f as a parallel subtest per emulator kind.
func forEach(t *testing.T, f func(t *testing.T, kind emulator.Kind)) {
	t.Helper()
	for _, kind := range emulator.Kinds {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			f(t, kind)
		})
	}
}

func random(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// prefix returns a queue prefix of its own for a test.
func prefix(t *testing.T) string { return "p" + random(t) + "-" }

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t *testing.T, ctx context.Context, q queue.Queue, name string, cfg queue.Config) {
	t.Helper()
	if err := q.Create(ctx, name, cfg); err != nil {
		t.Fatalf("Create %s: %v", name, err)
	}
}

// receiveAll receives until it holds n messages, failing after 30 s.
func receiveAll(t *testing.T, ctx context.Context, q queue.Queue, name string, n int) []queue.Message {
	t.Helper()
	var got []queue.Message
	end := time.Now().Add(30 * time.Second)
	for len(got) < n && time.Now().Before(end) {
		ms, err := q.Receive(ctx, name, queue.MaxBatch, long, time.Second)
		if err != nil {
			t.Fatalf("Receive %s: %v", name, err)
		}
		got = append(got, ms...)
	}
	if len(got) != n {
		t.Fatalf("received %d of %d messages", len(got), n)
	}
	return got
}

// jsonResponse is a 200 response of the SQS JSON protocol.
func jsonResponse(v any) *http.Response {
	b, _ := json.Marshal(v)
	return &http.Response{
		StatusCode:    http.StatusOK,
		Status:        "200 OK",
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "X-Amzn-Requestid": {"fault-injected"}},
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
	}
}

// failAll answers a batch request with every entry failed.
func failAll(c call, code, msg string, senderFault bool) *http.Response {
	var failed []map[string]any
	entries, _ := c.body["Entries"].([]any)
	for _, e := range entries {
		failed = append(failed, map[string]any{"Id": e.(map[string]any)["Id"], "Code": code, "Message": msg, "SenderFault": senderFault})
	}
	return jsonResponse(map[string]any{"Successful": []any{}, "Failed": failed})
}

func TestBatchSplitting(t *testing.T) {
	t.Parallel()
	small := func(i int) []byte { return fmt.Appendf(nil, "small-%03d", i) }
	big := func(i, n int) []byte {
		b := bytes.Repeat([]byte{'a' + byte(i%26)}, n)
		copy(b, fmt.Sprintf("big-%03d-", i))
		return b
	}
	cases := []struct {
		name string
		msgs func() [][]byte
		// want is the sorted entry counts of the SendMessageBatch calls.
		want []int
	}{
		{"by count", func() [][]byte {
			var out [][]byte
			for i := range 25 {
				out = append(out, small(i))
			}
			return out
		}, []int{5, 10, 10}},
		{"by bytes", func() [][]byte { // 25 × 300 KiB: 3 fit in 1 MiB
			var out [][]byte
			for i := range 25 {
				out = append(out, big(i, 300<<10))
			}
			return out
		}, []int{1, 3, 3, 3, 3, 3, 3, 3, 3}},
		{"full-size bodies", func() [][]byte { // a 1 MiB body fills a batch alone
			return [][]byte{big(0, queue.MaxBodyBytes), big(1, queue.MaxBodyBytes), small(2), small(3)}
		}, []int{1, 1, 2}},
		{"full-size body between", func() [][]byte {
			return [][]byte{small(0), big(1, queue.MaxBodyBytes), small(2)}
		}, []int{1, 1, 1}},
		{"exactly 1 MiB in 4", func() [][]byte {
			return [][]byte{big(0, 256<<10), big(1, 256<<10), big(2, 256<<10), big(3, 256<<10), small(4)}
		}, []int{1, 4}},
	}
	forEach(t, func(t *testing.T, kind emulator.Kind) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				ctx := testContext(t)
				client, rec := newClient(t, kind)
				q := sqsqueue.New(client, sqsqueue.Options{Prefix: prefix(t)})
				mustCreate(t, ctx, q, "q", queue.Config{Visibility: long})
				bodies := c.msgs()
				var out []queue.Outgoing
				for _, b := range bodies {
					out = append(out, queue.Outgoing{Body: b})
				}
				rec.reset()
				if err := q.Send(ctx, "q", out...); err != nil {
					t.Fatalf("Send: %v", err)
				}
				var counts []int
				for _, call := range rec.of("SendMessageBatch") {
					entries := call.body["Entries"].([]any)
					payload := 0
					for _, e := range entries {
						payload += len(e.(map[string]any)["MessageBody"].(string))
					}
					if len(entries) > queue.MaxBatch || payload > sqsqueue.MaxBatchPayload {
						t.Errorf("a SendMessageBatch call has %d entries and %d body bytes", len(entries), payload)
					}
					counts = append(counts, len(entries))
				}
				slices.Sort(counts)
				if !slices.Equal(counts, c.want) {
					t.Errorf("SendMessageBatch entry counts = %v, want %v", counts, c.want)
				}
				got := receiveAll(t, ctx, q, "q", len(bodies))
				want := map[string]int{}
				for _, b := range bodies {
					want[string(b)]++
				}
				for _, m := range got {
					want[string(m.Body)]--
				}
				for b, n := range want {
					if n != 0 {
						t.Errorf("body %.12q… (%d bytes): %d more sent than received", b, len(b), n)
					}
				}
			})
		}
	})
}

// TestURLs checks that a name in Options.URLs is never looked up, and that
// other names are looked up once however many calls use them concurrently.
func TestURLs(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		useURLs bool
		want    int // GetQueueUrl calls
	}{
		{"from Options.URLs", true, 0},
		{"looked up once", false, 1},
	}
	forEach(t, func(t *testing.T, kind emulator.Kind) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				ctx := testContext(t)
				pre := prefix(t)
				admin := sqsqueue.New(awsconfig.SQS(emulator.Config(t, kind, nil)), sqsqueue.Options{Prefix: pre})
				mustCreate(t, ctx, admin, "q", queue.Config{Visibility: long})

				client, rec := newClient(t, kind)
				opts := sqsqueue.Options{Prefix: pre}
				if c.useURLs {
					out, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(pre + "q")})
					if err != nil {
						t.Fatal(err)
					}
					opts.URLs = map[string]string{"q": aws.ToString(out.QueueUrl)}
				}
				q := sqsqueue.New(client, opts)
				rec.reset()

				var wg sync.WaitGroup
				for i := range 8 {
					wg.Go(func() {
						if err := q.Send(ctx, "q", queue.Outgoing{Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
							t.Errorf("Send: %v", err)
						}
						if _, err := q.Stats(ctx, "q"); err != nil {
							t.Errorf("Stats: %v", err)
						}
					})
				}
				wg.Wait()
				ms := receiveAll(t, ctx, q, "q", 8)
				if err := q.ChangeVisibility(ctx, "q", queue.VisibilityChange{Receipt: ms[0].Receipt, Timeout: long}); err != nil {
					t.Errorf("ChangeVisibility: %v", err)
				}
				for len(ms) > 0 {
					k := min(len(ms), queue.MaxBatch)
					var receipts []string
					for _, m := range ms[:k] {
						receipts = append(receipts, m.Receipt)
					}
					if err := q.Delete(ctx, "q", receipts...); err != nil {
						t.Errorf("Delete: %v", err)
					}
					ms = ms[k:]
				}
				if n := len(rec.of("GetQueueUrl")); n != c.want {
					t.Errorf("%d GetQueueUrl calls, want %d", n, c.want)
				}
				if n := len(rec.of("SendMessageBatch")); n != 8 {
					t.Errorf("%d SendMessageBatch calls, want 8 (the recorder sees the traffic)", n)
				}
			})
		}
	})
}

// TestSecondsRoundUp checks the durations SQS receives: every one rounded
// up to whole seconds.
func TestSecondsRoundUp(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, kind emulator.Kind) {
		ctx := testContext(t)
		client, rec := newClient(t, kind)
		q := sqsqueue.New(client, sqsqueue.Options{Prefix: prefix(t)})

		mustCreate(t, ctx, q, "q", queue.Config{Visibility: 1500 * time.Millisecond})
		url, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(rec.of("CreateQueue")[0].body["QueueName"].(string))})
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		if v := attrs.Attributes["VisibilityTimeout"]; v != "2" {
			t.Errorf("queue VisibilityTimeout = %q for 1.5 s, want 2", v)
		}

		start := time.Now()
		if err := q.Send(ctx, "q",
			queue.Outgoing{Body: []byte("a"), Delay: 1100 * time.Millisecond},
			queue.Outgoing{Body: []byte("b"), Delay: time.Millisecond},
			queue.Outgoing{Body: []byte("c"), Delay: 2 * time.Second},
			queue.Outgoing{Body: []byte("d")},
		); err != nil {
			t.Fatal(err)
		}
		var delays []float64
		for _, e := range rec.of("SendMessageBatch")[0].body["Entries"].([]any) {
			d, _ := e.(map[string]any)["DelaySeconds"].(float64) // absent means 0
			delays = append(delays, d)
		}
		if want := []float64{2, 1, 2, 0}; !slices.Equal(delays, want) {
			t.Errorf("DelaySeconds = %v, want %v", delays, want)
		}
		// Behaviour agrees: "a" (1.1 s) is not visible before 1.1 s.
		var ms []queue.Message
		for len(ms) < 4 && time.Since(start) < 20*time.Second {
			got, err := q.Receive(ctx, "q", queue.MaxBatch, 1500*time.Millisecond, 300*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range got {
				if string(m.Body) == "a" && time.Since(start) < 1100*time.Millisecond {
					t.Errorf("message delayed 1.1 s received after %v", time.Since(start))
				}
			}
			ms = append(ms, got...)
		}
		for _, c := range rec.of("ReceiveMessage") {
			if c.body["VisibilityTimeout"] != 2.0 || c.body["WaitTimeSeconds"] != 1.0 {
				t.Errorf("ReceiveMessage VisibilityTimeout %v, WaitTimeSeconds %v; want 2 and 1 for 1.5 s and 300 ms", c.body["VisibilityTimeout"], c.body["WaitTimeSeconds"])
				break
			}
		}
		if len(ms) == 0 {
			t.Fatal("no message received")
		}
		// The last message received is still leased (earlier ones may have
		// been redelivered since).
		if err := q.ChangeVisibility(ctx, "q", queue.VisibilityChange{Receipt: ms[len(ms)-1].Receipt, Timeout: 100 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		cv := rec.of("ChangeMessageVisibilityBatch")
		if got := cv[0].body["Entries"].([]any)[0].(map[string]any)["VisibilityTimeout"]; got != 1.0 {
			t.Errorf("ChangeMessageVisibilityBatch VisibilityTimeout = %v for 100 ms, want 1", got)
		}
	})
}

// TestCreateAttributes checks the attributes Create sets, and that
// re-creating a queue changes its redrive policy both ways.
func TestCreateAttributes(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, kind emulator.Kind) {
		ctx := testContext(t)
		client, _ := newClient(t, kind)
		pre := prefix(t)
		q := sqsqueue.New(client, sqsqueue.Options{Prefix: pre})
		mustCreate(t, ctx, q, "dlq", queue.Config{})
		mustCreate(t, ctx, q, "dlq2", queue.Config{})
		attrsOf := func(name string) map[string]string {
			t.Helper()
			u, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(pre + name)})
			if err != nil {
				t.Fatal(err)
			}
			out, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: u.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			return out.Attributes
		}
		dlqARN, dlq2ARN := attrsOf("dlq")["QueueArn"], attrsOf("dlq2")["QueueArn"]
		redrive := func(a map[string]string) (string, int) {
			if a["RedrivePolicy"] == "" {
				return "", 0
			}
			var p struct {
				ARN   string `json:"deadLetterTargetArn"`
				Count any    `json:"maxReceiveCount"`
			}
			if err := json.Unmarshal([]byte(a["RedrivePolicy"]), &p); err != nil {
				t.Fatalf("RedrivePolicy %q: %v", a["RedrivePolicy"], err)
			}
			var n int
			fmt.Sscan(fmt.Sprint(p.Count), &n)
			return p.ARN, n
		}
		steps := []struct {
			cfg        queue.Config
			visibility string
			arn        string
			count      int
		}{
			{queue.Config{}, "30", "", 0},
			{queue.Config{Visibility: time.Minute, MaxReceives: 3, DeadLetter: "dlq"}, "60", dlqARN, 3},
			{queue.Config{Visibility: time.Minute, MaxReceives: 3, DeadLetter: "dlq"}, "60", dlqARN, 3},
			{queue.Config{Visibility: time.Minute, MaxReceives: 5, DeadLetter: "dlq2"}, "60", dlq2ARN, 5},
			{queue.Config{Visibility: 10 * time.Second}, "10", "", 0},
		}
		for i, s := range steps {
			mustCreate(t, ctx, q, "q", s.cfg)
			a := attrsOf("q")
			if a["VisibilityTimeout"] != s.visibility || a["MessageRetentionPeriod"] != "1209600" || a["MaximumMessageSize"] != "1048576" {
				t.Errorf("step %d: VisibilityTimeout %s, MessageRetentionPeriod %s, MaximumMessageSize %s; want %s, 1209600, 1048576",
					i, a["VisibilityTimeout"], a["MessageRetentionPeriod"], a["MaximumMessageSize"], s.visibility)
			}
			if arn, n := redrive(a); arn != s.arn || n != s.count {
				t.Errorf("step %d: redrive to %q after %d receives, want %q after %d", i, arn, n, s.arn, s.count)
			}
		}
	})
}

// TestFailedEntries answers batch calls with failed entries, as SQS does
// under internal errors, and checks what the adapter retries.
func TestFailedEntries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name        string
		target      string
		faults      int // calls answered with failures, then the emulator answers
		code, msg   string
		senderFault bool
		wantErr     error // nil: the call succeeds
		wantCalls   int
	}{
		{"send retried", "SendMessageBatch", 2, "InternalError", "try again", false, nil, 3},
		{"send sender fault", "SendMessageBatch", 1, "InvalidMessageContents", "bad chars", true, job.ErrInvalid, 1},
		{"send gives up", "SendMessageBatch", 100, "ServiceUnavailable", "down", false, errAny, 6},
		{"delete retried", "DeleteMessageBatch", 1, "InternalError", "try again", false, nil, 2},
		{"delete stale ignored", "DeleteMessageBatch", 1, "ReceiptHandleIsInvalid", "gone", true, nil, 1},
		{"change visibility retried", "ChangeMessageVisibilityBatch", 3, "InternalError", "try again", false, nil, 4},
		{"change visibility stale", "ChangeMessageVisibilityBatch", 1, "ReceiptHandleIsInvalid", "gone", true, job.ErrNotFound, 1},
		{"change visibility not in flight", "ChangeMessageVisibilityBatch", 1, "AWS.SimpleQueueService.MessageNotInflight", "not in flight", true, job.ErrNotFound, 1},
		{"change visibility sender fault", "ChangeMessageVisibilityBatch", 1, "InvalidParameterValue", "Total VisibilityTimeout beyond the limit", true, job.ErrInvalid, 1},
	}
	forEach(t, func(t *testing.T, kind emulator.Kind) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				ctx := testContext(t)
				client, rec := newClient(t, kind)
				q := sqsqueue.New(client, sqsqueue.Options{Prefix: prefix(t)})
				mustCreate(t, ctx, q, "q", queue.Config{Visibility: long})
				var m queue.Message
				if c.target != "SendMessageBatch" {
					if err := q.Send(ctx, "q", queue.Outgoing{Body: []byte("x")}); err != nil {
						t.Fatal(err)
					}
					m = receiveAll(t, ctx, q, "q", 1)[0]
				}
				var (
					mu     sync.Mutex
					faults = c.faults
				)
				rec.mu.Lock()
				rec.fault = func(cl call) *http.Response {
					mu.Lock()
					defer mu.Unlock()
					if cl.target != c.target || faults == 0 {
						return nil
					}
					faults--
					return failAll(cl, c.code, c.msg, c.senderFault)
				}
				rec.mu.Unlock()
				rec.reset()

				var err error
				switch c.target {
				case "SendMessageBatch":
					err = q.Send(ctx, "q", queue.Outgoing{Body: []byte("y")})
				case "DeleteMessageBatch":
					err = q.Delete(ctx, "q", m.Receipt)
				case "ChangeMessageVisibilityBatch":
					err = q.ChangeVisibility(ctx, "q", queue.VisibilityChange{Receipt: m.Receipt, Timeout: 0})
				}
				switch {
				case c.wantErr == nil && err != nil:
					t.Fatalf("%s: %v, want success", c.target, err)
				case c.wantErr == errAny && err == nil, c.wantErr != nil && c.wantErr != errAny && !errors.Is(err, c.wantErr):
					t.Fatalf("%s: %v, want %v", c.target, err, c.wantErr)
				case err != nil && (!strings.Contains(err.Error(), c.code) || !strings.Contains(err.Error(), c.msg)):
					t.Errorf("error %q does not name the code %s and message %q", err, c.code, c.msg)
				}
				if n := len(rec.of(c.target)); n != c.wantCalls {
					t.Errorf("%d %s calls, want %d", n, c.target, c.wantCalls)
				}
				if c.target == "ChangeMessageVisibilityBatch" && errors.Is(c.wantErr, job.ErrNotFound) && !strings.Contains(err.Error(), m.Receipt) {
					t.Errorf("error %q does not name the stale receipt", err)
				}
				// What finally succeeded took effect.
				rec.mu.Lock()
				rec.fault = nil
				rec.mu.Unlock()
				if c.wantErr == nil {
					switch c.target {
					case "SendMessageBatch":
						if got := receiveAll(t, ctx, q, "q", 1); string(got[0].Body) != "y" {
							t.Errorf("received %q, want y", got[0].Body)
						}
					case "DeleteMessageBatch":
						if c.senderFault {
							break // the stale answer was ours; the message is still there
						}
						waitEmpty(t, ctx, q, "q")
					case "ChangeMessageVisibilityBatch":
						if got := receiveAll(t, ctx, q, "q", 1); got[0].ID != m.ID {
							t.Errorf("received %s, want %s back", got[0].ID, m.ID)
						}
					}
				}
			})
		}
	})
}

// errAny stands for any error in a table.
var errAny = errors.New("any error")

// waitEmpty waits until Stats reports no messages.
func waitEmpty(t *testing.T, ctx context.Context, q queue.Queue, name string) {
	t.Helper()
	end := time.Now().Add(15 * time.Second)
	for {
		st, err := q.Stats(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st == (queue.Stats{}) {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("Stats = %+v, want empty", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestStaleReceipts checks receipts that are not current against the
// emulators themselves.
func TestStaleReceipts(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, kind emulator.Kind) {
		ctx := testContext(t)
		client, _ := newClient(t, kind)
		q := sqsqueue.New(client, sqsqueue.Options{Prefix: prefix(t)})
		mustCreate(t, ctx, q, "q", queue.Config{Visibility: long})
		if err := q.Send(ctx, "q", queue.Outgoing{Body: []byte("a")}, queue.Outgoing{Body: []byte("b")}); err != nil {
			t.Fatal(err)
		}
		ms := receiveAll(t, ctx, q, "q", 2)

		// A batch with a valid and an unknown receipt: the valid change is
		// applied, the error names the unknown one.
		err := q.ChangeVisibility(ctx, "q",
			queue.VisibilityChange{Receipt: ms[0].Receipt, Timeout: 0},
			queue.VisibilityChange{Receipt: "bogus-receipt", Timeout: 0},
			queue.VisibilityChange{Receipt: "", Timeout: 0})
		if !errors.Is(err, job.ErrNotFound) || !strings.Contains(err.Error(), "bogus-receipt") || strings.Contains(err.Error(), ms[0].Receipt) {
			t.Fatalf("ChangeVisibility with an unknown receipt: %v, want ErrNotFound naming only it", err)
		}
		again := receiveAll(t, ctx, q, "q", 1)
		if again[0].ID != ms[0].ID || again[0].ReceiveCount != 2 {
			t.Fatalf("after the batch got %s count %d, want %s count 2", again[0].ID, again[0].ReceiveCount, ms[0].ID)
		}
		if err := q.Delete(ctx, "q", "bogus-receipt", ""); err != nil {
			t.Errorf("Delete with unknown receipts: %v", err)
		}

		// The receipt of the earlier delivery of a redelivered message.
		if kind == emulator.Moto {
			t.Log("skip stale ChangeVisibility: moto accepts every earlier receipt handle of a message (Message.had_receipt_handle), SQS does not")
		} else if err := q.ChangeVisibility(ctx, "q", queue.VisibilityChange{Receipt: ms[0].Receipt, Timeout: 0}); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("ChangeVisibility with the earlier delivery's receipt: %v, want ErrNotFound", err)
		}
		if err := q.Delete(ctx, "q", ms[0].Receipt); err != nil {
			t.Errorf("Delete with the earlier delivery's receipt: %v", err)
		}
		if err := q.Delete(ctx, "q", again[0].Receipt, ms[1].Receipt); err != nil {
			t.Errorf("Delete: %v", err)
		}
		waitEmpty(t, ctx, q, "q")
	})
}

// TestValidation checks what fails with job.ErrInvalid before any request.
func TestValidation(t *testing.T) {
	t.Parallel()
	ok := queue.Outgoing{Body: []byte("ok")}
	sends := []struct {
		name string
		body []byte
	}{
		{"empty body", []byte{}},
		{"NUL", []byte("a\x00b")},
		{"control character", []byte("a\x1bb")},
		{"invalid UTF-8", []byte("a\xffb")},
		{"encoded surrogate", []byte("a\xed\xa0\x80b")},
		{"U+FFFE", []byte("a\uFFFEb")},
		{"U+FFFF", []byte("a\uFFFFb")},
	}
	forEach(t, func(t *testing.T, kind emulator.Kind) {
		ctx := testContext(t)
		client, rec := newClient(t, kind)
		q := sqsqueue.New(client, sqsqueue.Options{Prefix: prefix(t)})
		mustCreate(t, ctx, q, "q", queue.Config{Visibility: long})
		mustCreate(t, ctx, q, "dlq", queue.Config{})
		rec.reset()
		for _, s := range sends {
			if err := q.Send(ctx, "q", ok, queue.Outgoing{Body: s.body}); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("Send with %s: %v, want ErrInvalid", s.name, err)
			}
		}
		creates := []struct {
			name string
			cfg  queue.Config
		}{
			{"q", queue.Config{Visibility: -time.Second}},
			{"q", queue.Config{Visibility: queue.MaxVisibility + time.Second}},
			{"q", queue.Config{MaxReceives: -1, DeadLetter: "dlq"}},
			{"q", queue.Config{MaxReceives: sqsqueue.MaxReceivesLimit + 1, DeadLetter: "dlq"}},
			{"q", queue.Config{MaxReceives: 3}},
			{"q", queue.Config{MaxReceives: 3, DeadLetter: "q"}},
			{"", queue.Config{}},
			{"a.fifo", queue.Config{}},
			{"has space", queue.Config{}},
			{strings.Repeat("x", 80), queue.Config{}}, // too long with the prefix
		}
		for _, c := range creates {
			if err := q.Create(ctx, c.name, c.cfg); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("Create(%q, %+v): %v, want ErrInvalid", c.name, c.cfg, err)
			}
		}
		if _, err := q.Receive(ctx, "q", 1, 0, -time.Second); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("Receive with negative wait: %v, want ErrInvalid", err)
		}
		if err := q.Delete(ctx, "q", make([]string, queue.MaxBatch+1)...); !errors.Is(err, job.ErrInvalid) {
			t.Errorf("Delete of %d receipts: %v, want ErrInvalid", queue.MaxBatch+1, err)
		}
		rec.mu.Lock()
		n := len(rec.calls)
		rec.mu.Unlock()
		if n != 0 {
			t.Errorf("invalid calls made %d requests, want none", n)
		}

		// The edges of what SQS accepts go through intact.
		edge := "\t\n\r \uD7FF\uE000\uFFFD\U00010000\U0010FFFF"
		if err := q.Send(ctx, "q", queue.Outgoing{Body: []byte(edge)}); err != nil {
			t.Fatalf("Send of allowed characters: %v", err)
		}
		if got := receiveAll(t, ctx, q, "q", 1); string(got[0].Body) != edge {
			t.Errorf("body came back as %q, want %q", got[0].Body, edge)
		}
		if err := q.Send(ctx, "q"); err != nil {
			t.Errorf("Send of no messages: %v", err)
		}
		if err := q.Delete(ctx, "q"); err != nil {
			t.Errorf("Delete of no receipts: %v", err)
		}
		if err := q.Send(ctx, "nope"); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Send of no messages to an unknown queue: %v, want ErrNotFound", err)
		}
	})
}

// TestReceiveCancel checks that a long poll ends with its context.
func TestReceiveCancel(t *testing.T) {
	t.Parallel()
	forEach(t, func(t *testing.T, kind emulator.Kind) {
		client, _ := newClient(t, kind)
		q := sqsqueue.New(client, sqsqueue.Options{Prefix: prefix(t)})
		mustCreate(t, testContext(t), q, "q", queue.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(300*time.Millisecond, cancel)
		start := time.Now()
		_, err := q.Receive(ctx, "q", 1, 0, 15*time.Second)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Receive with cancelled context: %v, want context.Canceled", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Receive returned %v after the cancel", d)
		}
	})
}
