package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/schedule"
)

// StageTag is the tag that every resource of a stage carries, with the
// stage as its value.
const StageTag = "slicework:stage"

// StackInputs is what the stack is built from besides its Config.
type StackInputs struct {
	// Registry holds the job kinds; its channels get a queue each.
	Registry *engine.Registry
	// Schema is the job table's schema.
	Schema TableSchema
	// Schedules become EventBridge rules.
	Schedules []schedule.Definition
}

// SliceworkStack is one stage of slicework: the resources of the design's
// "Infrastructure (CDK Go)" section.
type SliceworkStack struct {
	Stack  awscdk.Stack
	Config Config
	Table  awsdynamodb.Table
	Bucket awss3.Bucket
	// SliceQueue carries slice, continuation and finish tasks.
	SliceQueue *WorkQueue
	// ChannelQueues carry chunk tasks, one per channel, by channel order.
	ChannelQueues []*WorkQueue
	// SchedulerDLQ receives scheduler events that failed every retry.
	SchedulerDLQ awssqs.Queue
	// Functions by name (FnAPI, FnSlicer, FnWorker, FnScheduler).
	Functions     map[string]*SliceworkFunction
	API           *JobAPI
	EventBus      awsevents.EventBus
	SweeperRule   awsevents.Rule
	ScheduleRules []awsevents.Rule
	Monitoring    *Monitoring
}

