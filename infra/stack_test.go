package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/slicework/slicework/shared/kinds"
	"github.com/slicework/slicework/shared/schedule"
)

func TestResourceCounts(t *testing.T) {
	s := theDefaultStack(t)
	reg, err := kinds.Registry()
	if err != nil {
		t.Fatal(err)
	}
	defs, err := schedule.Load("../schedules.json")
	if err != nil {
		t.Fatal(err)
	}
	channels := len(reg.Channels())
	for _, tc := range []struct {
		typ  string
		want int
	}{
		{"AWS::Lambda::Function", 4},
		// Per channel a queue and a DLQ; the slice queue and its DLQ; the
		// scheduler's DLQ.
		{"AWS::SQS::Queue", 2*channels + 2 + 1},
		{"AWS::SQS::QueuePolicy", 2*channels + 2 + 1},
		{"AWS::Lambda::EventSourceMapping", channels + 1},
		{"AWS::DynamoDB::Table", 1},
		{"AWS::S3::Bucket", 1},
		{"AWS::S3::BucketPolicy", 1},
		{"AWS::ApiGatewayV2::Api", 1},
		{"AWS::ApiGatewayV2::Route", 1},
		{"AWS::ApiGatewayV2::Stage", 1},
		{"AWS::Events::EventBus", 1},
		{"AWS::Events::Rule", 1 + len(defs)},
		// One per DLQ, one per work queue, the chunk failure rate.
		{"AWS::CloudWatch::Alarm", (channels + 2) + (channels + 1) + 1},
		{"AWS::CloudWatch::Dashboard", 1},
		{"AWS::SNS::Topic", 1},
		{"AWS::KMS::Key", 1},
		{"AWS::Logs::MetricFilter", 1},
		// Four functions and the API's access log.
		{"AWS::Logs::LogGroup", 5},
		{"AWS::IAM::Role", 4},
	} {
		must(t, tc.typ, func() { s.template.ResourceCountIs(jsii.String(tc.typ), jsii.Number(float64(tc.want))) })
	}
}

// TestNoHardCodedNames: CloudFormation names every resource, so stages can
// share an account; the names it needs are derived from the stack.
func TestNoHardCodedNames(t *testing.T) {
	s := theDefaultStack(t)
	nameProps := map[string]string{
		"AWS::SQS::Queue": "QueueName", "AWS::DynamoDB::Table": "TableName", "AWS::S3::Bucket": "BucketName",
		"AWS::Lambda::Function": "FunctionName", "AWS::IAM::Role": "RoleName", "AWS::Logs::LogGroup": "LogGroupName",
		"AWS::SNS::Topic": "TopicName", "AWS::CloudWatch::Alarm": "AlarmName", "AWS::CloudWatch::Dashboard": "DashboardName",
		"AWS::ApiGatewayV2::Api": "Name", "AWS::Events::Rule": "Name",
	}
	for id, r := range s.resources {
		if p, ok := nameProps[r.Type]; ok {
			if _, set := r.Properties[p]; set && r.Type != "AWS::ApiGatewayV2::Api" {
				t.Errorf("%s (%s) has a fixed %s: %v", id, r.Type, p, r.Properties[p])
			}
		}
	}
	// A bus needs a name: it is derived from the stack's path.
	for id, r := range s.ofType("AWS::Events::EventBus") {
		if name, _ := r.Properties["Name"].(string); !strings.HasPrefix(name, "sliceworkdev") {
			t.Errorf("event bus %s: Name %q is not derived from the stack name", id, name)
		}
	}
	// The API's name is the construct id, which CloudFormation does not
	// need to be unique.
	if got := s.stack.Stack.StackName(); *got != "slicework-dev" {
		t.Errorf("stack name = %s, want slicework-dev", *got)
	}
}

