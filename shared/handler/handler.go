// Package handler holds the Lambda handlers of slicework with the signatures
// they have on AWS Lambda. functions/<name>/main.go only wires them to
// lambda.Start; the local host invokes the very same functions through
// aws-lambda-go's JSON invoke path.
package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/queue"
)

// SQSHandler is the signature of the slicer and worker functions: an SQS
// batch in, the records to retry out (ReportBatchItemFailures).
type SQSHandler func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error)

// QueueName returns the queue name at the end of an SQS queue ARN
// (arn:aws:sqs:region:account:name).
func QueueName(arn string) string {
	if i := strings.LastIndexByte(arn, ':'); i >= 0 {
		return arn[i+1:]
	}
	return arn
}

// QueueARN builds the ARN the local host puts on records of queue name.
func QueueARN(region, account, name string) string {
	return fmt.Sprintf("arn:aws:sqs:%s:%s:%s", region, account, name)
}

// receiveCount reads ApproximateReceiveCount, defaulting to 1.
func receiveCount(m events.SQSMessage) int {
	var n int
	if _, err := fmt.Sscanf(m.Attributes["ApproximateReceiveCount"], "%d", &n); err != nil || n < 1 {
		return 1
	}
	return n
}

// maxDeadlineSlack is how much time before the Lambda deadline a handler
// stops starting new records (at most a quarter of the invocation's budget);
// the rest are reported as failures and redelivered.
const maxDeadlineSlack = 2 * time.Second

// deadlineGuard returns a function that reports whether the invocation is
// too close to its deadline to start another record.
func deadlineGuard(ctx context.Context) func() bool {
	dl, ok := ctx.Deadline()
	if !ok {
		return func() bool { return false }
	}
	slack := min(maxDeadlineSlack, time.Until(dl)/4)
	return func() bool { return time.Until(dl) < slack }
}

// Slicer returns the slicer function: it handles slice and finish tasks from
// the control queue. Records that fail are reported for redelivery; poison
// records too, so that the queue's redrive policy moves them to the DLQ.
func Slicer(e *engine.Engine, log *slog.Logger) SQSHandler {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		// An empty list (not null) tells the event source mapping that every record succeeded.
		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		nearDeadline := deadlineGuard(ctx)
		for _, m := range ev.Records {
			if nearDeadline() {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
				continue
			}
			if err := e.Control(ctx, []byte(m.Body), receiveCount(m)); err != nil {
				log.Error("control task failed", "message", m.MessageId, "err", err, "poison", errors.Is(err, engine.ErrPoison))
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			}
		}
		return resp, nil
	}
}

// Worker returns the worker function: it processes chunk tasks. A chunk to
// retry gets its message's visibility set to the back-off delay and is
// reported as a batch item failure, so the event source mapping leaves it on
// the queue; everything else is deleted by the mapping.
func Worker(e *engine.Engine, q queue.Queue, log *slog.Logger) SQSHandler {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		// An empty list (not null) tells the event source mapping that every record succeeded.
		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		nearDeadline := deadlineGuard(ctx)
		changes := map[string][]queue.VisibilityChange{} // by queue name
		for _, m := range ev.Records {
			fail := func() {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			}
			if nearDeadline() {
				fail()
				continue
			}
			v := e.ProcessChunk(ctx, []byte(m.Body), engine.Delivery{MessageID: m.MessageId, ReceiveCount: receiveCount(m)})
			if v.Err != nil {
				log.Warn("chunk attempt failed", "message", m.MessageId, "outcome", v.Outcome, "err", v.Err)
			}
			if v.Ack {
				continue
			}
			fail()
			if v.RetryAfter > 0 {
				name := QueueName(m.EventSourceARN)
				changes[name] = append(changes[name], queue.VisibilityChange{Receipt: m.ReceiptHandle, Timeout: min(v.RetryAfter, queue.MaxVisibility)})
			}
		}
		for name, cs := range changes {
			for len(cs) > 0 {
				n := min(len(cs), queue.MaxBatch)
				if err := q.ChangeVisibility(ctx, name, cs[:n]...); err != nil {
					// Those messages still come back, after their visibility timeout.
					log.Warn("change visibility failed", "queue", name, "err", err)
				}
				cs = cs[n:]
			}
		}
		return resp, nil
	}
}
