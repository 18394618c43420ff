// Command scheduler is run by EventBridge rules: the sweeper rule, once a
// minute, makes it release due jobs and parked retries and re-drive stalled
// jobs; each schedule's rule (schedules.json) makes it submit the
// schedule's job for the firing's tick, once per tick.
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