func TestEveryResourceTaggedWithStage(t *testing.T) {
	s := theDefaultStack(t)
	mustTag := []string{"AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::Lambda::Function",
		"AWS::Lambda::EventSourceMapping", "AWS::IAM::Role", "AWS::Logs::LogGroup", "AWS::Events::Rule",
		"AWS::Events::EventBus", "AWS::SNS::Topic", "AWS::KMS::Key", "AWS::ApiGatewayV2::Api", "AWS::ApiGatewayV2::Stage"}
	for id, r := range s.resources {
		tags, ok := r.Properties["Tags"]
		if !ok {
			if slices.Contains(mustTag, r.Type) {
				t.Errorf("%s (%s) has no tags", id, r.Type)
			}
			continue
		}
		if got := tagValue(tags, StageTag); got != "dev" {
			t.Errorf("%s (%s): tag %s = %q, want dev", id, r.Type, StageTag, got)
		}
	}
}

// tagValue reads a tag from a CloudFormation list of {Key, Value} or a map.
func tagValue(tags any, key string) string {
	switch x := tags.(type) {
	case []any:
		for _, e := range x {
			if path(e, "Key") == key {
				v, _ := path(e, "Value").(string)
				return v
			}
		}
	case map[string]any:
		v, _ := x[key].(string)
		return v
	}
	return ""
}

func TestQueues(t *testing.T) {
	s := theDefaultStack(t)
	cfg := s.stack.Config
	work := append([]*WorkQueue{s.stack.SliceQueue}, s.stack.ChannelQueues...)
	dlqs := map[string]bool{s.logicalID(s.stack.SchedulerDLQ): true}
	for _, q := range work {
		dlqs[s.logicalID(q.DeadLetter)] = true
	}
	wantVisibility := map[string]float64{"slice": 6 * 300, "chunks-default": 6 * 180}
	for _, q := range work {
		id := s.logicalID(q.Queue)
		p := s.resources[id].Properties
		if got := path(p, "RedrivePolicy", "maxReceiveCount"); got != float64(cfg.MaxReceiveCount) {
			t.Errorf("%s: maxReceiveCount = %v, want %d", q.Name, got, cfg.MaxReceiveCount)
		}
		if got := ref(path(p, "RedrivePolicy", "deadLetterTargetArn")); got != s.logicalID(q.DeadLetter)+".Arn" {
			t.Errorf("%s: dead letter target = %s, want its own DLQ", q.Name, got)
		}
		if want, ok := wantVisibility[q.Name]; ok && p["VisibilityTimeout"] != want {
			t.Errorf("%s: VisibilityTimeout = %v, want %v", q.Name, p["VisibilityTimeout"], want)
		}
	}
	// Visibility ≥ 6 × the consumer's timeout, for any configuration.
	if got, want := cfg.Visibility(FnWorker), 6*cfg.Functions[FnWorker].Timeout; got < want {
		t.Errorf("worker visibility %s < 6 × timeout %s", got, want)
	}
	for id, r := range s.ofType("AWS::SQS::Queue") {
		p := r.Properties
		if p["SqsManagedSseEnabled"] != true {
			t.Errorf("queue %s: SSE-SQS not enabled", id)
		}
		if p["MessageRetentionPeriod"] != float64(14*24*3600) {
			t.Errorf("queue %s: retention %v, want 14 days", id, p["MessageRetentionPeriod"])
		}
		if _, isDLQ := dlqs[id]; isDLQ {
			if _, ok := p["RedrivePolicy"]; ok {
				t.Errorf("DLQ %s has a redrive policy", id)
			}
		} else if _, ok := p["RedrivePolicy"]; !ok {
			t.Errorf("work queue %s has no redrive policy", id)
		}
	}
	if got := len(s.ofType("AWS::SQS::Queue")); got != len(dlqs)+len(work) {
		t.Errorf("%d queues, want %d work queues and %d DLQs", got, len(work), len(dlqs))
	}
	// Every queue refuses requests without TLS.
	secured := map[string]bool{}
	for id, r := range s.ofType("AWS::SQS::QueuePolicy") {
		doc := r.Properties["PolicyDocument"]
		found := false
		for _, st := range path(doc, "Statement").([]any) {
			if path(st, "Effect") == "Deny" && path(st, "Condition", "Bool", "aws:SecureTransport") == "false" {
				found = true
			}
		}
		if !found {
			t.Errorf("queue policy %s does not deny insecure transport", id)
		}
		for _, q := range path(r.Properties, "Queues").([]any) {
			secured[ref(q)] = true
		}
	}
	for id := range s.ofType("AWS::SQS::Queue") {
		if !secured[id] {
			t.Errorf("queue %s has no TLS-only policy", id)
		}
	}
}

