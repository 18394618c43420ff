// Package sqsqueue is the queue.Queue adapter on Amazon SQS (standard
// queues).
//
// A queue name of the port maps to the SQS queue Options.Prefix+name. Its
// URL comes from Options.URLs when that has the name (the Lambda functions
// get their queue URLs from the environment and so make no GetQueueUrl
// call); otherwise it is looked up once with GetQueueUrl and cached.
//
// SQS counts visibility timeouts and delays in whole seconds: every duration
// the adapter passes to SQS is rounded up to the next second, so a message
// never becomes visible earlier than the caller asked. Dead-lettering is done
// by SQS itself through the queue's redrive policy.
//
// Batch calls report failures per entry. Entries that failed through no
// fault of the caller (SenderFault false) are retried with exponential
// back-off, up to maxAttempts calls; an entry that failed through the
// caller's fault is a permanent error that wraps job.ErrInvalid and carries
// the SQS error code and message.
package sqsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
)

// Limits of SQS that the adapter relies on.
const (
	// MaxBatchPayload is the most message-body bytes one SendMessageBatch
	// call carries (the sum over its entries); Send splits batches by it as
	// well as by queue.MaxBatch.
	MaxBatchPayload = 1 << 20
	// MaxReceivesLimit is the largest queue.Config.MaxReceives (SQS's
	// maxReceiveCount range is 1..1000).
	MaxReceivesLimit = 1000
	// DefaultVisibility is the visibility timeout of a queue created with
	// queue.Config.Visibility 0, SQS's default.
	DefaultVisibility = 30 * time.Second
	// Retention is the message retention period Create sets: SQS's maximum,
	// so that delayed or parked work never expires silently.
	Retention = 14 * 24 * time.Hour
	// MaxWait is the longest wait of one ReceiveMessage call; Receive waits
	// longer by calling again.
	MaxWait = 20 * time.Second
)

const (
	// maxNameLen is the longest SQS queue name, prefix included.
	maxNameLen = 80
	// maxAttempts bounds the calls per batch when entries keep failing
	// through no fault of the caller.
	maxAttempts = 6
	// backoffBase and backoffMax shape the back-off between such calls
	// (exponential, full jitter).
	backoffBase = 100 * time.Millisecond
	backoffMax  = 2 * time.Second
	// sendParallelism is how many SendMessageBatch calls one Send runs at
	// once.
	sendParallelism = 4
)

// Options configures New.
type Options struct {
	// Prefix is prepended to every queue name to form the SQS queue name
	// (for example a stage or test name).
	Prefix string
	// URLs maps queue names (without Prefix) to their SQS queue URLs. A name
	// found here is never looked up with GetQueueUrl.
	URLs map[string]string
}

// Queue is a set of named SQS queues. It implements queue.Queue and is safe
// for concurrent use.
type Queue struct {
	client *sqs.Client
	prefix string
	urls   map[string]string

	mu    sync.Mutex
	cache map[string]*lookup // by queue name, URLs looked up with GetQueueUrl
}

// lookup is one GetQueueUrl call; done is closed when url and err are set.
// Failed lookups are not kept in the cache.
type lookup struct {
	done chan struct{}
	url  string
	err  error
}

var _ queue.Queue = (*Queue)(nil)

// New returns the queues of client. opts.URLs is copied.
func New(client *sqs.Client, opts Options) *Queue {
	urls := make(map[string]string, len(opts.URLs))
	for k, v := range opts.URLs {
		urls[k] = v
	}
	return &Queue{client: client, prefix: opts.Prefix, urls: urls, cache: map[string]*lookup{}}
}

