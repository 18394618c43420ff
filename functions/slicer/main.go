// Command slicer is the slice-queue function: it slices jobs into chunk
// tasks and runs finish steps.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/slicework/slicework/shared/function"
	"github.com/slicework/slicework/shared/handler"
)

func main() {
	rt := function.MustOpen(context.Background())
	lambda.Start(handler.Slicer(rt.Engine, rt.Log))
}
