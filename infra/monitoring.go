package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// WorkerFailureLogMessage is the "msg" of the JSON log line that the worker
// writes for every chunk delivery whose attempt did not succeed (a retry, a
// permanent failure, a poison message or an infrastructure error): see
// handler.Worker in shared/handler. The chunk failure metric counts them.
const WorkerFailureLogMessage = "chunk attempt failed"

// ChunkAttemptsFailedMetric is the custom metric that counts
// WorkerFailureLogMessage lines, in the stage's namespace.
const ChunkAttemptsFailedMetric = "ChunkAttemptsFailed"

// maxAlarmMetrics is CloudWatch's limit on the metrics of one alarm's math
// expression.
const maxAlarmMetrics = 10

// MonitoringProps configures NewMonitoring.
type MonitoringProps struct {
	// Namespace holds the stage's custom metrics.
	Namespace string
	// SliceQueue and ChannelQueues are the work queues with their DLQs.
	SliceQueue    *WorkQueue
	ChannelQueues []*WorkQueue
	// OtherDLQs are dead-letter queues that belong to no work queue (the
	// scheduler's), by a display name.
	OtherDLQs map[string]awssqs.IQueue
	// Functions are the Lambda functions, by name.
	Functions map[string]awslambda.IFunction
	// WorkerLogs is the worker's log group (source of the failure metric).
	WorkerLogs awslogs.ILogGroup
	// Table is the job table.
	Table awsdynamodb.ITable
	// OldestMessageAlarm and ChunkFailureAlarmPct are alarm thresholds.
	OldestMessageAlarm   time.Duration
	ChunkFailureAlarmPct float64
	// AlarmEmail, if set, is subscribed to the alarm topic.
	AlarmEmail string
	// Protect keeps the topic's key when the stack is deleted.
	Protect bool
	// SkipMetricMathAlarms puts the alarms that use metric math under
	// MetricMathCondition, which is false: for emulators whose
	// CloudFormation cannot create them (GapMetricMathAlarm). They stay in
	// the template and leave the dashboard's alarm widget.
	SkipMetricMathAlarms bool
}

// MetricMathCondition is the logical id of the CloudFormation condition
// that guards the metric math alarms when SkipMetricMathAlarms is set.
const MetricMathCondition = "MetricMathAlarmsSupported"

// Monitoring is the stage's dashboard, alarms and alarm topic.
type Monitoring struct {
	Dashboard awscloudwatch.Dashboard
	// Topic receives every alarm's ALARM and OK transitions. It is
	// encrypted with TopicKey, which CloudWatch may use.
	Topic    awssns.Topic
	TopicKey awskms.Key
	// DeadLetterAlarms fire when a DLQ holds a message, one per DLQ.
	DeadLetterAlarms []awscloudwatch.Alarm
	// OldestMessageAlarms fire when a work queue's oldest message is older
	// than the threshold, one per work queue.
	OldestMessageAlarms []awscloudwatch.Alarm
	// ChunkFailureAlarm fires when the share of failed chunk deliveries is
	// above the threshold for 15 minutes.
	ChunkFailureAlarm awscloudwatch.Alarm
}