// Create creates the SQS queue Prefix+name or updates its attributes so
// that they match cfg; it is idempotent and keeps the queue's messages. name
// is not empty and the full name is 1 to 80 ASCII letters, digits, '-' or '_' (standard queues
// only). cfg.Visibility is 0..queue.MaxVisibility (0 means
// DefaultVisibility) and is rounded up to whole seconds; cfg.MaxReceives is
// 0..MaxReceivesLimit, and a positive value needs a DeadLetter other than
// name, which the caller created first; 0 removes any redrive policy. A bad
// config fails with job.ErrInvalid, a DeadLetter that does not exist with
// job.ErrNotFound. Create also sets the message retention to Retention, the
// maximum message size to queue.MaxBodyBytes and the queue's default delay
// and receive wait to 0. On SQS, attribute changes to an existing queue can
// take up to a minute to take effect.
func (q *Queue) Create(ctx context.Context, name string, cfg queue.Config) error {
	full := q.prefix + name
	if name == "" {
		return fmt.Errorf("sqsqueue: create: empty queue name: %w", job.ErrInvalid)
	}
	if err := validName(full); err != nil {
		return fmt.Errorf("sqsqueue: create %q: %w", full, err)
	}
	switch {
	case cfg.Visibility < 0 || cfg.Visibility > queue.MaxVisibility:
		return fmt.Errorf("sqsqueue: create %s: visibility %v outside 0..%v: %w", name, cfg.Visibility, queue.MaxVisibility, job.ErrInvalid)
	case cfg.MaxReceives < 0 || cfg.MaxReceives > MaxReceivesLimit:
		return fmt.Errorf("sqsqueue: create %s: max receives %d outside 0..%d: %w", name, cfg.MaxReceives, MaxReceivesLimit, job.ErrInvalid)
	case cfg.MaxReceives > 0 && cfg.DeadLetter == "":
		return fmt.Errorf("sqsqueue: create %s: max receives %d without a dead-letter queue: %w", name, cfg.MaxReceives, job.ErrInvalid)
	case cfg.MaxReceives > 0 && cfg.DeadLetter == name:
		return fmt.Errorf("sqsqueue: create %s: queue is its own dead-letter queue: %w", name, job.ErrInvalid)
	}
	vis := cfg.Visibility
	if vis == 0 {
		vis = DefaultVisibility
	}
	want := map[string]string{
		string(types.QueueAttributeNameVisibilityTimeout):             strconv.Itoa(seconds(vis)),
		string(types.QueueAttributeNameMessageRetentionPeriod):        strconv.Itoa(seconds(Retention)),
		string(types.QueueAttributeNameMaximumMessageSize):            strconv.Itoa(queue.MaxBodyBytes),
		string(types.QueueAttributeNameDelaySeconds):                  "0",
		string(types.QueueAttributeNameReceiveMessageWaitTimeSeconds): "0",
	}
	var dlqARN string
	if cfg.MaxReceives > 0 {
		arn, err := q.arn(ctx, cfg.DeadLetter)
		if err != nil {
			return fmt.Errorf("sqsqueue: create %s: dead-letter queue: %w", name, err)
		}
		dlqARN = arn
		policy, err := json.Marshal(redrivePolicy{DeadLetterTargetARN: arn, MaxReceiveCount: cfg.MaxReceives})
		if err != nil {
			return fmt.Errorf("sqsqueue: create %s: %w", name, err)
		}
		want[string(types.QueueAttributeNameRedrivePolicy)] = string(policy)
	}

	url, err := q.createOrFind(ctx, full, want)
	if err != nil {
		return fmt.Errorf("sqsqueue: create %s: %w", name, err)
	}
	// CreateQueue compares only the attributes it is given (and some
	// emulators not even those), so read them back and set what differs.
	names := []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}
	for k := range want {
		if k != string(types.QueueAttributeNameRedrivePolicy) {
			names = append(names, types.QueueAttributeName(k))
		}
	}
	got, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		return fmt.Errorf("sqsqueue: create %s: %w", name, q.apiError(name, err))
	}
	diff := map[string]string{}
	for k, v := range want {
		if k == string(types.QueueAttributeNameRedrivePolicy) {
			continue
		}
		if got.Attributes[k] != v {
			diff[k] = v
		}
	}
	have, hasPolicy := got.Attributes[string(types.QueueAttributeNameRedrivePolicy)]
	hasPolicy = hasPolicy && have != ""
	switch {
	case cfg.MaxReceives > 0 && !samePolicy(have, dlqARN, cfg.MaxReceives):
		diff[string(types.QueueAttributeNameRedrivePolicy)] = want[string(types.QueueAttributeNameRedrivePolicy)]
	case cfg.MaxReceives == 0 && hasPolicy:
		diff[string(types.QueueAttributeNameRedrivePolicy)] = "" // removes it
	}
	if len(diff) > 0 {
		if _, err := q.client.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(url), Attributes: diff}); err != nil {
			return fmt.Errorf("sqsqueue: create %s: set attributes: %w", name, q.apiError(name, err))
		}
	}
	if _, ok := q.urls[name]; !ok {
		q.remember(name, url)
	}
	return nil
}

