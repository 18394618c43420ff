// Command scheduler is the sweeper, run by an EventBridge rule once a
// minute: it releases due jobs and parked retries and re-drives stalled jobs.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/slicework/slicework/shared/function"
	"github.com/slicework/slicework/shared/handler"
)

func main() {
	rt := function.MustOpen(context.Background())
	lambda.Start(handler.Scheduler(rt.Engine, rt.Log))
}
