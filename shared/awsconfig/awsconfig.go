// Package awsconfig loads the AWS SDK configuration the way every slicework
// binary and test does: the SDK's standard chain (environment, shared
// files, IAM role), including AWS_ENDPOINT_URL and its per-service variants,
// so LocalStack, MiniStack and moto work with no code change. It also builds
// the service clients with the options emulators need.
package awsconfig

import (
	"context"
	"fmt"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// DefaultMaxAttempts is the SDK retry budget per call unless AWS_MAX_ATTEMPTS
// says otherwise: generous, because a throttled call that gives up costs a
// whole redelivery.
const DefaultMaxAttempts = 8

// Load reads the standard configuration chain. Checksums are computed and
// validated only where an API requires them, which AWS and the emulators
// both accept.
func Load(ctx context.Context, optFns ...func(*config.LoadOptions) error) (aws.Config, error) {
	opts := []func(*config.LoadOptions) error{
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if os.Getenv("AWS_MAX_ATTEMPTS") == "" {
		opts = append(opts, config.WithRetryMaxAttempts(DefaultMaxAttempts))
	}
	cfg, err := config.LoadDefaultConfig(ctx, append(opts, optFns...)...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("awsconfig: load: %w", err)
	}
	return cfg, nil
}

// ForEndpoint loads a configuration for an AWS-API emulator at endpoint:
// static test credentials, the given region, and every service at endpoint.
// client, if non-nil, carries the requests (tests inject faults with it).
func ForEndpoint(ctx context.Context, endpoint, region string, client *http.Client) (aws.Config, error) {
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("test", "test", "")),
		config.WithBaseEndpoint(endpoint),
	}
	cfg, err := Load(ctx, opts...)
	if err != nil {
		return aws.Config{}, err
	}
	if client != nil {
		// Set after loading: the loader would try to add AWS_CA_BUNDLE's
		// roots to a client it did not build, and fail.
		cfg.HTTPClient = client
	}
	return cfg, nil
}

// customEndpoint reports whether S3 requests go to an endpoint other than
// AWS's own, where virtual-hosted bucket names do not resolve.
func customEndpoint(cfg aws.Config) bool {
	return cfg.BaseEndpoint != nil || os.Getenv("AWS_ENDPOINT_URL") != "" || os.Getenv("AWS_ENDPOINT_URL_S3") != ""
}

// S3 returns an S3 client for cfg, path-style when an endpoint is set.
func S3(cfg aws.Config, optFns ...func(*s3.Options)) *s3.Client {
	path := customEndpoint(cfg)
	return s3.NewFromConfig(cfg, append([]func(*s3.Options){func(o *s3.Options) { o.UsePathStyle = o.UsePathStyle || path }}, optFns...)...)
}

// SQS returns an SQS client for cfg.
func SQS(cfg aws.Config, optFns ...func(*sqs.Options)) *sqs.Client {
	return sqs.NewFromConfig(cfg, optFns...)
}

// DynamoDB returns a DynamoDB client for cfg.
func DynamoDB(cfg aws.Config, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.NewFromConfig(cfg, optFns...)
}

// EventBridge returns an EventBridge client for cfg.
func EventBridge(cfg aws.Config, optFns ...func(*eventbridge.Options)) *eventbridge.Client {
	return eventbridge.NewFromConfig(cfg, optFns...)
}