// createOrFind creates the SQS queue full with attrs and returns its URL;
// if a queue of that name exists with other attributes, it returns that
// queue's URL.
func (q *Queue) createOrFind(ctx context.Context, full string, attrs map[string]string) (string, error) {
	out, err := q.client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(full), Attributes: attrs})
	if err == nil {
		return aws.ToString(out.QueueUrl), nil
	}
	var exists *types.QueueNameExists
	if !errors.As(err, &exists) && !hasCode(err, "QueueNameExists", "QueueAlreadyExists") {
		return "", err
	}
	got, err := q.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(full)})
	if err != nil {
		return "", err
	}
	return aws.ToString(got.QueueUrl), nil
}

// redrivePolicy is the JSON of the RedrivePolicy queue attribute.
type redrivePolicy struct {
	DeadLetterTargetARN string `json:"deadLetterTargetArn"`
	MaxReceiveCount     int    `json:"maxReceiveCount"`
}

// samePolicy reports whether the RedrivePolicy attribute value have names
// arn and maxReceives (SQS may render maxReceiveCount as a number or a
// string).
func samePolicy(have, arn string, maxReceives int) bool {
	var p struct {
		DeadLetterTargetARN string          `json:"deadLetterTargetArn"`
		MaxReceiveCount     json.RawMessage `json:"maxReceiveCount"`
	}
	if have == "" || json.Unmarshal([]byte(have), &p) != nil {
		return false
	}
	n, err := strconv.Atoi(strings.Trim(string(p.MaxReceiveCount), `"`))
	return err == nil && n == maxReceives && p.DeadLetterTargetARN == arn
}

// arn returns the ARN of the named queue.
func (q *Queue) arn(ctx context.Context, name string) (string, error) {
	url, err := q.url(ctx, name)
	if err != nil {
		return "", err
	}
	out, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", q.apiError(name, err)
	}
	arn := out.Attributes[string(types.QueueAttributeNameQueueArn)]
	if arn == "" {
		return "", fmt.Errorf("queue %q has no QueueArn attribute", name)
	}
	return arn, nil
}

// Send enqueues msgs with SendMessageBatch, in batches of at most
// queue.MaxBatch entries and MaxBatchPayload body bytes, several batches at
// once. Every message is checked first: a body that is empty, over
// queue.MaxBodyBytes, not valid UTF-8 or holding characters SQS rejects
// (anything but #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD,
// #x10000-#x10FFFF), or a delay outside 0..queue.MaxDelay, fails the call
// with job.ErrInvalid before anything is sent. Delays are rounded up to
// whole seconds. Unlike the embedded adapter, Send is not atomic: when it
// fails after the checks, some of the messages may have been sent.
func (q *Queue) Send(ctx context.Context, name string, msgs ...queue.Outgoing) error {
	total := 0
	for i, m := range msgs {
		if err := queue.Validate(m); err != nil {
			return fmt.Errorf("sqsqueue: send %s: message %d: %w", name, i, err)
		}
		total += len(m.Body)
	}
	url, err := q.url(ctx, name)
	if err != nil {
		return fmt.Errorf("sqsqueue: send %s: %w", name, err)
	}
	batches := splitBatches(msgs)
	if len(batches) <= 1 {
		for _, b := range batches {
			if err := q.sendBatch(ctx, name, url, b); err != nil {
				return fmt.Errorf("sqsqueue: send %s: %w", name, err)
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, sendParallelism)
		errOnce  sync.Once
		firstErr error
	)
	for _, b := range batches {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := q.sendBatch(ctx, name, url, b); err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err() // the caller's context ended between batches
	}
	if firstErr != nil {
		return fmt.Errorf("sqsqueue: send %s: %d messages (%d bytes), some may have been sent: %w", name, len(msgs), total, firstErr)
	}
	return nil
}

// splitBatches cuts msgs into SendMessageBatch calls of at most
// queue.MaxBatch entries and MaxBatchPayload body bytes, in order.
func splitBatches(msgs []queue.Outgoing) [][]queue.Outgoing {
	var (
		out   [][]queue.Outgoing
		start int
		bytes int
	)
	for i, m := range msgs {
		if i > start && (i-start == queue.MaxBatch || bytes+len(m.Body) > MaxBatchPayload) {
			out = append(out, msgs[start:i])
			start, bytes = i, 0
		}
		bytes += len(m.Body)
	}
	if start < len(msgs) {
		out = append(out, msgs[start:])
	}
	return out
}

// sendBatch sends one batch, retrying entries that failed through no fault
// of the caller.
func (q *Queue) sendBatch(ctx context.Context, name, url string, batch []queue.Outgoing) error {
	entries := make(map[string]types.SendMessageBatchRequestEntry, len(batch))
	ids := make([]string, len(batch))
	for i, m := range batch {
		id := strconv.Itoa(i)
		ids[i] = id
		entries[id] = types.SendMessageBatchRequestEntry{
			Id:           aws.String(id),
			MessageBody:  aws.String(string(m.Body)),
			DelaySeconds: int32(seconds(m.Delay)),
		}
	}
	return q.runBatch(ctx, name, ids, func(ids []string) ([]types.BatchResultErrorEntry, error) {
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(url)}
		for _, id := range ids {
			in.Entries = append(in.Entries, entries[id])
		}
		out, err := q.client.SendMessageBatch(ctx, in)
		if err != nil {
			return nil, err
		}
		return out.Failed, nil
	}, nil)
}

