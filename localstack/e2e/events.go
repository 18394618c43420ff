package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/events"
)

// listener is what a consumer of completion events would deploy: a rule on
// the stack's completion bus that sends every slicework event to a queue.
// e2e creates it through the EventBridge and SQS APIs (it is not part of
// the stack) and removes it at the end.
type listener struct {
	eb       *eventbridge.Client
	sqs      *sqs.Client
	bus      string
	rule     string
	queueURL string
}

func newListener(ctx context.Context, cfg aws.Config, bus, stack string) (*listener, error) {
	l := &listener{eb: eventbridge.NewFromConfig(cfg), sqs: awsconfig.SQS(cfg), bus: bus, rule: stack + "-e2e-completions"}
	q, err := l.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(stack + "-e2e-completions")})
	if err != nil {
		return nil, fmt.Errorf("listener queue: %w", err)
	}
	l.queueURL = aws.ToString(q.QueueUrl)
	attrs, err := l.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return nil, fmt.Errorf("listener queue: %w", err)
	}
	pattern, _ := json.Marshal(map[string]any{"source": []string{events.Source}, "detail-type": []string{events.TypeJobFinished}})
	if _, err := l.eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(l.rule), EventBusName: aws.String(bus),
		EventPattern: aws.String(string(pattern))}); err != nil {
		return nil, fmt.Errorf("listener rule: %w", err)
	}
	if _, err := l.eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(l.rule), EventBusName: aws.String(bus),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)])}}}); err != nil {
		return nil, fmt.Errorf("listener target: %w", err)
	}
	return l, nil
}

// collect receives the completion events that reached the queue until
// every job in want has one or timeout passes, and returns the events by
// job id.
func (l *listener) collect(ctx context.Context, want []string, timeout time.Duration) (map[string][]events.JobFinished, error) {
	got := map[string][]events.JobFinished{}
	deadline := time.Now().Add(timeout)
	for {
		missing := 0
		for _, id := range want {
			if len(got[id]) == 0 {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			if missing > 0 {
				return got, fmt.Errorf("%d of %d jobs have no completion event after %s", missing, len(want), timeout)
			}
			// One more short receive catches duplicates that trail.
			if err := l.receive(ctx, got, 1); err != nil {
				return got, err
			}
			return got, nil
		}
		if err := l.receive(ctx, got, 2); err != nil {
			return got, err
		}
	}
}

func (l *listener) receive(ctx context.Context, got map[string][]events.JobFinished, wait int32) error {
	out, err := l.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(l.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: wait})
	if err != nil {
		return fmt.Errorf("listener: receive: %w", err)
	}
	for _, m := range out.Messages {
		var env struct {
			Source     string             `json:"source"`
			DetailType string             `json:"detail-type"`
			Detail     events.JobFinished `json:"detail"`
		}
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
			return fmt.Errorf("listener: event %s: %w", aws.ToString(m.Body), err)
		}
		if env.Source != events.Source || env.DetailType != events.TypeJobFinished {
			return fmt.Errorf("listener: event with source %q, detail-type %q", env.Source, env.DetailType)
		}
		got[env.Detail.JobID] = append(got[env.Detail.JobID], env.Detail)
		if _, err := l.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(l.queueURL), ReceiptHandle: m.ReceiptHandle}); err != nil {
			return fmt.Errorf("listener: delete: %w", err)
		}
	}
	return nil
}

// close removes the rule and the queue.
func (l *listener) close(ctx context.Context) {
	_, _ = l.eb.RemoveTargets(ctx, &eventbridge.RemoveTargetsInput{Rule: aws.String(l.rule), EventBusName: aws.String(l.bus), Ids: []string{"queue"}})
	_, _ = l.eb.DeleteRule(ctx, &eventbridge.DeleteRuleInput{Name: aws.String(l.rule), EventBusName: aws.String(l.bus)})
	_, _ = l.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(l.queueURL)})
}
