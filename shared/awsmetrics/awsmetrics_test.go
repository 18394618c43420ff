package awsmetrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/google/go-cmp/cmp"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/awsmetrics"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/faults"
)

func TestMain(m *testing.M) { os.Exit(emulator.Run(m)) }

var seq atomic.Int64

// unique returns a name no other test uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), seq.Add(1))
}

// fastRetries makes the SDK retry up to max attempts with a 1 ms back-off
// and no retry quota, so fault tests run fast and cannot run out of tokens.
func fastRetries(cfg *aws.Config, max int) {
	cfg.RetryMaxAttempts = max
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = max
			o.RateLimiter = ratelimit.None
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	}
}

// faultyConfig returns the configuration of emulator k with its requests
// carried by tr. (The HTTP client is set after loading: the SDK's loader
// refuses a plain *http.Client when AWS_CA_BUNDLE is set.) A Transport with
// Rate 0 passes every request on with an in-memory body, which also spares
// the tests the SDK's rare spurious retry (see faults.Transport).
func faultyConfig(t *testing.T, k emulator.Kind, tr *faults.Transport) aws.Config {
	t.Helper()
	cfg := emulator.Config(t, k, nil)
	cfg.HTTPClient = &http.Client{Transport: tr}
	return cfg
}

func createTable(t *testing.T, c *dynamodb.Client, name string) {
	t.Helper()
	_, err := c.CreateTable(context.Background(), &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func item(pk string, size int) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{
		"pk": &ddbtypes.AttributeValueMemberS{Value: pk},
		"v":  &ddbtypes.AttributeValueMemberS{Value: strings.Repeat("x", size)},
	}
}

// Real calls through each emulator are counted exactly: one call and one
// attempt per invocation, errors per failed call, and no other rows.
func TestCountsCalls(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg := faultyConfig(t, k, &faults.Transport{}) // pass-through: no spurious retries
			counter := awsmetrics.New()
			counter.Attach(&cfg)
			s3c, sqsc, ddb := awsconfig.S3(cfg), awsconfig.SQS(cfg), awsconfig.DynamoDB(cfg)

			bucket := unique("metrics")
			if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
				t.Fatal(err)
			}
			for i := range 3 {
				if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(fmt.Sprint("k", i)), Body: strings.NewReader("body")}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("missing")}); err == nil {
				t.Fatal("GetObject of a missing key succeeded")
			}
			q, err := sqsc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(unique("metrics"))})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sqsc.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: q.QueueUrl, Entries: []sqstypes.SendMessageBatchRequestEntry{
				{Id: aws.String("a"), MessageBody: aws.String("1")}, {Id: aws.String("b"), MessageBody: aws.String("2")},
			}}); err != nil {
				t.Fatal(err)
			}
			table := unique("metrics")
			createTable(t, ddb, table)
			if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item("a", 10)}); err != nil {
				t.Fatal(err)
			}
			// Fails in the SDK's input validation, before any attempt.
			if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{}); err == nil {
				t.Fatal("PutItem without a table succeeded")
			}

			got := counter.Snapshot()
			for i := range got.Rows { // capacity is checked in TestConsumedCapacityEmulators
				got.Rows[i].RCU, got.Rows[i].WCU = 0, 0
			}
			want := awsmetrics.Report{Rows: []awsmetrics.Row{
				{Service: "DynamoDB", Operation: "CreateTable", Calls: 1, Attempts: 1},
				{Service: "DynamoDB", Operation: "PutItem", Calls: 2, Attempts: 1, Errors: 1},
				{Service: "S3", Operation: "CreateBucket", Calls: 1, Attempts: 1},
				{Service: "S3", Operation: "GetObject", Calls: 1, Attempts: 1, Errors: 1},
				{Service: "S3", Operation: "PutObject", Calls: 3, Attempts: 3},
				{Service: "SQS", Operation: "CreateQueue", Calls: 1, Attempts: 1},
				{Service: "SQS", Operation: "SendMessageBatch", Calls: 1, Attempts: 1},
			}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			if tot := got.Total(); tot.Calls != 10 || tot.Attempts != 9 || tot.Errors != 2 {
				t.Errorf("Total = %+v", tot)
			}
		})
	}
}