// Receive leases up to max (1..queue.MaxBatch) messages for visibility
// (0..queue.MaxVisibility, rounded up to whole seconds; 0 means the queue's
// default), waiting up to wait (not negative) for the first one: a wait
// under a second waits one second, and a wait over MaxWait takes several
// ReceiveMessage calls. It returns no messages and no error when none
// arrive in time. SQS moves a message whose receive count would exceed the
// queue's MaxReceives to the dead-letter queue instead of returning it.
// SentAt and FirstReceivedAt have millisecond precision; FirstReceivedAt and
// ReceiveCount are approximate, as SQS says.
func (q *Queue) Receive(ctx context.Context, name string, max int, visibility, wait time.Duration) ([]queue.Message, error) {
	switch {
	case max < 1 || max > queue.MaxBatch:
		return nil, fmt.Errorf("sqsqueue: receive %s: max %d outside 1..%d: %w", name, max, queue.MaxBatch, job.ErrInvalid)
	case visibility < 0 || visibility > queue.MaxVisibility:
		return nil, fmt.Errorf("sqsqueue: receive %s: visibility %v outside 0..%v: %w", name, visibility, queue.MaxVisibility, job.ErrInvalid)
	case wait < 0:
		return nil, fmt.Errorf("sqsqueue: receive %s: negative wait %v: %w", name, wait, job.ErrInvalid)
	}
	url, err := q.url(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("sqsqueue: receive %s: %w", name, err)
	}
	deadline := time.Now().Add(wait)
	waitSecs := min(seconds(wait), seconds(MaxWait)) // the first call waits at least 1 s if asked to wait at all
	for {
		out, err := q.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:            aws.String(url),
			MaxNumberOfMessages: int32(max),
			VisibilityTimeout:   int32(seconds(visibility)), // 0 is omitted: the queue's default
			WaitTimeSeconds:     int32(waitSecs),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{
				types.MessageSystemAttributeNameApproximateReceiveCount,
				types.MessageSystemAttributeNameSentTimestamp,
				types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
			},
		})
		if err != nil {
			return nil, fmt.Errorf("sqsqueue: receive %s: %w", name, q.apiError(name, err))
		}
		if len(out.Messages) > 0 {
			msgs := make([]queue.Message, len(out.Messages))
			for i, m := range out.Messages {
				if msgs[i], err = message(m); err != nil {
					return nil, fmt.Errorf("sqsqueue: receive %s: %w", name, err)
				}
			}
			return msgs, nil
		}
		// Keep waiting while at least half a second of the wait is left.
		remaining := time.Until(deadline).Round(time.Second)
		if remaining <= 0 {
			return nil, nil
		}
		waitSecs = min(int(remaining/time.Second), seconds(MaxWait))
	}
}

