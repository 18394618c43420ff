// Command worker is the chunk-queue function: one event source mapping per
// channel queue feeds it chunk tasks.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/slicework/slicework/shared/function"
	"github.com/slicework/slicework/shared/handler"
)

func main() {
	rt := function.MustOpen(context.Background())
	lambda.Start(handler.Worker(rt.Engine, rt.Backend.Queue, rt.Log))
}
