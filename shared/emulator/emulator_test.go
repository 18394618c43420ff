package emulator_test

import (
	"context"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/emulator"
)

func TestMain(m *testing.M) { os.Exit(emulator.Run(m)) }

// Each emulator starts and answers S3, SQS and DynamoDB through the
// configuration every adapter uses.
func TestEmulatorsAnswer(t *testing.T) {
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cfg := emulator.Config(t, k, nil)
			if _, err := awsconfig.S3(cfg).ListBuckets(ctx, &s3.ListBucketsInput{}); err != nil {
				t.Errorf("S3 ListBuckets: %v", err)
			}
			if _, err := awsconfig.SQS(cfg).ListQueues(ctx, &sqs.ListQueuesInput{}); err != nil {
				t.Errorf("SQS ListQueues: %v", err)
			}
			if _, err := awsconfig.DynamoDB(cfg).ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
				t.Errorf("DynamoDB ListTables: %v", err)
			}
		})
	}
}
