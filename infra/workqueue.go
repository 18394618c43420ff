package main

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// QueueRetention is how long SQS keeps a message, on work queues and DLQs
// alike: the maximum, 14 days. A DLQ must keep messages at least as long as
// its source queue, because a standard queue's message keeps its original
// enqueue time when it moves to the DLQ; and operators need time to redrive.
const QueueRetention = 14 * 24 * time.Hour

// WorkQueueProps configures NewWorkQueue.
type WorkQueueProps struct {
	// Name is the engine's name of the queue ("slice", "chunks-<channel>"),
	// the key of the queue's URL in SLICEWORK_QUEUES. The physical queue
	// name is left to CloudFormation.
	Name string
	// Visibility is the queue's visibility timeout: the lease of a
	// received message (at least 6 × its consumer's timeout).
	Visibility time.Duration
	// MaxReceiveCount is how many receives move a message to the DLQ.
	MaxReceiveCount int
}

// WorkQueue is an SQS queue and its dead-letter queue, both encrypted with
// SQS-managed keys (SSE-SQS) and refusing requests that are not TLS.
type WorkQueue struct {
	// Name is the engine's name of the queue.
	Name string
	// Queue receives the tasks.
	Queue awssqs.Queue
	// DeadLetter receives what Queue's consumers could not process within
	// MaxReceiveCount receives.
	DeadLetter awssqs.Queue
}

// NewWorkQueue creates the queue and its DLQ in a construct named id.
func NewWorkQueue(scope constructs.Construct, id string, p WorkQueueProps) *WorkQueue {
	c := constructs.NewConstruct(scope, jsii.String(id))
	dlq := NewDeadLetterQueue(c, "DeadLetter")
	q := awssqs.NewQueue(c, jsii.String("Queue"), &awssqs.QueueProps{
		Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:        jsii.Bool(true),
		RetentionPeriod:   awscdk.Duration_Seconds(jsii.Number(QueueRetention.Seconds())),
		VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(p.Visibility.Seconds())),
		DeadLetterQueue: &awssqs.DeadLetterQueue{
			Queue:           dlq,
			MaxReceiveCount: jsii.Number(float64(p.MaxReceiveCount)),
		},
	})
	return &WorkQueue{Name: p.Name, Queue: q, DeadLetter: dlq}
}

// NewDeadLetterQueue creates a queue that only holds failed messages:
// SSE-SQS, TLS only, 14 days' retention.
func NewDeadLetterQueue(scope constructs.Construct, id string) awssqs.Queue {
	return awssqs.NewQueue(scope, jsii.String(id), &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Seconds(jsii.Number(QueueRetention.Seconds())),
	})
}
