package faults_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
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
	"github.com/aws/smithy-go"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/awsmetrics"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/faults"
)

func TestMain(m *testing.M) { os.Exit(emulator.Run(m)) }

var seq atomic.Int64

func unique(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), seq.Add(1))
}

// env is one emulator reached twice: directly (for setup and checks) and
// through a faults.Transport, with the faulted clients counted.
type env struct {
	s3     *s3.Client
	sqs    *sqs.Client
	ddb    *dynamodb.Client
	faulty struct {
		s3  *s3.Client
		sqs *sqs.Client
		ddb *dynamodb.Client
	}
	counter *awsmetrics.Counter
	bucket  string
	queue   *string
	table   *string
}

// newEnv sets up a bucket, a queue and a table on emulator k, and clients
// that send through tr with at most maxAttempts attempts per call and a
// 1 ms back-off.
func newEnv(t *testing.T, k emulator.Kind, tr *faults.Transport, maxAttempts int) *env {
	t.Helper()
	ctx := context.Background()
	direct := emulator.Config(t, k, nil)
	direct.HTTPClient = &http.Client{Transport: &faults.Transport{}} // pass-through
	e := &env{s3: awsconfig.S3(direct), sqs: awsconfig.SQS(direct), ddb: awsconfig.DynamoDB(direct)}

	cfg := emulator.Config(t, k, nil)
	// Set after loading: the SDK's loader refuses a plain *http.Client when
	// AWS_CA_BUNDLE is set.
	cfg.HTTPClient = &http.Client{Transport: tr}
	cfg.RetryMaxAttempts = maxAttempts
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = maxAttempts
			o.RateLimiter = ratelimit.None
			o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	}
	e.counter = awsmetrics.New()
	e.counter.Attach(&cfg)
	e.faulty.s3, e.faulty.sqs, e.faulty.ddb = awsconfig.S3(cfg), awsconfig.SQS(cfg), awsconfig.DynamoDB(cfg)

	e.bucket = unique("faults")
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(e.bucket)}); err != nil {
		t.Fatal(err)
	}
	q, err := e.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(unique("faults"))})
	if err != nil {
		t.Fatal(err)
	}
	e.queue = q.QueueUrl
	e.table = aws.String(unique("faults"))
	_, err = e.ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            e.table,
		BillingMode:          ddbtypes.BillingModePayPerRequest,
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("pk"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: ddbtypes.KeyTypeHash}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// call makes one faulted call of service; i distinguishes the calls.
func (e *env) call(ctx context.Context, service faults.Service, i int) error {
	var err error
	switch service {
	case faults.S3:
		_, err = e.faulty.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(fmt.Sprint("k/", i)), Body: strings.NewReader("body")})
	case faults.SQS:
		_, err = e.faulty.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: e.queue, MessageBody: aws.String(fmt.Sprint(i))})
	case faults.DynamoDB:
		_, err = e.faulty.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: e.table,
			Key:                       map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "counter"}},
			UpdateExpression:          aws.String("ADD n :one"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}}})
	}
	return err
}

// effect returns how many times the calls of service took effect: objects
// stored, messages queued, or the counter's value.
func (e *env) effect(t *testing.T, service faults.Service) int {
	t.Helper()
	ctx := context.Background()
	switch service {
	case faults.S3:
		out, err := e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(e.bucket)})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Contents)
	case faults.SQS:
		n, empty := 0, 0
		for empty < 2 {
			out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: e.queue, MaxNumberOfMessages: 10, VisibilityTimeout: 600})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Messages) == 0 {
				empty++
			}
			n += len(out.Messages)
		}
		return n
	default:
		out, err := e.ddb.GetItem(ctx, &dynamodb.GetItemInput{TableName: e.table, ConsistentRead: aws.Bool(true),
			Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "counter"}}})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := out.Item["n"].(*ddbtypes.AttributeValueMemberN)
		if !ok {
			return 0
		}
		n, err := strconv.Atoi(v.Value)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

var services = []faults.Service{faults.S3, faults.SQS, faults.DynamoDB}

