package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Environment variables of the functions. Each is read by
// shared/function (ParseEnv), which the infra module does not import: it
// pulls in the AWS adapters, and the stack must synthesize without them.
const (
	EnvTable    = "SLICEWORK_TABLE"
	EnvBucket   = "SLICEWORK_BUCKET"
	EnvQueues   = "SLICEWORK_QUEUES"
	EnvLogLevel = "SLICEWORK_LOG_LEVEL"
	// EnvEventBus names the EventBridge bus of job completion events.
	EnvEventBus = "SLICEWORK_EVENT_BUS"
)

// SliceworkFunctionProps configures NewSliceworkFunction.
type SliceworkFunctionProps struct {
	// Name is the function's name in functions/ and in the build directory.
	Name string
	// Description is shown in the Lambda console.
	Description string
	// BuildDir holds <Name>/bootstrap.
	BuildDir string
	// Architecture is ArchARM64 or ArchX8664, as the bootstrap was built.
	Architecture string
	// Settings size the function.
	Settings FunctionSettings
	// Environment is the function's environment.
	Environment map[string]*string
	// LogRetention is the retention of the function's log group.
	LogRetention awslogs.RetentionDays
	// Protect keeps the log group when the stack is deleted.
	Protect bool
	// Tracing turns on X-Ray active tracing.
	Tracing bool
	// DeadLetterQueue, if set, receives asynchronous invocations that failed
	// every retry (EventBridge targets invoke asynchronously).
	DeadLetterQueue awssqs.IQueue
}

// SliceworkFunction is a Go Lambda function (provided.al2023, arm64 unless
// configured otherwise, one
// `bootstrap`) with its own role and log group. The role starts with no
// permission but writing to that log group: unlike the default
// AWSLambdaBasicExecutionRole (logs:* on every log group) it names one
// resource. Callers add grants for what the function uses.
type SliceworkFunction struct {
	Function awslambda.Function
	Role     awsiam.Role
	LogGroup awslogs.LogGroup
}

// NewSliceworkFunction creates the function in a construct named id. It
// fails if <BuildDir>/<Name>/bootstrap does not exist (run `make build`).
func NewSliceworkFunction(scope constructs.Construct, id string, p SliceworkFunctionProps) (*SliceworkFunction, error) {
	dir := filepath.Join(p.BuildDir, p.Name)
	if fi, err := os.Stat(filepath.Join(dir, "bootstrap")); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("function %s: no %s: run `make build` first (or set the context buildDir)", p.Name, filepath.Join(dir, "bootstrap"))
	}
	arch := awslambda.Architecture_ARM_64()
	if p.Architecture == ArchX8664 {
		arch = awslambda.Architecture_X86_64()
	}
	c := constructs.NewConstruct(scope, jsii.String(id))
	removal := awscdk.RemovalPolicy_DESTROY
	if p.Protect {
		removal = awscdk.RemovalPolicy_RETAIN
	}
	logs := awslogs.NewLogGroup(c, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention:     p.LogRetention,
		RemovalPolicy: removal,
	})
	role := awsiam.NewRole(c, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("slicework " + p.Name + " function"),
	})
	logs.GrantWrite(role)
	tracing := awslambda.Tracing_DISABLED
	if p.Tracing {
		tracing = awslambda.Tracing_ACTIVE
	}
	fn := awslambda.NewFunction(c, jsii.String("Function"), &awslambda.FunctionProps{
		Description:     jsii.String(p.Description),
		Runtime:         awslambda.Runtime_PROVIDED_AL2023(),
		Architecture:    arch,
		Handler:         jsii.String("bootstrap"),
		Code:            awslambda.Code_FromAsset(jsii.String(dir), nil),
		MemorySize:      jsii.Number(float64(p.Settings.MemoryMB)),
		Timeout:         awscdk.Duration_Seconds(jsii.Number(p.Settings.Timeout.Seconds())),
		Environment:     &p.Environment,
		Role:            role,
		LogGroup:        logs,
		Tracing:         tracing,
		DeadLetterQueue: p.DeadLetterQueue,
	})
	return &SliceworkFunction{Function: fn, Role: role, LogGroup: logs}, nil
}

// retentionDays maps days to CloudWatch Logs' retention values.
var retentionDays = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS,
	731: awslogs.RetentionDays_TWO_YEARS, 1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS,
	2192: awslogs.RetentionDays_SIX_YEARS, 2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS,
	3288: awslogs.RetentionDays_NINE_YEARS, 3653: awslogs.RetentionDays_TEN_YEARS,
}