func TestEventSourceMappings(t *testing.T) {
	s := theDefaultStack(t)
	cfg := s.stack.Config
	want := map[string]struct {
		fn string
		ch ChannelSettings
	}{s.logicalID(s.stack.SliceQueue.Queue): {s.logicalID(s.stack.Functions[FnSlicer].Function), cfg.Slice}}
	for _, q := range s.stack.ChannelQueues {
		want[s.logicalID(q.Queue)] = struct {
			fn string
			ch ChannelSettings
		}{s.logicalID(s.stack.Functions[FnWorker].Function), cfg.Channel(strings.TrimPrefix(q.Name, "chunks-"))}
	}
	seen := 0
	for id, r := range s.ofType("AWS::Lambda::EventSourceMapping") {
		p := r.Properties
		queue := strings.TrimSuffix(ref(p["EventSourceArn"]), ".Arn")
		w, ok := want[queue]
		if !ok {
			t.Errorf("mapping %s reads %s, not a work queue", id, queue)
			continue
		}
		seen++
		if got := ref(p["FunctionName"]); got != w.fn {
			t.Errorf("mapping %s invokes %s, want %s", id, got, w.fn)
		}
		if !slices.Equal(strs(p["FunctionResponseTypes"]), []string{"ReportBatchItemFailures"}) {
			t.Errorf("mapping %s: FunctionResponseTypes = %v", id, p["FunctionResponseTypes"])
		}
		mc, _ := path(p, "ScalingConfig", "MaximumConcurrency").(float64)
		if mc < 2 || mc != float64(w.ch.MaxConcurrency) {
			t.Errorf("mapping %s: MaximumConcurrency = %v, want %d (≥ 2)", id, mc, w.ch.MaxConcurrency)
		}
		if p["BatchSize"] != float64(10) || p["MaximumBatchingWindowInSeconds"] != w.ch.BatchWindow.Seconds() {
			t.Errorf("mapping %s: batch size %v, window %v", id, p["BatchSize"], p["MaximumBatchingWindowInSeconds"])
		}
	}
	if seen != len(want) {
		t.Errorf("%d mappings on work queues, want %d", seen, len(want))
	}
}

func TestTable(t *testing.T) {
	s := theDefaultStack(t)
	schema := JobTableSchema()
	must(t, "table", func() {
		s.template.HasResource(jsii.String("AWS::DynamoDB::Table"), &map[string]any{
			"DeletionPolicy": "Delete",
			"Properties": map[string]any{
				"BillingMode":                      "PAY_PER_REQUEST",
				"PointInTimeRecoverySpecification": map[string]any{"PointInTimeRecoveryEnabled": true},
				"TimeToLiveSpecification":          map[string]any{"AttributeName": schema.TTLAttribute, "Enabled": true},
				"DeletionProtectionEnabled":        false,
				"KeySchema": []any{
					map[string]any{"AttributeName": schema.PartitionKey.Name, "KeyType": "HASH"},
					map[string]any{"AttributeName": schema.SortKey.Name, "KeyType": "RANGE"},
				},
			},
		})
	})
	var gsis []any
	for _, ix := range schema.Indexes {
		projection := map[string]any{"ProjectionType": ix.Projection}
		if len(ix.NonKeyAttributes) > 0 {
			projection["NonKeyAttributes"] = ix.NonKeyAttributes
		}
		gsis = append(gsis, map[string]any{
			"IndexName": ix.Name,
			"KeySchema": []any{
				map[string]any{"AttributeName": ix.PartitionKey.Name, "KeyType": "HASH"},
				map[string]any{"AttributeName": ix.SortKey.Name, "KeyType": "RANGE"},
			},
			"Projection": projection,
		})
	}
	must(t, "GSIs", func() {
		s.template.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), &map[string]any{
			"GlobalSecondaryIndexes": assertions.Match_ArrayEquals(&gsis),
		})
	})
}