// With retries, every call succeeds through Rate 0.3, each injected fault
// costs exactly one more attempt, and (mode Before) the calls took effect
// exactly once; in mode After the lost responses make the SDK repeat calls
// that had taken effect, so non-idempotent calls (SendMessage, an ADD
// update) take effect once more per injected fault.
func TestSDKRetriesThroughFaults(t *testing.T) {
	t.Parallel()
	const calls = 20
	for _, k := range emulator.Kinds {
		for _, mode := range []faults.Mode{faults.Before, faults.After} {
			for _, service := range services {
				t.Run(fmt.Sprintf("%s/%s/%s", k, mode, service), func(t *testing.T) {
					t.Parallel()
					ctx := context.Background()
					tr := &faults.Transport{Rate: 0.3, Seed: 11, Mode: mode}
					e := newEnv(t, k, tr, 20)
					for i := range calls {
						if err := e.call(ctx, service, i); err != nil {
							t.Fatalf("call %d: %v", i, err)
						}
					}
					injected := tr.Total()
					if injected == 0 {
						t.Fatal("no fault was injected; the test proves nothing")
					}
					for key := range tr.Injected() {
						if key.Service != service {
							t.Errorf("injected %v into %s calls", key, service)
						}
						if !slices.Contains(tr.Codes(service), key.Code) {
							t.Errorf("injected %v, not among %v", key, tr.Codes(service))
						}
					}
					tot := e.counter.Snapshot().Total()
					if tot.Calls != calls || tot.Errors != 0 || tot.Attempts != int64(calls+injected) {
						t.Errorf("counted %+v, want %d calls, no errors, %d attempts", tot, calls, calls+injected)
					}
					want := calls
					if mode == faults.After && service != faults.S3 {
						want += injected
					}
					if got := e.effect(t, service); got != want {
						t.Errorf("calls took effect %d times, want %d (%d injected)", got, want, injected)
					}
				})
			}
		}
	}
}

// With retries disabled, each injected fault surfaces as the SDK's API error
// with the code sent, which the SDK's standard retryer classifies as
// retryable (and throttling codes as throttling), so with retries enabled
// it would retry them.
func TestSDKClassifiesFaults(t *testing.T) {
	t.Parallel()
	isRetryable := retry.IsErrorRetryables(retry.DefaultRetryables)
	isThrottle := retry.IsErrorThrottles(retry.DefaultThrottles)
	throttles := []string{"ThrottlingException", "ProvisionedThroughputExceededException", "RequestThrottled", "SlowDown"}
	for _, k := range emulator.Kinds {
		for _, service := range services {
			t.Run(fmt.Sprintf("%s/%s", k, service), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				tr := &faults.Transport{Rate: 1, Seed: 5}
				e := newEnv(t, k, tr, 1)
				seen := map[string]int{}
				for i := range 40 {
					err := e.call(ctx, service, i)
					var ae smithy.APIError
					if !errors.As(err, &ae) {
						t.Fatalf("call %d: %v, want an API error", i, err)
					}
					code := ae.ErrorCode()
					seen[code]++
					if !slices.Contains(tr.Codes(service), code) {
						t.Errorf("error code %q, want one of %v", code, tr.Codes(service))
					}
					if isRetryable.IsErrorRetryable(err) != aws.TrueTernary {
						t.Errorf("the SDK does not retry %s: %v", code, err)
					}
					if want := slices.Contains(throttles, code); (isThrottle.IsErrorThrottle(err) == aws.TrueTernary) != want {
						t.Errorf("%s: the SDK's throttle classification is not %v", code, want)
					}
				}
				for _, c := range tr.Codes(service) {
					if seen[c] == 0 {
						t.Errorf("code %s never injected in 40 calls", c)
					}
					if n := tr.Injected()[faults.Key{Service: service, Code: c}]; n != seen[c] {
						t.Errorf("%s: injected %d, surfaced %d", c, n, seen[c])
					}
				}
				tot := e.counter.Snapshot().Total()
				if tot.Calls != 40 || tot.Attempts != 40 || tot.Errors != 40 {
					t.Errorf("counted %+v, want 40 calls, attempts and errors", tot)
				}
				if got := e.effect(t, service); got != 0 {
					t.Errorf("faulted calls took effect %d times (mode Before)", got)
				}
			})
		}
	}
}