// message converts a received SQS message.
func message(m types.Message) (queue.Message, error) {
	out := queue.Message{
		ID:      aws.ToString(m.MessageId),
		Body:    []byte(aws.ToString(m.Body)),
		Receipt: aws.ToString(m.ReceiptHandle),
	}
	attr := func(n types.MessageSystemAttributeName) (int64, error) {
		v, ok := m.Attributes[string(n)]
		if !ok {
			return 0, fmt.Errorf("message %s has no attribute %s", out.ID, n)
		}
		i, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("message %s: attribute %s: %w", out.ID, n, err)
		}
		return i, nil
	}
	count, err := attr(types.MessageSystemAttributeNameApproximateReceiveCount)
	if err != nil {
		return out, err
	}
	sent, err := attr(types.MessageSystemAttributeNameSentTimestamp)
	if err != nil {
		return out, err
	}
	first, err := attr(types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp)
	if err != nil {
		return out, err
	}
	out.ReceiveCount = int(count)
	out.SentAt = time.UnixMilli(sent).UTC()
	out.FirstReceivedAt = time.UnixMilli(first).UTC()
	return out, nil
}

// Delete removes delivered messages by receipt with DeleteMessageBatch, at
// most queue.MaxBatch receipts (more fail with job.ErrInvalid). Stale,
// unknown and empty receipts are ignored. On SQS, a receipt of an earlier
// delivery may or may not delete the message.
func (q *Queue) Delete(ctx context.Context, name string, receipts ...string) error {
	if len(receipts) > queue.MaxBatch {
		return fmt.Errorf("sqsqueue: delete %s: %d receipts over %d: %w", name, len(receipts), queue.MaxBatch, job.ErrInvalid)
	}
	url, err := q.url(ctx, name)
	if err != nil {
		return fmt.Errorf("sqsqueue: delete %s: %w", name, err)
	}
	entries := map[string]types.DeleteMessageBatchRequestEntry{}
	var ids []string
	for i, r := range receipts {
		if r == "" {
			continue
		}
		id := strconv.Itoa(i)
		ids = append(ids, id)
		entries[id] = types.DeleteMessageBatchRequestEntry{Id: aws.String(id), ReceiptHandle: aws.String(r)}
	}
	if len(ids) == 0 {
		return nil
	}
	err = q.runBatch(ctx, name, ids, func(ids []string) ([]types.BatchResultErrorEntry, error) {
		in := &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url)}
		for _, id := range ids {
			in.Entries = append(in.Entries, entries[id])
		}
		out, err := q.client.DeleteMessageBatch(ctx, in)
		if err != nil {
			return nil, err
		}
		return out.Failed, nil
	}, func(types.BatchResultErrorEntry) {}) // stale receipts are ignored
	if err != nil {
		return fmt.Errorf("sqsqueue: delete %s: %w", name, err)
	}
	return nil
}

