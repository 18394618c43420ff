// Command api is the HTTP API function behind API Gateway (HTTP API,
// payload format 2.0).
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/slicework/slicework/shared/api"
	"github.com/slicework/slicework/shared/function"
)

func main() {
	rt := function.MustOpen(context.Background())
	lambda.Start(httpadapter.NewV2(api.New(rt.Engine, rt.Log)).ProxyWithContext)
}
