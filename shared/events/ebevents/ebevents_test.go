package ebevents_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/events"
	"github.com/slicework/slicework/shared/events/ebevents"
	"github.com/slicework/slicework/shared/job"
)

func TestMain(m *testing.M) { os.Exit(emulator.Run(m)) }

var seq atomic.Int64

// busWithQueue creates a bus whose rule forwards slicework events to a new
// SQS queue, and returns the bus name and the queue URL.
func busWithQueue(t *testing.T, eb *eventbridge.Client, q *sqs.Client) (string, string) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("ebevents-%d-%d", os.Getpid(), seq.Add(1))
	if _, err := eb.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(name)}); err != nil {
		t.Fatalf("CreateEventBus: %v", err)
	}
	qo, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatalf("CreateQueue: %v", err)
	}
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: qo.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	pattern, _ := json.Marshal(map[string][]string{"source": {events.Source}, "detail-type": {events.TypeJobFinished}})
	if _, err := eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(name), EventBusName: aws.String(name), EventPattern: aws.String(string(pattern))}); err != nil {
		t.Fatalf("PutRule: %v", err)
	}
	_, err = eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(name), EventBusName: aws.String(name), Targets: []ebtypes.Target{
		{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)])},
	}})
	if err != nil {
		t.Fatalf("PutTargets: %v", err)
	}
	return name, aws.ToString(qo.QueueUrl)
}

// The event arrives on the bus with its source, detail-type and detail, on
// every emulator.
func TestPublish(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			cfg := emulator.Config(t, k, nil)
			eb, q := awsconfig.EventBridge(cfg), awsconfig.SQS(cfg)
			bus, queueURL := busWithQueue(t, eb, q)
			fin := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
			j := &job.Job{ID: "01JOB" + fmt.Sprint(seq.Add(1)), Kind: "recompute", State: job.StateSucceeded, Tags: []string{"t"},
				Counters: job.Counters{Sliced: true, ChunksTotal: 3, ChunksDone: 3}, CreatedAt: fin.Add(-time.Minute), FinishedAt: &fin}
			want := events.Finished(j)
			if err := ebevents.New(eb, bus).Publish(context.Background(), want); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			var env struct {
				Source     string             `json:"source"`
				DetailType string             `json:"detail-type"`
				Detail     events.JobFinished `json:"detail"`
			}
			deadline := time.Now().Add(20 * time.Second)
			for {
				out, err := q.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(queueURL), WaitTimeSeconds: 1})
				if err != nil {
					t.Fatalf("ReceiveMessage: %v", err)
				}
				if len(out.Messages) > 0 {
					if err := json.Unmarshal([]byte(aws.ToString(out.Messages[0].Body)), &env); err != nil {
						t.Fatalf("event %s: %v", aws.ToString(out.Messages[0].Body), err)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no event reached the rule's queue")
				}
			}
			if env.Source != events.Source || env.DetailType != events.TypeJobFinished {
				t.Errorf("source %q, detail-type %q", env.Source, env.DetailType)
			}
			d := env.Detail
			if d.ID != want.ID || d.JobID != j.ID || d.State != job.StateSucceeded || d.Counters != j.Counters ||
				d.FinishedAt == nil || !d.FinishedAt.Equal(fin) || strings.Join(d.Tags, ",") != "t" {
				t.Errorf("detail %+v, want %+v", d, want)
			}
		})
	}
}

// A bus that does not exist is an error, not a silent drop.
func TestPublishMissingBus(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			eb := awsconfig.EventBridge(emulator.Config(t, k, nil))
			e := events.JobFinished{ID: "x:succeeded", JobID: "x", State: job.StateSucceeded}
			if err := ebevents.New(eb, fmt.Sprintf("missing-%d", seq.Add(1))).Publish(context.Background(), e); err == nil {
				t.Skipf("%s accepts events for a bus that does not exist", k)
			}
		})
	}
}