// NewSliceworkStack adds the stack of cfg.Stage to scope (an App). It
// validates cfg and in: every schedule names a registered kind and, if it
// overrides the channel, a channel of the registry; channel settings name
// registry channels. Every error is reported.
func NewSliceworkStack(scope constructs.Construct, cfg Config, in StackInputs) (*SliceworkStack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkInputs(cfg, in); err != nil {
		return nil, err
	}
	props := &awscdk.StackProps{
		StackName:             jsii.String(cfg.StackName()),
		Description:           jsii.String(fmt.Sprintf("slicework (stage %s): serverless chunked job system", cfg.Stage)),
		TerminationProtection: jsii.Bool(cfg.Protect),
	}
	if cfg.Account != "" || cfg.Region != "" {
		props.Env = &awscdk.Environment{}
		if cfg.Account != "" {
			props.Env.Account = jsii.String(cfg.Account)
		}
		if cfg.Region != "" {
			props.Env.Region = jsii.String(cfg.Region)
		}
	}
	stack := awscdk.NewStack(scope, jsii.String(cfg.StackName()), props)
	awscdk.Tags_Of(stack).Add(jsii.String(StageTag), jsii.String(cfg.Stage), nil)
	awscdk.Tags_Of(stack).Add(jsii.String("slicework:component"), jsii.String("slicework"), nil)
	s := &SliceworkStack{Stack: stack, Config: cfg, Functions: map[string]*SliceworkFunction{}}

	var err error
	if s.Table, err = NewJobTable(stack, "JobTable", JobTableProps{Schema: in.Schema, Protect: cfg.Protect}); err != nil {
		return nil, err
	}
	s.Bucket = NewDataBucket(stack, "DataBucket", DataBucketProps{JobDataDays: cfg.JobDataDays, Protect: cfg.Protect})
	s.EventBus = NewCompletionBus(stack, "CompletionEvents")

	names := engine.QueueNames{}
	s.SliceQueue = NewWorkQueue(stack, "SliceQueue", WorkQueueProps{
		Name: names.Slice(), Visibility: cfg.Visibility(FnSlicer), MaxReceiveCount: cfg.MaxReceiveCount,
	})
	channels := in.Registry.Channels()
	for _, ch := range channels {
		s.ChannelQueues = append(s.ChannelQueues, NewWorkQueue(stack, "ChannelQueue-"+ch, WorkQueueProps{
			Name: names.Channel(ch), Visibility: cfg.Visibility(FnWorker), MaxReceiveCount: cfg.MaxReceiveCount,
		}))
	}
	s.SchedulerDLQ = NewDeadLetterQueue(stack, "SchedulerDeadLetter")

	queueURLs := map[string]any{s.SliceQueue.Name: s.SliceQueue.Queue.QueueUrl()}
	for _, q := range s.ChannelQueues {
		queueURLs[q.Name] = q.Queue.QueueUrl()
	}
	env := map[string]*string{
		EnvTable:    s.Table.TableName(),
		EnvBucket:   s.Bucket.BucketName(),
		EnvQueues:   stack.ToJsonString(queueURLs, nil),
		EnvLogLevel: jsii.String(cfg.LogLevel),
		EnvEventBus: s.EventBus.EventBusName(),
	}
	retention := retentionDays[cfg.LogRetentionDays]
	descriptions := map[string]string{
		FnAPI:       "slicework HTTP API",
		FnSlicer:    "slicework slicer: slices jobs into chunk tasks, runs finish steps",
		FnWorker:    "slicework worker: processes chunk tasks of every channel",
		FnScheduler: "slicework scheduler: sweeper and scheduled job submissions",
	}
	var errs []error
	for _, name := range FunctionNames {
		p := SliceworkFunctionProps{
			Name: name, Description: descriptions[name], BuildDir: cfg.BuildDir, Architecture: cfg.Architecture, Settings: cfg.Functions[name],
			Environment: env, LogRetention: retention, Protect: cfg.Protect, Tracing: cfg.Tracing,
		}
		if name == FnScheduler {
			p.DeadLetterQueue = s.SchedulerDLQ
		}
		fn, err := NewSliceworkFunction(stack, constructID(name)+"Function", p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s.Functions[name] = fn
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("stack %s: %w", cfg.StackName(), err)
	}
	api, slicer, worker, scheduler := s.Functions[FnAPI].Function, s.Functions[FnSlicer].Function,
		s.Functions[FnWorker].Function, s.Functions[FnScheduler].Function

	// Event source mappings. Each also grants its function the consume
	// actions on its queue (ReceiveMessage, ChangeMessageVisibility,
	// DeleteMessage, GetQueueAttributes, GetQueueUrl), and nothing else.
	slicer.AddEventSource(sqsSource(s.SliceQueue.Queue, cfg.Slice))
	for i, ch := range channels {
		worker.AddEventSource(sqsSource(s.ChannelQueues[i].Queue, cfg.Channel(ch)))
	}

	// Sends. Submitting (api, scheduler, a worker's Replace) and finishing
	// (worker) enqueue on the slice queue; slicing (slicer) and the
	// sweeper's release of parked retries (scheduler) enqueue chunk tasks.
	for _, fn := range []awslambda.Function{api, slicer, worker, scheduler} {
		s.SliceQueue.Queue.GrantSendMessages(fn)
		s.Table.GrantReadWriteData(fn)
		s.EventBus.GrantPutEventsTo(fn, nil)
	}
	for _, q := range s.ChannelQueues {
		q.Queue.GrantSendMessages(slicer)
		q.Queue.GrantSendMessages(scheduler)
	}
	// Objects. Submitters delete the data blocks of a failed submission;
	// the slicer only reads inputs and writes results.
	GrantBlobAccess(api, s.Bucket, BlobAccess{Delete: true})
	GrantBlobAccess(slicer, s.Bucket, BlobAccess{})
	GrantBlobAccess(worker, s.Bucket, BlobAccess{Delete: true})
	GrantBlobAccess(scheduler, s.Bucket, BlobAccess{Delete: true})

	s.API = NewJobAPI(stack, "JobApi", JobAPIProps{
		Handler: api, JWT: cfg.JWT, Public: cfg.PublicAPI, RateLimit: cfg.APIRateLimit, BurstLimit: cfg.APIBurstLimit,
		LogRetention: retention, Protect: cfg.Protect,
	})
	s.SweeperRule = NewSweeperRule(stack, "SweeperRule", scheduler)
	if s.ScheduleRules, err = NewScheduleRules(stack, "Schedules", in.Schedules, scheduler); err != nil {
		return nil, err
	}

	fns := map[string]awslambda.IFunction{}
	for name, f := range s.Functions {
		fns[name] = f.Function
	}
	s.Monitoring, err = NewMonitoring(stack, "Monitoring", MonitoringProps{
		Namespace: cfg.MetricNamespace(), SliceQueue: s.SliceQueue, ChannelQueues: s.ChannelQueues,
		OtherDLQs: map[string]awssqs.IQueue{"scheduler-dlq": s.SchedulerDLQ}, Functions: fns,
		WorkerLogs: s.Functions[FnWorker].LogGroup, Table: s.Table,
		OldestMessageAlarm: cfg.OldestMessageAlarm, ChunkFailureAlarmPct: cfg.ChunkFailureAlarmPct,
		AlarmEmail: cfg.AlarmEmail, Protect: cfg.Protect, SkipMetricMathAlarms: cfg.HasGap(GapMetricMathAlarm),
	})
	if err != nil {
		return nil, err
	}

	output := func(id string, value *string, desc string) {
		awscdk.NewCfnOutput(stack, jsii.String(id), &awscdk.CfnOutputProps{Value: value, Description: jsii.String(desc)})
	}
	output("ApiUrl", s.API.API.ApiEndpoint(), "the HTTP API's URL")
	output("TableName", s.Table.TableName(), EnvTable)
	output("BucketName", s.Bucket.BucketName(), EnvBucket)
	output("Queues", env[EnvQueues], EnvQueues)
	output("EventBusName", s.EventBus.EventBusName(), EnvEventBus)
	output("AlarmTopicArn", s.Monitoring.Topic.TopicArn(), "the SNS topic of the stage's alarms")
	return s, nil
}

// sqsSource is an SQS event source that reports partial batch failures
// (the handlers return the records to retry) with a concurrency cap.
func sqsSource(q awssqs.IQueue, s ChannelSettings) awslambda.IEventSource {
	return awslambdaeventsources.NewSqsEventSource(q, &awslambdaeventsources.SqsEventSourceProps{
		BatchSize:               jsii.Number(float64(s.BatchSize)),
		MaxBatchingWindow:       awscdk.Duration_Seconds(jsii.Number(s.BatchWindow.Seconds())),
		MaxConcurrency:          jsii.Number(float64(s.MaxConcurrency)),
		ReportBatchItemFailures: jsii.Bool(true),
	})
}

// checkInputs checks the inputs against each other and cfg.
func checkInputs(cfg Config, in StackInputs) error {
	if in.Registry == nil {
		return errors.New("stack: no kind registry")
	}
	var errs []error
	channels := in.Registry.Channels()
	kinds := in.Registry.Kinds()
	for _, d := range in.Schedules {
		if err := d.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.Contains(kinds, d.Kind) {
			errs = append(errs, fmt.Errorf("schedule %q: kind %q is not registered (kinds: %v)", d.Name, d.Kind, kinds))
		}
		if d.Channel != "" && !slices.Contains(channels, d.Channel) {
			errs = append(errs, fmt.Errorf("schedule %q: channel %q has no queue (channels: %v)", d.Name, d.Channel, channels))
		}
	}
	for _, ch := range sortedKeys(cfg.Channels) {
		if !slices.Contains(channels, ch) {
			errs = append(errs, fmt.Errorf("context channels: %q is not a channel of any kind (channels: %v)", ch, channels))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stack: %w", err)
	}
	return nil
}

// constructID turns a function name into a construct id ("api" → "Api").
func constructID(name string) string {
	if name == "" {
		return name
	}
	return string(name[0]-'a'+'A') + name[1:]
}