// NewMonitoring creates the alarm topic, the alarms and the dashboard.
//
// The chunk failure rate is 100 × failed attempts / chunk deliveries, over
// 5-minute periods. Failed attempts come from a metric filter on the
// worker's JSON log (WorkerFailureLogMessage); deliveries are the chunk
// queues' NumberOfMessagesReceived. Lambda's Errors/Invocations would not
// do: the worker reports failed chunks as batch item failures and returns
// no error, so Errors counts only crashes and timeouts. The filter needs no
// code in the functions and no extra API calls; an embedded-metric-format
// metric from the engine would be more robust to log wording changes
// (infra tests pin the wording).
func NewMonitoring(scope constructs.Construct, id string, p MonitoringProps) (*Monitoring, error) {
	if n := len(p.ChannelQueues) + 1; n > maxAlarmMetrics {
		return nil, fmt.Errorf("monitoring: %d channels: the chunk failure alarm's expression takes at most %d metrics", len(p.ChannelQueues), maxAlarmMetrics-1)
	}
	c := constructs.NewConstruct(scope, jsii.String(id))
	m := &Monitoring{}
	m.TopicKey, m.Topic = newAlarmTopic(c, p.Protect)
	if p.AlarmEmail != "" {
		m.Topic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(p.AlarmEmail), nil))
	}
	notify := func(a awscloudwatch.Alarm) awscloudwatch.Alarm {
		a.AddAlarmAction(awscloudwatchactions.NewSnsAction(m.Topic))
		a.AddOkAction(awscloudwatchactions.NewSnsAction(m.Topic))
		return a
	}
	period := awscdk.Duration_Minutes(jsii.Number(5))
	minute := awscdk.Duration_Minutes(jsii.Number(1))

	work := append([]*WorkQueue{p.SliceQueue}, p.ChannelQueues...)
	dlqs := map[string]awssqs.IQueue{}
	for _, q := range work {
		dlqs[q.Name+"-dlq"] = q.DeadLetter
	}
	for name, q := range p.OtherDLQs {
		dlqs[name] = q
	}
	for _, name := range sortedKeys(dlqs) {
		m.DeadLetterAlarms = append(m.DeadLetterAlarms, notify(awscloudwatch.NewAlarm(c, jsii.String("DeadLetters-"+name), &awscloudwatch.AlarmProps{
			AlarmDescription: jsii.String(fmt.Sprintf("The dead-letter queue %s holds messages: tasks that were never processed. Inspect them, fix the cause and redrive.", name)),
			Metric: dlqs[name].MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{
				Period: minute, Statistic: jsii.String("Maximum"),
			}),
			Threshold:          jsii.Number(0),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(1),
			// SQS stops sending metrics for a queue idle for six hours; an
			// empty, idle DLQ is healthy.
			TreatMissingData: awscloudwatch.TreatMissingData_NOT_BREACHING,
		})))
	}
	for _, q := range work {
		m.OldestMessageAlarms = append(m.OldestMessageAlarms, notify(awscloudwatch.NewAlarm(c, jsii.String("OldestMessage-"+q.Name), &awscloudwatch.AlarmProps{
			AlarmDescription: jsii.String(fmt.Sprintf("The oldest message on %s has waited more than %s: its consumer is stalled, throttled or too slow.", q.Name, p.OldestMessageAlarm)),
			Metric: q.Queue.MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{
				Period: period, Statistic: jsii.String("Maximum"),
			}),
			Threshold:          jsii.Number(p.OldestMessageAlarm.Seconds()),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
			EvaluationPeriods:  jsii.Number(2),
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})))
	}

	awslogs.NewMetricFilter(c, jsii.String("ChunkAttemptsFailedFilter"), &awslogs.MetricFilterProps{
		LogGroup:        p.WorkerLogs,
		FilterPattern:   awslogs.FilterPattern_StringValue(jsii.String("$.msg"), jsii.String("="), jsii.String(WorkerFailureLogMessage)),
		MetricNamespace: jsii.String(p.Namespace),
		MetricName:      jsii.String(ChunkAttemptsFailedMetric),
		MetricValue:     jsii.String("1"),
	})
	failed := awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
		Namespace: jsii.String(p.Namespace), MetricName: jsii.String(ChunkAttemptsFailedMetric),
		Statistic: jsii.String("Sum"), Period: period,
	})
	using := map[string]awscloudwatch.IMetric{"failed": failed}
	var received []string
	for i, q := range p.ChannelQueues {
		id := fmt.Sprintf("received%d", i)
		using[id] = q.Queue.MetricNumberOfMessagesReceived(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")})
		received = append(received, id)
	}
	deliveries := "(" + strings.Join(received, " + ") + ")"
	failureRate := awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression:   jsii.String(fmt.Sprintf("IF(%s > 0, 100 * FILL(failed, 0) / %s, 0)", deliveries, deliveries)),
		UsingMetrics: &using,
		Label:        jsii.String("failed chunk deliveries (%)"),
		Period:       period,
	})
	m.ChunkFailureAlarm = notify(awscloudwatch.NewAlarm(c, jsii.String("ChunkFailureRate"), &awscloudwatch.AlarmProps{
		AlarmDescription:   jsii.String(fmt.Sprintf("More than %g%% of chunk deliveries failed (retried or failed for good) for 15 minutes. See the worker's log.", p.ChunkFailureAlarmPct)),
		Metric:             failureRate,
		Threshold:          jsii.Number(p.ChunkFailureAlarmPct),
		ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD,
		EvaluationPeriods:  jsii.Number(3),
		TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
	}))
	if p.SkipMetricMathAlarms {
		cond := awscdk.NewCfnCondition(awscdk.Stack_Of(scope), jsii.String(MetricMathCondition), &awscdk.CfnConditionProps{
			// Always false: the emulator has the gap.
			Expression: awscdk.Fn_ConditionEquals(jsii.String("emulator-gap:"+GapMetricMathAlarm), jsii.String("none")),
		})
		m.ChunkFailureAlarm.Node().DefaultChild().(awscdk.CfnResource).CfnOptions().SetCondition(cond)
	}

	m.Dashboard = newDashboard(c, p, work, dlqs, failureRate, m)
	return m, nil
}