func TestBucket(t *testing.T) {
	s := theDefaultStack(t)
	must(t, "bucket", func() {
		s.template.HasResource(jsii.String("AWS::S3::Bucket"), &map[string]any{
			"DeletionPolicy": "Delete",
			"Properties": map[string]any{
				"PublicAccessBlockConfiguration": map[string]any{
					"BlockPublicAcls": true, "BlockPublicPolicy": true, "IgnorePublicAcls": true, "RestrictPublicBuckets": true,
				},
				"BucketEncryption": map[string]any{"ServerSideEncryptionConfiguration": []any{
					map[string]any{"ServerSideEncryptionByDefault": map[string]any{"SSEAlgorithm": "AES256"}},
				}},
				"VersioningConfiguration": assertions.Match_Absent(),
				"LifecycleConfiguration": map[string]any{"Rules": []any{
					map[string]any{"Id": "abort-incomplete-multipart-uploads", "Status": "Enabled",
						"AbortIncompleteMultipartUpload": map[string]any{"DaysAfterInitiation": 1}},
					map[string]any{"Id": "expire-job-data", "Status": "Enabled", "Prefix": "jobs/",
						"ExpirationInDays": float64(s.stack.Config.JobDataDays)},
				}},
			},
		})
	})
	// No custom resource (autoDeleteObjects) and no function beyond ours.
	must(t, "no auto-delete", func() {
		s.template.ResourceCountIs(jsii.String("Custom::S3AutoDeleteObjects"), jsii.Number(0))
	})
	for id, r := range s.ofType("AWS::S3::BucketPolicy") {
		var tls, oldTLS bool
		for _, st := range path(r.Properties, "PolicyDocument", "Statement").([]any) {
			if path(st, "Effect") != "Deny" {
				t.Errorf("bucket policy %s allows something: %v", id, st)
			}
			tls = tls || path(st, "Condition", "Bool", "aws:SecureTransport") == "false"
			oldTLS = oldTLS || path(st, "Condition", "NumericLessThan", "s3:TlsVersion") == 1.2
		}
		if !tls || !oldTLS {
			t.Errorf("bucket policy %s: denies plain HTTP %v, TLS < 1.2 %v; want both", id, tls, oldTLS)
		}
	}
}

