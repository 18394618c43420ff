// Package awsbackend opens the AWS backend: the job store on DynamoDB, the
// task queues on SQS and blobs on S3, through any aws.Config (AWS itself, or
// an emulator through AWS_ENDPOINT_URL).
package awsbackend

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/backend"
	"github.com/slicework/slicework/shared/blob/s3blob"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/queue/sqsqueue"
	"github.com/slicework/slicework/shared/store/dynamostore"
)

// Config names the AWS resources of one slicework deployment.
type Config struct {
	// Table is the DynamoDB table of jobs and chunk outcomes.
	Table string
	// Bucket is the S3 bucket of inputs, data blocks and results.
	Bucket string
	// QueuePrefix is prepended to every queue name to form the SQS queue
	// name (local runs against an emulator use it to keep copies apart).
	QueuePrefix string
	// QueueURLs maps queue names to their URLs. Deployed functions get them
	// from their environment and so make no GetQueueUrl calls; names not in
	// the map are looked up by name.
	QueueURLs map[string]string
	// Clock defaults to the system clock.
	Clock clock.Clock
}

func (c Config) validate() error {
	var errs []error
	if c.Table == "" {
		errs = append(errs, errors.New("no DynamoDB table"))
	}
	if c.Bucket == "" {
		errs = append(errs, errors.New("no S3 bucket"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("awsbackend: %w", err)
	}
	return nil
}

// Open returns the backend on DynamoDB, SQS and S3 that cfg reaches (AWS
// itself, or an emulator through AWS_ENDPOINT_URL). It makes no calls; use
// CreateResources first where nothing has created the table and bucket.
func Open(cfg aws.Config, c Config) (*backend.Backend, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	var opts []dynamostore.Option
	if c.Clock != nil {
		opts = append(opts, dynamostore.WithClock(c.Clock))
	}
	st := dynamostore.New(awsconfig.DynamoDB(cfg), c.Table, opts...)
	q := sqsqueue.New(awsconfig.SQS(cfg), sqsqueue.Options{Prefix: c.QueuePrefix, URLs: c.QueueURLs})
	bl := s3blob.New(awsconfig.S3(cfg), c.Bucket)
	return backend.New("aws", st, q, bl, st.Close), nil
}

// CreateResources creates the table and the bucket of c if they do not
// exist (the local host on an emulator needs this; a deployed stack has
// them from CDK). Queues are created by the host, which knows the channels.
func CreateResources(ctx context.Context, cfg aws.Config, c Config) error {
	if err := c.validate(); err != nil {
		return err
	}
	if err := dynamostore.CreateTable(ctx, awsconfig.DynamoDB(cfg), c.Table); err != nil {
		return fmt.Errorf("awsbackend: %w", err)
	}
	if err := s3blob.New(awsconfig.S3(cfg), c.Bucket).CreateBucket(ctx); err != nil {
		return fmt.Errorf("awsbackend: %w", err)
	}
	return nil
}