// newAlarmTopic creates the alarm topic, encrypted with a customer-managed
// key: CloudWatch cannot publish to a topic encrypted with the AWS-managed
// SNS key, whose policy cannot be changed to let it.
func newAlarmTopic(scope constructs.Construct, protect bool) (awskms.Key, awssns.Topic) {
	removal := awscdk.RemovalPolicy_DESTROY
	if protect {
		removal = awscdk.RemovalPolicy_RETAIN
	}
	// The key's default policy (kept) gives the account's root kms:* on
	// "*": in a key policy "*" is this key, and the statement lets IAM
	// policies in the account manage it, as for every KMS key.
	key := awskms.NewKey(scope, jsii.String("AlarmTopicKey"), &awskms.KeyProps{
		Description:       jsii.String("slicework alarm topic encryption"),
		EnableKeyRotation: jsii.Bool(true),
		RemovalPolicy:     removal,
	})
	key.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarmsPublishToEncryptedTopic"),
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		// What SNS calls on the publisher's behalf to encrypt a message.
		Actions: jsii.Strings("kms:Decrypt", "kms:GenerateDataKey"),
		// Wildcard resource, justified: in a key policy "*" means this key.
		Resources: jsii.Strings("*"),
		Conditions: &map[string]any{
			"StringEquals": map[string]any{"aws:SourceAccount": awscdk.Stack_Of(scope).Account()},
		},
	}), nil)
	topic := awssns.NewTopic(scope, jsii.String("AlarmTopic"), &awssns.TopicProps{
		DisplayName: jsii.String("slicework alarms"),
		MasterKey:   key,
		EnforceSSL:  jsii.Bool(true),
	})
	return key, topic
}

func newDashboard(scope constructs.Construct, p MonitoringProps, work []*WorkQueue, dlqs map[string]awssqs.IQueue,
	failureRate awscloudwatch.IMetric, m *Monitoring) awscloudwatch.Dashboard {
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	opts := func(label, stat string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Label: jsii.String(label), Statistic: jsii.String(stat), Period: minute}
	}
	graph := func(title string, width float64, left ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Width: jsii.Number(width), Height: jsii.Number(6), Left: &left,
		})
	}
	var depth, age, dead []awscloudwatch.IMetric
	for _, q := range work {
		depth = append(depth, q.Queue.MetricApproximateNumberOfMessagesVisible(opts(q.Name, "Maximum")))
		age = append(age, q.Queue.MetricApproximateAgeOfOldestMessage(opts(q.Name, "Maximum")))
	}
	for _, name := range sortedKeys(dlqs) {
		dead = append(dead, dlqs[name].MetricApproximateNumberOfMessagesVisible(opts(name, "Maximum")))
	}
	var errs, throttles, duration []awscloudwatch.IMetric
	for _, name := range sortedKeys(p.Functions) {
		fn := p.Functions[name]
		errs = append(errs, fn.MetricErrors(opts(name, "Sum")))
		throttles = append(throttles, fn.MetricThrottles(opts(name, "Sum")))
		duration = append(duration, fn.MetricDuration(opts(name+" p99", "p99")))
	}
	table := func(metric, label, stat string) awscloudwatch.IMetric {
		return p.Table.Metric(jsii.String(metric), opts(label, stat))
	}
	var alarms []awscloudwatch.IAlarm
	all := append(append([]awscloudwatch.Alarm{}, m.DeadLetterAlarms...), m.OldestMessageAlarms...)
	if !p.SkipMetricMathAlarms {
		all = append(all, m.ChunkFailureAlarm)
	}
	for _, a := range all {
		alarms = append(alarms, a)
	}
	d := awscloudwatch.NewDashboard(scope, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
	})
	d.AddWidgets(awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
		Title: jsii.String("Alarms"), Alarms: &alarms, Width: jsii.Number(24),
	}))
	d.AddWidgets(
		graph("Queue depth (visible messages)", 8, depth...),
		graph("Oldest message age (s)", 8, age...),
		graph("Dead-letter queue depth", 8, dead...),
	)
	d.AddWidgets(
		graph("Function errors", 6, errs...),
		graph("Function throttles", 6, throttles...),
		graph("Function duration p99 (ms)", 6, duration...),
		graph("Failed chunk deliveries (%)", 6, failureRate),
	)
	d.AddWidgets(
		graph("DynamoDB consumed capacity", 12,
			table("ConsumedReadCapacityUnits", "read units", "Sum"),
			table("ConsumedWriteCapacityUnits", "write units", "Sum")),
		graph("DynamoDB throttles", 12,
			table("ReadThrottleEvents", "read throttles", "Sum"),
			table("WriteThrottleEvents", "write throttles", "Sum")),
	)
	return d
}