// With faults injected by the transport, every retry is an attempt: attempts
// equal calls plus injected faults, and every call still succeeds.
func TestCountsRetries(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			tr := &faults.Transport{Rate: 0.4, Seed: 7}
			cfg := faultyConfig(t, k, tr)
			fastRetries(&cfg, 30)
			counter := awsmetrics.New()
			counter.Attach(&cfg)
			s3c, sqsc, ddb := awsconfig.S3(cfg), awsconfig.SQS(cfg), awsconfig.DynamoDB(cfg)

			bucket := unique("retries")
			if _, err := s3c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
				t.Fatal(err)
			}
			q, err := sqsc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(unique("retries"))})
			if err != nil {
				t.Fatal(err)
			}
			table := unique("retries")
			createTable(t, ddb, table)
			for i := range 10 {
				if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(fmt.Sprint(i)), Body: strings.NewReader("x")}); err != nil {
					t.Fatal(err)
				}
				if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("m")}); err != nil {
					t.Fatal(err)
				}
				if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item(fmt.Sprint(i), 10)}); err != nil {
					t.Fatal(err)
				}
			}
			rep := counter.Snapshot()
			tot := rep.Total()
			injected := int64(tr.Total())
			if injected == 0 {
				t.Fatal("no fault was injected; the test proves nothing")
			}
			if tot.Calls != 33 || tot.Errors != 0 {
				t.Errorf("Total = %+v, want 33 calls and no errors", tot)
			}
			if tot.Attempts != tot.Calls+injected {
				t.Errorf("attempts = %d, want calls %d + injected %d", tot.Attempts, tot.Calls, injected)
			}
			if int64(tr.Seen()) != tot.Attempts {
				t.Errorf("transport saw %d requests, counter %d attempts", tr.Seen(), tot.Attempts)
			}
			for _, svc := range []struct {
				service string
				fault   faults.Service
			}{{"S3", faults.S3}, {"SQS", faults.SQS}, {"DynamoDB", faults.DynamoDB}} {
				var n int64
				for key, c := range tr.Injected() {
					if key.Service == svc.fault {
						n += int64(c)
					}
				}
				row := rep.Service(svc.service)
				if row.Attempts != row.Calls+n {
					t.Errorf("%s: attempts %d, want calls %d + injected %d", svc.service, row.Attempts, row.Calls, n)
				}
			}
		})
	}
}

// What each emulator reports as consumed capacity, summed into the right
// column. MiniStack computes DynamoDB's sizes (1 WCU per KB written, the
// larger of old and new item for an update, twice for transactions, 0.5 RCU
// per 4 KB eventually consistent read). moto returns constants (PutItem 1,
// UpdateItem 0.5, GetItem 0.5 whatever the size) and nothing at all for
// TransactWriteItems.
func TestConsumedCapacityEmulators(t *testing.T) {
	t.Parallel()
	type want struct{ put, update, transact, get float64 }
	for _, tc := range []struct {
		kind emulator.Kind
		want want
	}{
		{emulator.MiniStack, want{put: 2, update: 4, transact: 4, get: 0.5}},
		{emulator.Moto, want{put: 1, update: 0.5, transact: 0, get: 0.5}},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg := faultyConfig(t, tc.kind, &faults.Transport{}) // pass-through: no spurious retries
			counter := awsmetrics.New()
			counter.Attach(&cfg)
			ddb := awsconfig.DynamoDB(cfg)
			table := aws.String(unique("capacity"))
			createTable(t, ddb, *table)
			step := func(op string, call func() error) awsmetrics.Row {
				t.Helper()
				before := counter.Snapshot()
				if err := call(); err != nil {
					t.Fatalf("%s: %v", op, err)
				}
				d := counter.Snapshot().Sub(before)
				if len(d.Rows) != 1 || d.Rows[0].Operation != op || d.Rows[0].Calls != 1 {
					t.Fatalf("%s: delta %+v", op, d)
				}
				return d.Rows[0]
			}
			in := &dynamodb.PutItemInput{TableName: table, Item: item("a", 2000)} // ~2 KB
			put := step("PutItem", func() error { _, err := ddb.PutItem(ctx, in); return err })
			if in.ReturnConsumedCapacity != "" {
				t.Errorf("the caller's input was changed: ReturnConsumedCapacity %q", in.ReturnConsumedCapacity)
			}
			update := step("UpdateItem", func() error {
				_, err := ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: table, Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "a"}},
					UpdateExpression:          aws.String("SET w = :w"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":w": &ddbtypes.AttributeValueMemberS{Value: strings.Repeat("y", 2000)}}})
				return err
			})
			transact := step("TransactWriteItems", func() error {
				_, err := ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{
					{Put: &ddbtypes.Put{TableName: table, Item: item("b", 2000)}},
				}})
				return err
			})
			get := step("GetItem", func() error {
				_, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "b"}}})
				return err
			})
			for _, c := range []struct {
				name     string
				row      awsmetrics.Row
				rcu, wcu float64
			}{
				{"PutItem", put, 0, tc.want.put},
				{"UpdateItem", update, 0, tc.want.update},
				{"TransactWriteItems", transact, 0, tc.want.transact},
				{"GetItem", get, tc.want.get, 0},
			} {
				if c.row.RCU != c.rcu || c.row.WCU != c.wcu {
					t.Errorf("%s: RCU %.1f WCU %.1f, want RCU %.1f WCU %.1f", c.name, c.row.RCU, c.row.WCU, c.rcu, c.wcu)
				}
			}
		})
	}
}

