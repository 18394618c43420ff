package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// PublicAPIWarning is the warning that a stack with a public API carries
// (shown by `cdk synth` and `cdk deploy`).
const PublicAPIWarning = "slicework: the HTTP API has NO AUTHORIZATION (publicApi=true): anyone who finds its URL can submit and cancel jobs. Use it only for throw-away stages."

// JobAPIProps configures NewJobAPI.
type JobAPIProps struct {
	// Handler is the api function.
	Handler awslambda.IFunction
	// JWT, if set, authorizes requests with JWTs from this issuer.
	JWT *JWTAuth
	// Public removes authorization (with a warning on the stack).
	Public bool
	// RateLimit and BurstLimit throttle the default stage.
	RateLimit  float64
	BurstLimit int
	// LogRetention and Protect apply to the access log group.
	LogRetention awslogs.RetentionDays
	Protect      bool
}

// JobAPI is the HTTP API (API Gateway v2) in front of the api function.
type JobAPI struct {
	API       awsapigatewayv2.HttpApi
	AccessLog awslogs.LogGroup
}

// NewJobAPI creates an HTTP API whose every request ($default route) goes
// to the api function. Authorization is required by default: IAM (SigV4
// signed requests from principals allowed execute-api:Invoke), or a JWT
// authorizer when JWT is set; only an explicit Public turns it off, and
// then a warning is added to the construct. The default stage writes JSON
// access logs and is throttled.
func NewJobAPI(scope constructs.Construct, id string, p JobAPIProps) *JobAPI {
	c := constructs.NewConstruct(scope, jsii.String(id))
	var auth awsapigatewayv2.IHttpRouteAuthorizer
	switch {
	case p.Public:
		auth = awsapigatewayv2.NewHttpNoneAuthorizer()
		awscdk.Annotations_Of(c).AddWarningV2(jsii.String("slicework:public-api"), jsii.String(PublicAPIWarning))
	case p.JWT != nil:
		auth = awsapigatewayv2authorizers.NewHttpJwtAuthorizer(jsii.String("Jwt"), jsii.String(p.JWT.Issuer),
			&awsapigatewayv2authorizers.HttpJwtAuthorizerProps{JwtAudience: jsii.Strings(p.JWT.Audience...)})
	default:
		auth = awsapigatewayv2authorizers.NewHttpIamAuthorizer()
	}
	api := awsapigatewayv2.NewHttpApi(c, jsii.String("HttpApi"), &awsapigatewayv2.HttpApiProps{
		Description:        jsii.String("slicework job API"),
		DefaultIntegration: awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String("Api"), p.Handler, nil),
		DefaultAuthorizer:  auth,
	})
	removal := awscdk.RemovalPolicy_DESTROY
	if p.Protect {
		removal = awscdk.RemovalPolicy_RETAIN
	}
	accessLog := awslogs.NewLogGroup(c, jsii.String("AccessLog"), &awslogs.LogGroupProps{
		Retention:     p.LogRetention,
		RemovalPolicy: removal,
	})
	// The L2 HttpStage takes access log settings only as a jsii interface;
	// the L1 properties are plain data.
	stage := api.DefaultStage().Node().DefaultChild().(awsapigatewayv2.CfnStage)
	stage.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: accessLog.LogGroupArn(),
		Format:         jsii.String(accessLogFormat),
	})
	stage.SetDefaultRouteSettings(&awsapigatewayv2.CfnStage_RouteSettingsProperty{
		ThrottlingRateLimit:  jsii.Number(p.RateLimit),
		ThrottlingBurstLimit: jsii.Number(float64(p.BurstLimit)),
	})
	return &JobAPI{API: api, AccessLog: accessLog}
}

// accessLogFormat is one JSON object per request, with the caller's
// identity (IAM or JWT) and the integration's error if any.
const accessLogFormat = `{"requestId":"$context.requestId","ip":"$context.identity.sourceIp",` +
	`"requestTime":"$context.requestTime","method":"$context.httpMethod","path":"$context.path",` +
	`"status":"$context.status","responseLength":"$context.responseLength",` +
	`"latencyMs":"$context.responseLatency","integrationError":"$context.integrationErrorMessage",` +
	`"userArn":"$context.identity.userArn","jwtSub":"$context.authorizer.claims.sub"}`