func TestFunctions(t *testing.T) {
	s := theDefaultStack(t)
	cfg := s.stack.Config
	queues := map[string]string{"slice": s.logicalID(s.stack.SliceQueue.Queue)}
	for _, q := range s.stack.ChannelQueues {
		queues[q.Name] = s.logicalID(q.Queue)
	}
	for _, name := range FunctionNames {
		f := s.stack.Functions[name]
		p := s.resources[s.logicalID(f.Function)].Properties
		if p["Runtime"] != "provided.al2023" || !slices.Equal(strs(p["Architectures"]), []string{"arm64"}) || p["Handler"] != "bootstrap" {
			t.Errorf("%s: runtime %v, architectures %v, handler %v", name, p["Runtime"], p["Architectures"], p["Handler"])
		}
		set := cfg.Functions[name]
		if p["MemorySize"] != float64(set.MemoryMB) || p["Timeout"] != set.Timeout.Seconds() {
			t.Errorf("%s: memory %v, timeout %v; want %d, %s", name, p["MemorySize"], p["Timeout"], set.MemoryMB, set.Timeout)
		}
		if _, ok := p["TracingConfig"]; ok {
			t.Errorf("%s: tracing configured without being asked: %v", name, p["TracingConfig"])
		}
		env, _ := path(p, "Environment", "Variables").(map[string]any)
		var keys []string
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if want := []string{EnvBucket, EnvEventBus, EnvLogLevel, EnvQueues, EnvTable}; !slices.Equal(keys, want) {
			t.Errorf("%s: environment %v, want %v", name, keys, want)
		}
		if ref(env[EnvTable]) != s.logicalID(s.stack.Table) || ref(env[EnvBucket]) != s.logicalID(s.stack.Bucket) ||
			ref(env[EnvEventBus]) != s.logicalID(s.stack.EventBus) || env[EnvLogLevel] != "info" {
			t.Errorf("%s: environment %v", name, env)
		}
		var urls map[string]string
		if err := json.Unmarshal([]byte(render(env[EnvQueues])), &urls); err != nil {
			t.Errorf("%s: %s is not a JSON object: %v", name, EnvQueues, err)
		}
		for qn, id := range queues {
			if urls[qn] != "<"+id+">" {
				t.Errorf("%s: %s[%q] = %q, want the URL of %s", name, EnvQueues, qn, urls[qn], id)
			}
		}
		if len(urls) != len(queues) {
			t.Errorf("%s: %s has %d queues, want %d", name, EnvQueues, len(urls), len(queues))
		}
		if got := ref(path(p, "LoggingConfig", "LogGroup")); got != s.logicalID(f.LogGroup) {
			t.Errorf("%s: log group %s, want its own", name, got)
		}
		if got := s.resources[s.logicalID(f.LogGroup)].Properties["RetentionInDays"]; got != float64(cfg.LogRetentionDays) {
			t.Errorf("%s: log retention %v, want %d", name, got, cfg.LogRetentionDays)
		}
		if got := ref(path(p, "DeadLetterConfig", "TargetArn")); (name == FnScheduler) != (got == s.logicalID(s.stack.SchedulerDLQ)+".Arn") {
			t.Errorf("%s: dead letter config %q", name, got)
		}
	}
	for id, r := range s.ofType("AWS::IAM::Role") {
		if _, ok := r.Properties["ManagedPolicyArns"]; ok {
			t.Errorf("role %s has managed policies %v: want only the stack's own statements", id, r.Properties["ManagedPolicyArns"])
		}
	}
}

func TestAPIRequiresIAMByDefault(t *testing.T) {
	s := theDefaultStack(t)
	api := s.stack.Functions[FnAPI].Function
	must(t, "route", func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), &map[string]any{
			"RouteKey": "$default", "AuthorizationType": "AWS_IAM",
		})
	})
	must(t, "no other authorization", func() {
		s.template.ResourcePropertiesCountIs(jsii.String("AWS::ApiGatewayV2::Route"), &map[string]any{
			"AuthorizationType": assertions.Match_Not(jsii.String("AWS_IAM")),
		}, jsii.Number(0))
	})
	must(t, "integration", func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Integration"), &map[string]any{
			"IntegrationType": "AWS_PROXY", "PayloadFormatVersion": "2.0",
			"IntegrationUri": map[string]any{"Fn::GetAtt": []any{s.logicalID(api), "Arn"}},
		})
	})
	must(t, "stage", func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Stage"), &map[string]any{
			"StageName":            "$default",
			"AccessLogSettings":    map[string]any{"DestinationArn": map[string]any{"Fn::GetAtt": []any{s.logicalID(s.stack.API.AccessLog), "Arn"}}},
			"DefaultRouteSettings": map[string]any{"ThrottlingRateLimit": 50, "ThrottlingBurstLimit": 100},
		})
	})
	stage := s.ofType("AWS::ApiGatewayV2::Stage")
	for _, r := range stage {
		var format map[string]any
		if err := json.Unmarshal([]byte(path(r.Properties, "AccessLogSettings", "Format").(string)), &format); err != nil || format["requestId"] == nil {
			t.Errorf("access log format is not JSON with the request id: %v", err)
		}
	}
	if _, ok := s.outputs["ApiUrl"]; !ok {
		t.Error("no ApiUrl output")
	}
}