// fakeDynamoDB answers every DynamoDB request with the JSON body of its
// operation in bodies, and records the request bodies.
type fakeDynamoDB struct {
	mu       sync.Mutex
	bodies   map[string]string
	requests map[string]map[string]any
}

func (f *fakeDynamoDB) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	b, _ := io.ReadAll(r.Body)
	var req map[string]any
	_ = json.Unmarshal(b, &req)
	f.mu.Lock()
	f.requests[op] = req
	body, ok := f.bodies[op]
	f.mu.Unlock()
	if !ok {
		http.Error(w, "unexpected operation "+op, http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amz-Crc32", fmt.Sprint(crc32.ChecksumIEEE([]byte(body))))
	io.WriteString(w, body)
}

// Capacity is requested only where the caller left it unset, and the units
// reported are attributed: RCU/WCU where given, CapacityUnits by the kind of
// operation otherwise, summed over lists.
func TestConsumedCapacityAttribution(t *testing.T) {
	t.Parallel()
	fake := &fakeDynamoDB{requests: map[string]map[string]any{}, bodies: map[string]string{
		"PutItem":            `{"ConsumedCapacity":{"TableName":"t","CapacityUnits":3}}`,
		"DeleteItem":         `{"ConsumedCapacity":{"TableName":"t","CapacityUnits":1}}`,
		"UpdateItem":         `{}`,
		"GetItem":            `{"ConsumedCapacity":{"TableName":"t","CapacityUnits":0.5}}`,
		"Query":              `{"Count":0,"ScannedCount":0,"Items":[],"ConsumedCapacity":{"TableName":"t","CapacityUnits":2.5}}`,
		"Scan":               `{"Count":0,"ScannedCount":0,"Items":[],"ConsumedCapacity":{"TableName":"t","CapacityUnits":1,"ReadCapacityUnits":1}}`,
		"BatchGetItem":       `{"Responses":{},"ConsumedCapacity":[{"TableName":"t","CapacityUnits":1},{"TableName":"u","CapacityUnits":1.5}]}`,
		"BatchWriteItem":     `{"ConsumedCapacity":[{"TableName":"t","CapacityUnits":2},{"TableName":"u","CapacityUnits":5}]}`,
		"TransactGetItems":   `{"ConsumedCapacity":[{"TableName":"t","CapacityUnits":4,"ReadCapacityUnits":4}]}`,
		"TransactWriteItems": `{"ConsumedCapacity":[{"TableName":"t","CapacityUnits":12,"WriteCapacityUnits":12},{"TableName":"u","CapacityUnits":2,"ReadCapacityUnits":1,"WriteCapacityUnits":1}]}`,
		"DescribeLimits":     `{"AccountMaxReadCapacityUnits":1}`,
	}}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	cfg, err := awsconfig.ForEndpoint(context.Background(), srv.URL, "us-east-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	counter := awsmetrics.New()
	counter.Attach(&cfg)
	ddb := awsconfig.DynamoDB(cfg)
	ctx := context.Background()
	tbl := aws.String("t")
	key := map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "a"}}
	for _, tc := range []struct {
		op       string
		call     func() error
		sent     any // ReturnConsumedCapacity in the request, nil if absent
		rcu, wcu float64
	}{
		{"PutItem", func() error {
			_, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{TableName: tbl, Item: key})
			return err
		}, "TOTAL", 0, 3},
		{"DeleteItem", func() error {
			_, err := ddb.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: tbl, Key: key, ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityIndexes})
			return err
		}, "INDEXES", 0, 1},
		{"UpdateItem", func() error {
			_, err := ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: tbl, Key: key, ReturnConsumedCapacity: ddbtypes.ReturnConsumedCapacityNone})
			return err
		}, "NONE", 0, 0},
		{"GetItem", func() error { _, err := ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: tbl, Key: key}); return err }, "TOTAL", 0.5, 0},
		{"Query", func() error { _, err := ddb.Query(ctx, &dynamodb.QueryInput{TableName: tbl}); return err }, "TOTAL", 2.5, 0},
		{"Scan", func() error { _, err := ddb.Scan(ctx, &dynamodb.ScanInput{TableName: tbl}); return err }, "TOTAL", 1, 0},
		{"BatchGetItem", func() error {
			_, err := ddb.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{"t": {Keys: []map[string]ddbtypes.AttributeValue{key}}}})
			return err
		}, "TOTAL", 2.5, 0},
		{"BatchWriteItem", func() error {
			_, err := ddb.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]ddbtypes.WriteRequest{"t": {{PutRequest: &ddbtypes.PutRequest{Item: key}}}}})
			return err
		}, "TOTAL", 0, 7},
		{"TransactGetItems", func() error {
			_, err := ddb.TransactGetItems(ctx, &dynamodb.TransactGetItemsInput{TransactItems: []ddbtypes.TransactGetItem{{Get: &ddbtypes.Get{TableName: tbl, Key: key}}}})
			return err
		}, "TOTAL", 4, 0},
		{"TransactWriteItems", func() error {
			_, err := ddb.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []ddbtypes.TransactWriteItem{{Put: &ddbtypes.Put{TableName: tbl, Item: key}}}})
			return err
		}, "TOTAL", 1, 13},
		{"DescribeLimits", func() error { _, err := ddb.DescribeLimits(ctx, &dynamodb.DescribeLimitsInput{}); return err }, nil, 0, 0},
	} {
		before := counter.Snapshot()
		if err := tc.call(); err != nil {
			t.Errorf("%s: %v", tc.op, err)
			continue
		}
		fake.mu.Lock()
		sent := fake.requests[tc.op]["ReturnConsumedCapacity"]
		fake.mu.Unlock()
		if sent != tc.sent {
			t.Errorf("%s sent ReturnConsumedCapacity %v, want %v", tc.op, sent, tc.sent)
		}
		row := counter.Snapshot().Sub(before).Get("DynamoDB", tc.op)
		if row.Calls != 1 || row.RCU != tc.rcu || row.WCU != tc.wcu {
			t.Errorf("%s: %+v, want 1 call, RCU %.1f, WCU %.1f", tc.op, row, tc.rcu, tc.wcu)
		}
	}
}