// ChangeVisibility makes delivered messages visible again after their
// timeouts (0..queue.MaxVisibility, rounded up to whole seconds) from now,
// with ChangeMessageVisibilityBatch, at most queue.MaxBatch per call (more,
// or a timeout out of range, fail with job.ErrInvalid before any change).
// Every valid change is applied; if some receipts are stale, unknown or
// empty, the error wraps job.ErrNotFound and names them. SQS counts the
// 12-hour limit from the message's receipt and rejects (job.ErrInvalid) a
// change that would keep it hidden longer.
func (q *Queue) ChangeVisibility(ctx context.Context, name string, changes ...queue.VisibilityChange) error {
	if len(changes) > queue.MaxBatch {
		return fmt.Errorf("sqsqueue: change visibility %s: %d changes, more than %d: %w", name, len(changes), queue.MaxBatch, job.ErrInvalid)
	}
	for _, c := range changes {
		if c.Timeout < 0 || c.Timeout > queue.MaxVisibility {
			return fmt.Errorf("sqsqueue: change visibility %s: %v outside 0..%v: %w", name, c.Timeout, queue.MaxVisibility, job.ErrInvalid)
		}
	}
	url, err := q.url(ctx, name)
	if err != nil {
		return fmt.Errorf("sqsqueue: change visibility %s: %w", name, err)
	}
	var stale []string
	entries := map[string]types.ChangeMessageVisibilityBatchRequestEntry{}
	var ids []string
	for i, c := range changes {
		if c.Receipt == "" {
			stale = append(stale, `"" (empty)`)
			continue
		}
		id := strconv.Itoa(i)
		ids = append(ids, id)
		entries[id] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(id),
			ReceiptHandle:     aws.String(c.Receipt),
			VisibilityTimeout: int32(seconds(c.Timeout)),
		}
	}
	if len(ids) > 0 {
		err = q.runBatch(ctx, name, ids, func(ids []string) ([]types.BatchResultErrorEntry, error) {
			in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url)}
			for _, id := range ids {
				in.Entries = append(in.Entries, entries[id])
			}
			out, err := q.client.ChangeMessageVisibilityBatch(ctx, in)
			if err != nil {
				return nil, err
			}
			return out.Failed, nil
		}, func(f types.BatchResultErrorEntry) {
			stale = append(stale, fmt.Sprintf("%q (%s: %s)", aws.ToString(entries[aws.ToString(f.Id)].ReceiptHandle), aws.ToString(f.Code), aws.ToString(f.Message)))
		})
	}
	if err != nil {
		return fmt.Errorf("sqsqueue: change visibility %s: %w", name, err)
	}
	if len(stale) > 0 {
		return fmt.Errorf("sqsqueue: change visibility %s: receipts stale or unknown: %s: %w", name, strings.Join(stale, ", "), job.ErrNotFound)
	}
	return nil
}

// Stats reports the queue's depth from the approximate counts of
// GetQueueAttributes (ApproximateNumberOfMessages, ...NotVisible and
// ...Delayed), which SQS updates eventually, not at once. OldestAge is
// always 0: SQS exposes the age of the oldest message only as the
// CloudWatch metric ApproximateAgeOfOldestMessage, not through its API, and
// finding it by receiving messages would disturb the queue.
func (q *Queue) Stats(ctx context.Context, name string) (queue.Stats, error) {
	url, err := q.url(ctx, name)
	if err != nil {
		return queue.Stats{}, fmt.Errorf("sqsqueue: stats %s: %w", name, err)
	}
	out, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return queue.Stats{}, fmt.Errorf("sqsqueue: stats %s: %w", name, q.apiError(name, err))
	}
	var st queue.Stats
	for _, f := range []struct {
		attr types.QueueAttributeName
		dst  *int
	}{
		{types.QueueAttributeNameApproximateNumberOfMessages, &st.Visible},
		{types.QueueAttributeNameApproximateNumberOfMessagesNotVisible, &st.InFlight},
		{types.QueueAttributeNameApproximateNumberOfMessagesDelayed, &st.Delayed},
	} {
		v, ok := out.Attributes[string(f.attr)]
		if !ok {
			continue // SQS leaves out what it does not know; treat as 0
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return queue.Stats{}, fmt.Errorf("sqsqueue: stats %s: attribute %s: %w", name, f.attr, err)
		}
		*f.dst = n
	}
	return st, nil
}