func TestSweeperAndScheduleRules(t *testing.T) {
	s := theDefaultStack(t)
	scheduler := s.logicalID(s.stack.Functions[FnScheduler].Function)
	must(t, "sweeper", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Events::Rule"), &map[string]any{
			"ScheduleExpression": "rate(1 minute)",
			"State":              "ENABLED",
			"Targets": []any{map[string]any{
				"Arn":         map[string]any{"Fn::GetAtt": []any{scheduler, "Arn"}},
				"Input":       assertions.Match_Absent(),
				"RetryPolicy": map[string]any{"MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 1},
			}},
		})
	})
	defs, err := schedule.Load("../schedules.json")
	if err != nil {
		t.Fatal(err)
	}
	checkScheduleRules(t, s, defs)
	// EventBridge may invoke the scheduler for every rule.
	perms := 0
	for _, r := range s.ofType("AWS::Lambda::Permission") {
		if r.Properties["Principal"] == "events.amazonaws.com" && ref(r.Properties["FunctionName"]) == scheduler+".Arn" {
			perms++
		}
	}
	if perms != 1+len(defs) {
		t.Errorf("%d invoke permissions for EventBridge, want %d", perms, 1+len(defs))
	}
}

// checkScheduleRules checks that every definition has its rule, whose
// input, once EventBridge fills the placeholders, is the documented event
// carrying the definition.
func checkScheduleRules(t *testing.T, s *synthesized, defs []schedule.Definition) {
	t.Helper()
	scheduler := s.logicalID(s.stack.Functions[FnScheduler].Function)
	byExpr := map[string][]resource{}
	for _, r := range s.ofType("AWS::Events::Rule") {
		byExpr[r.Properties["ScheduleExpression"].(string)] = append(byExpr[r.Properties["ScheduleExpression"].(string)], r)
	}
	for _, d := range defs {
		var rule *resource
		for _, r := range byExpr[d.Expression] {
			if strings.HasPrefix(r.Properties["Description"].(string), "slicework schedule "+d.Name) {
				rule = &r
			}
		}
		if rule == nil {
			t.Errorf("schedule %s: no rule", d.Name)
			continue
		}
		target := path(rule.Properties, "Targets", 0)
		if ref(path(target, "Arn")) != scheduler+".Arn" {
			t.Errorf("schedule %s: target %v, want the scheduler", d.Name, path(target, "Arn"))
		}
		tmpl, _ := path(target, "InputTransformer", "InputTemplate").(string)
		paths, _ := path(target, "InputTransformer", "InputPathsMap").(map[string]any)
		filled := tmpl
		for k, v := range map[string]string{"id": "e-1", "time": "2030-01-02T03:00:00Z", "account": "123456789012", "region": "eu-west-1", "rule": "arn:rule"} {
			if paths[k] == nil {
				t.Errorf("schedule %s: no input path for <%s>", d.Name, k)
			}
			filled = strings.ReplaceAll(filled, "<"+k+">", v)
		}
		var ev struct {
			ID         string              `json:"id"`
			Source     string              `json:"source"`
			DetailType string              `json:"detail-type"`
			Time       string              `json:"time"`
			Resources  []string            `json:"resources"`
			Detail     schedule.Definition `json:"detail"`
		}
		if err := json.Unmarshal([]byte(filled), &ev); err != nil {
			t.Errorf("schedule %s: input is not JSON once filled: %v\n%s", d.Name, err, filled)
			continue
		}
		if ev.Source != ScheduleEventSource || ev.DetailType != ScheduleEventDetailType || ev.Time != "2030-01-02T03:00:00Z" ||
			ev.ID != "e-1" || !slices.Equal(ev.Resources, []string{"arn:rule"}) {
			t.Errorf("schedule %s: event envelope %+v", d.Name, ev)
		}
		got, _ := json.Marshal(ev.Detail)
		want, _ := json.Marshal(d)
		if string(got) != string(want) {
			t.Errorf("schedule %s: detail\n got %s\nwant %s", d.Name, got, want)
		}
	}
}