func TestReport(t *testing.T) {
	t.Parallel()
	earlier := awsmetrics.Report{Rows: []awsmetrics.Row{
		{Service: "DynamoDB", Operation: "PutItem", Calls: 2, Attempts: 3, WCU: 2},
		{Service: "S3", Operation: "GetObject", Calls: 1, Attempts: 1},
		{Service: "SQS", Operation: "SendMessage", Calls: 5, Attempts: 5},
	}}
	later := awsmetrics.Report{Rows: []awsmetrics.Row{
		{Service: "DynamoDB", Operation: "GetItem", Calls: 4, Attempts: 4, RCU: 2},
		{Service: "DynamoDB", Operation: "PutItem", Calls: 5, Attempts: 7, Errors: 1, WCU: 4.5},
		{Service: "S3", Operation: "GetObject", Calls: 1, Attempts: 1},
		{Service: "SQS", Operation: "SendMessage", Calls: 6, Attempts: 8},
	}}
	for _, tc := range []struct {
		name string
		got  awsmetrics.Report
		want awsmetrics.Report
	}{
		{"delta", later.Sub(earlier), awsmetrics.Report{Rows: []awsmetrics.Row{
			{Service: "DynamoDB", Operation: "GetItem", Calls: 4, Attempts: 4, RCU: 2},
			{Service: "DynamoDB", Operation: "PutItem", Calls: 3, Attempts: 4, Errors: 1, WCU: 2.5},
			{Service: "SQS", Operation: "SendMessage", Calls: 1, Attempts: 3},
		}}},
		{"same", later.Sub(later), awsmetrics.Report{}},
		{"from nothing", earlier.Sub(awsmetrics.Report{}), earlier},
		{"after a reset", awsmetrics.Report{}.Sub(earlier), awsmetrics.Report{Rows: []awsmetrics.Row{
			{Service: "DynamoDB", Operation: "PutItem", Calls: -2, Attempts: -3, WCU: -2},
			{Service: "S3", Operation: "GetObject", Calls: -1, Attempts: -1},
			{Service: "SQS", Operation: "SendMessage", Calls: -5, Attempts: -5},
		}}},
	} {
		if diff := cmp.Diff(tc.want, tc.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, diff)
		}
	}
	if got, want := later.Total(), (awsmetrics.Row{Operation: "total", Calls: 16, Attempts: 20, Errors: 1, RCU: 2, WCU: 4.5}); got != want {
		t.Errorf("Total = %+v, want %+v", got, want)
	}
	if got, want := later.Service("DynamoDB"), (awsmetrics.Row{Service: "DynamoDB", Calls: 9, Attempts: 11, Errors: 1, RCU: 2, WCU: 4.5}); got != want {
		t.Errorf("Service = %+v, want %+v", got, want)
	}
	if got := later.Get("S3", "PutObject"); got != (awsmetrics.Row{Service: "S3", Operation: "PutObject"}) {
		t.Errorf("Get of an absent row = %+v", got)
	}

	var b bytes.Buffer
	if err := later.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	want := `SERVICE   OPERATION    CALLS  ATTEMPTS  ERRORS  RCU  WCU
DynamoDB  GetItem          4         4       0  2.0  0.0
DynamoDB  PutItem          5         7       1  0.0  4.5
S3        GetObject        1         1       0  0.0  0.0
SQS       SendMessage      6         8       0  0.0  0.0
total                     16        20       1  2.0  4.5
`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("WriteTable (-want +got):\n%s", diff)
	}
	if err := later.WriteTable(failWriter{}); !errors.Is(err, errWrite) {
		t.Errorf("WriteTable to a failing writer = %v", err)
	}
}