// runBatch calls call with the ids of the entries still pending until none
// fails retryably. A failed entry whose code says its receipt is stale is
// passed to stale when stale is non-nil (Delete and ChangeVisibility);
// otherwise an entry that failed through the caller's fault is a permanent
// error wrapping job.ErrInvalid, and any other is retried with back-off up
// to maxAttempts calls. Permanent errors do not stop the retries of other
// entries; they are all returned together.
func (q *Queue) runBatch(ctx context.Context, name string, ids []string, call func(ids []string) ([]types.BatchResultErrorEntry, error), stale func(types.BatchResultErrorEntry)) error {
	var permanent []error
	pending := ids
	for attempt := 1; ; attempt++ {
		failed, err := call(pending)
		if err != nil {
			return errors.Join(append(permanent, q.apiError(name, err))...)
		}
		var (
			again []string
			last  types.BatchResultErrorEntry
		)
		for _, f := range failed {
			id, code := aws.ToString(f.Id), errorCode(aws.ToString(f.Code))
			switch {
			case stale != nil && staleReceipt(code, aws.ToString(f.Message)):
				stale(f)
			case f.SenderFault:
				permanent = append(permanent, fmt.Errorf("entry %s: %s: %s: %w", id, aws.ToString(f.Code), aws.ToString(f.Message), job.ErrInvalid))
			default:
				again = append(again, id)
				last = f
			}
		}
		if len(again) == 0 {
			return errors.Join(permanent...)
		}
		if attempt >= maxAttempts {
			return errors.Join(append(permanent, fmt.Errorf("%d entries still failing after %d attempts, last with %s: %s",
				len(again), attempt, aws.ToString(last.Code), aws.ToString(last.Message)))...)
		}
		if err := sleep(ctx, backoff(attempt)); err != nil {
			return errors.Join(append(permanent, err)...)
		}
		pending = again
	}
}

// staleReceipt reports whether a batch entry failed because its receipt
// handle is not (or no longer) current.
func staleReceipt(code, msg string) bool {
	switch code {
	case "ReceiptHandleIsInvalid", "MessageNotInflight":
		return true
	case "InvalidParameterValue":
		return strings.Contains(strings.ToLower(msg), "receipt handle")
	}
	return false
}

// backoff returns the pause before call attempt+1: exponential with full
// jitter.
func backoff(attempt int) time.Duration {
	d := min(backoffMax, backoffBase<<(attempt-1))
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// url returns the URL of the named queue: from Options.URLs, the cache, or
// one GetQueueUrl call shared by concurrent callers.
func (q *Queue) url(ctx context.Context, name string) (string, error) {
	if u, ok := q.urls[name]; ok {
		return u, nil
	}
	for {
		q.mu.Lock()
		l, ok := q.cache[name]
		if !ok {
			l = &lookup{done: make(chan struct{})}
			q.cache[name] = l
			q.mu.Unlock()
			out, err := q.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(q.prefix + name)})
			if err != nil {
				l.err = q.apiError(name, err)
				q.forget(name, l)
			} else {
				l.url = aws.ToString(out.QueueUrl)
			}
			close(l.done)
			return l.url, l.err
		}
		q.mu.Unlock()
		select {
		case <-l.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		// Another caller's context ended its lookup: look again with ours.
		if errors.Is(l.err, context.Canceled) || errors.Is(l.err, context.DeadlineExceeded) {
			continue
		}
		return l.url, l.err
	}
}

// remember caches the URL of the named queue.
func (q *Queue) remember(name, url string) {
	l := &lookup{done: make(chan struct{}), url: url}
	close(l.done)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cache[name] = l
}

// forget drops l from the cache if it is still the entry of name (or any
// entry when l is nil).
func (q *Queue) forget(name string, l *lookup) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if cur, ok := q.cache[name]; ok && (l == nil || cur == l) {
		delete(q.cache, name)
	}
}

// apiError maps an SDK error: a queue that does not exist becomes
// job.ErrNotFound (and its cached URL is dropped, in case the queue is
// created again).
func (q *Queue) apiError(name string, err error) error {
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) || hasCode(err, "QueueDoesNotExist", "NonExistentQueue") {
		q.forget(name, nil)
		return fmt.Errorf("queue %q (%s): %w: %w", name, q.prefix+name, job.ErrNotFound, err)
	}
	return err
}

// hasCode reports whether err is an API error with one of codes, ignoring
// the "AWS.SimpleQueueService." prefix of the query-protocol codes.
func hasCode(err error, codes ...string) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	code := errorCode(api.ErrorCode())
	for _, c := range codes {
		if code == c {
			return true
		}
	}
	return false
}

func errorCode(code string) string {
	return strings.TrimPrefix(code, "AWS.SimpleQueueService.")
}

// seconds rounds d up to whole seconds (0 for d <= 0).
func seconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// validName checks a queue name against SQS's rules.
func validName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("name must have 1 to %d characters: %w", maxNameLen, job.ErrInvalid)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("name may only contain ASCII letters, digits, '-' and '_': %w", job.ErrInvalid)
		}
	}
	return nil
}