func TestCompletionBus(t *testing.T) {
	s := theDefaultStack(t)
	bus := s.logicalID(s.stack.EventBus) + ".Arn"
	for _, name := range FunctionNames {
		if !hasStatement(s, s.stack.Functions[name], "events:PutEvents", bus) {
			t.Errorf("%s may not put events on the completion bus", name)
		}
	}
}

func TestAlarmsAndDashboard(t *testing.T) {
	s := theDefaultStack(t)
	topic := s.logicalID(s.stack.Monitoring.Topic)
	alarms := s.ofType("AWS::CloudWatch::Alarm")
	byMetric := map[string]map[string]bool{} // metric name → queue logical ids
	var failureRate *resource
	for id, a := range alarms {
		p := a.Properties
		if ref(path(p, "AlarmActions", 0)) != topic || ref(path(p, "OKActions", 0)) != topic {
			t.Errorf("alarm %s does not notify the topic: %v", id, p["AlarmActions"])
		}
		if p["TreatMissingData"] != "notBreaching" {
			t.Errorf("alarm %s: TreatMissingData %v", id, p["TreatMissingData"])
		}
		if m, ok := p["MetricName"].(string); ok {
			if byMetric[m] == nil {
				byMetric[m] = map[string]bool{}
			}
			byMetric[m][strings.TrimSuffix(ref(path(p, "Dimensions", 0, "Value")), ".QueueName")] = true
			switch m {
			case "ApproximateNumberOfMessagesVisible":
				if p["Threshold"] != float64(0) || p["ComparisonOperator"] != "GreaterThanThreshold" {
					t.Errorf("DLQ alarm %s: %v %v", id, p["ComparisonOperator"], p["Threshold"])
				}
			case "ApproximateAgeOfOldestMessage":
				if p["Threshold"] != s.stack.Config.OldestMessageAlarm.Seconds() {
					t.Errorf("oldest-message alarm %s: threshold %v", id, p["Threshold"])
				}
			}
			continue
		}
		a := a
		failureRate = &a
	}
	wantDLQ := map[string]bool{s.logicalID(s.stack.SchedulerDLQ): true}
	wantAge := map[string]bool{}
	for _, q := range append([]*WorkQueue{s.stack.SliceQueue}, s.stack.ChannelQueues...) {
		wantDLQ[s.logicalID(q.DeadLetter)] = true
		wantAge[s.logicalID(q.Queue)] = true
	}
	if fmt.Sprint(byMetric["ApproximateNumberOfMessagesVisible"]) != fmt.Sprint(wantDLQ) {
		t.Errorf("DLQ depth alarms on %v, want every DLQ %v", byMetric["ApproximateNumberOfMessagesVisible"], wantDLQ)
	}
	if fmt.Sprint(byMetric["ApproximateAgeOfOldestMessage"]) != fmt.Sprint(wantAge) {
		t.Errorf("oldest-message alarms on %v, want every work queue %v", byMetric["ApproximateAgeOfOldestMessage"], wantAge)
	}
	if failureRate == nil {
		t.Fatal("no chunk failure rate alarm")
	}
	checkFailureRateAlarm(t, s, *failureRate)

	must(t, "metric filter", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Logs::MetricFilter"), &map[string]any{
			"LogGroupName":  map[string]any{"Ref": s.logicalID(s.stack.Functions[FnWorker].LogGroup)},
			"FilterPattern": `{ $.msg = "chunk attempt failed" }`,
			"MetricTransformations": []any{map[string]any{
				"MetricNamespace": "Slicework/dev", "MetricName": ChunkAttemptsFailedMetric, "MetricValue": "1",
			}},
		})
	})
	must(t, "topic", func() {
		s.template.HasResourceProperties(jsii.String("AWS::SNS::Topic"), &map[string]any{
			"KmsMasterKeyId": map[string]any{"Fn::GetAtt": []any{s.logicalID(s.stack.Monitoring.TopicKey), "Arn"}},
		})
	})
	must(t, "key", func() {
		s.template.HasResourceProperties(jsii.String("AWS::KMS::Key"), &map[string]any{
			"EnableKeyRotation": true,
			"KeyPolicy": map[string]any{"Statement": assertions.Match_ArrayWith(&[]any{assertions.Match_ObjectLike(&map[string]any{
				"Principal": map[string]any{"Service": "cloudwatch.amazonaws.com"},
				"Action":    []any{"kms:Decrypt", "kms:GenerateDataKey"},
				"Condition": map[string]any{"StringEquals": map[string]any{"aws:SourceAccount": map[string]any{"Ref": "AWS::AccountId"}}},
			})})},
		})
	})
	for _, d := range s.ofType("AWS::CloudWatch::Dashboard") {
		body := render(d.Properties["DashboardBody"])
		for _, want := range []string{"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage", `"Errors"`,
			`"Throttles"`, `"Duration"`, "ConsumedReadCapacityUnits", "ConsumedWriteCapacityUnits", "ReadThrottleEvents",
			"WriteThrottleEvents", "failed chunk deliveries"} {
			if !strings.Contains(body, want) {
				t.Errorf("dashboard has no %s", want)
			}
		}
		for id := range wantDLQ {
			if !strings.Contains(body, "<"+id+".QueueName>") {
				t.Errorf("dashboard does not show DLQ %s", id)
			}
		}
	}
}