var errWrite = errors.New("write failed")

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errWrite }

// Attaching the same counter twice counts once; two counters both count;
// Reset empties; concurrent calls and snapshots are safe.
func TestAttachSnapshotReset(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&fakeDynamoDB{requests: map[string]map[string]any{}, bodies: map[string]string{"DescribeLimits": `{}`}})
	defer srv.Close()
	cfg, err := awsconfig.ForEndpoint(context.Background(), srv.URL, "us-east-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := awsmetrics.New(), awsmetrics.New()
	a.Attach(&cfg)
	shared := cfg // a copy that must not see b
	a.Attach(&cfg)
	b.Attach(&cfg)
	ddb := awsconfig.DynamoDB(cfg)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := ddb.DescribeLimits(context.Background(), nil); err != nil {
				t.Error(err)
			}
		}()
		go func() {
			defer wg.Done()
			_ = a.Snapshot().Total()
		}()
	}
	wg.Wait()
	want := awsmetrics.Row{Service: "DynamoDB", Operation: "DescribeLimits", Calls: 20, Attempts: 20}
	for name, c := range map[string]*awsmetrics.Counter{"a": a, "b": b} {
		if got := c.Snapshot().Get("DynamoDB", "DescribeLimits"); got != want {
			t.Errorf("counter %s: %+v, want %+v", name, got, want)
		}
	}
	if _, err := awsconfig.DynamoDB(shared).DescribeLimits(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if got := b.Snapshot().Total().Calls; got != 20 {
		t.Errorf("counter b counted a client of a config it was not attached to: %d calls", got)
	}
	a.Reset()
	if got := a.Snapshot(); len(got.Rows) != 0 {
		t.Errorf("after Reset: %+v", got)
	}
}