// checkFailureRateAlarm checks the metric math: failed attempts over the
// chunk queues' received messages.
func checkFailureRateAlarm(t *testing.T, s *synthesized, a resource) {
	t.Helper()
	metrics, _ := a.Properties["Metrics"].([]any)
	var expr string
	ids := map[string]string{}
	for _, m := range metrics {
		if e, ok := path(m, "Expression").(string); ok {
			expr = e
			continue
		}
		ids[path(m, "Id").(string)] = path(m, "MetricStat", "Metric", "MetricName").(string)
	}
	if ids["failed"] != ChunkAttemptsFailedMetric {
		t.Errorf("failure rate: metric failed = %q", ids["failed"])
	}
	received := 0
	for id, name := range ids {
		if strings.HasPrefix(id, "received") {
			received++
			if name != "NumberOfMessagesReceived" || !strings.Contains(expr, id) {
				t.Errorf("failure rate: %s = %s, in %q", id, name, expr)
			}
		}
	}
	if received != len(s.stack.ChannelQueues) || !strings.Contains(expr, "100 * FILL(failed, 0)") {
		t.Errorf("failure rate: expression %q over %d queues, want all %d chunk queues", expr, received, len(s.stack.ChannelQueues))
	}
	if a.Properties["Threshold"] != s.stack.Config.ChunkFailureAlarmPct || a.Properties["EvaluationPeriods"] != float64(3) {
		t.Errorf("failure rate: threshold %v over %v periods", a.Properties["Threshold"], a.Properties["EvaluationPeriods"])
	}
}

func TestOutputs(t *testing.T) {
	s := theDefaultStack(t)
	for _, o := range []string{"ApiUrl", "TableName", "BucketName", "Queues", "EventBusName", "AlarmTopicArn"} {
		if _, ok := s.outputs[o]; !ok {
			t.Errorf("no output %s", o)
		}
	}
}
