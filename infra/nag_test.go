package main

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

func TestNagDefaultStackHasNoErrors(t *testing.T) {
	s := theDefaultStack(t)
	if errs := nagErrors(s); len(errs) > 0 {
		t.Errorf("cdk-nag AwsSolutions errors:\n%s", strings.Join(errs, "\n"))
	}
	checkSuppressionReasons(t, s)
}

// checkSuppressionReasons: every suppression in the template carries a
// reason of some length.
func checkSuppressionReasons(t *testing.T, s *synthesized) {
	t.Helper()
	n := 0
	for id, r := range s.resources {
		rules, _ := path(r.Metadata, "cdk_nag", "rules_to_suppress").([]any)
		for _, rule := range rules {
			n++
			reason, _ := path(rule, "reason").(string)
			if len(reason) < 40 {
				t.Errorf("%s: suppression of %v has no real reason: %q", id, path(rule, "id"), reason)
			}
		}
	}
	if n == 0 {
		t.Error("no suppression found in the template metadata: was AddNagSuppressions called?")
	}
	for res, sups := range s.stack.NagSuppressions() {
		for _, sp := range sups {
			if sp.Rule == "" || sp.Reason == "" {
				t.Errorf("%s: suppression %+v without rule or reason", *res.Node().Path(), sp)
			}
		}
	}
}

// TestVariantProtectedJWTTracing: a prod stage with a JWT authorizer,
// tracing, a second channel and two schedules.
func TestVariantProtectedJWTTracing(t *testing.T) {
	cfg := DefaultConfig("prod")
	cfg.BuildDir = testBuildDir
	cfg.JWT = &JWTAuth{Issuer: "https://issuer.example.com/", Audience: []string{"slicework", "ops"}}
	cfg.Tracing = true
	cfg.Channels["bulk"] = ChannelSettings{MaxConcurrency: 50, BatchSize: 5, BatchWindow: 3 * time.Second}
	cfg.Functions[FnWorker] = FunctionSettings{MemoryMB: 2048, Timeout: 10 * time.Minute}
	cfg.MaxReceiveCount = 30
	s := variant(t, cfg, StackInputs{Registry: testRegistry(t), Schema: JobTableSchema(), Schedules: testSchedules()})

	if errs := nagErrors(s); len(errs) > 0 {
		t.Errorf("cdk-nag AwsSolutions errors:\n%s", strings.Join(errs, "\n"))
	}
	checkSuppressionReasons(t, s)

	// Protection.
	if !*s.stack.Stack.TerminationProtection() {
		t.Error("prod stack without termination protection")
	}
	must(t, "table retained", func() {
		s.template.HasResource(jsii.String("AWS::DynamoDB::Table"), &map[string]any{
			"DeletionPolicy": "Retain", "Properties": map[string]any{"DeletionProtectionEnabled": true},
		})
	})
	for _, typ := range []string{"AWS::S3::Bucket", "AWS::Logs::LogGroup", "AWS::KMS::Key"} {
		for id, r := range s.ofType(typ) {
			if r.DeletionPolicy != "Retain" {
				t.Errorf("prod %s %s: DeletionPolicy %q, want Retain", typ, id, r.DeletionPolicy)
			}
		}
	}
	for id, r := range s.resources {
		if tags, ok := r.Properties["Tags"]; ok && tagValue(tags, StageTag) != "prod" {
			t.Errorf("%s: stage tag %q, want prod", id, tagValue(tags, StageTag))
		}
	}

	// Channels: two chunk queues, each with its mapping and its settings.
	if len(s.stack.ChannelQueues) != 2 {
		t.Fatalf("%d channel queues, want 2 (bulk, default)", len(s.stack.ChannelQueues))
	}
	must(t, "queue count", func() { s.template.ResourceCountIs(jsii.String("AWS::SQS::Queue"), jsii.Number(7)) })
	bulk := s.logicalID(s.stack.ChannelQueues[0].Queue)
	if s.stack.ChannelQueues[0].Name != "chunks-bulk" {
		t.Fatalf("first channel queue is %s, want chunks-bulk", s.stack.ChannelQueues[0].Name)
	}
	must(t, "bulk mapping", func() {
		s.template.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), &map[string]any{
			"EventSourceArn":                 map[string]any{"Fn::GetAtt": []any{bulk, "Arn"}},
			"BatchSize":                      5,
			"MaximumBatchingWindowInSeconds": 3,
			"ScalingConfig":                  map[string]any{"MaximumConcurrency": 50},
			"FunctionResponseTypes":          []any{"ReportBatchItemFailures"},
		})
	})
	for _, q := range s.stack.ChannelQueues {
		p := s.resources[s.logicalID(q.Queue)].Properties
		if p["VisibilityTimeout"] != float64(6*600) || path(p, "RedrivePolicy", "maxReceiveCount") != float64(30) {
			t.Errorf("%s: visibility %v, maxReceiveCount %v; want 3600, 30", q.Name, p["VisibilityTimeout"], path(p, "RedrivePolicy", "maxReceiveCount"))
		}
	}
	// The failure rate counts both chunk queues.
	for _, a := range s.ofType("AWS::CloudWatch::Alarm") {
		if _, ok := a.Properties["Metrics"]; ok {
			checkFailureRateAlarm(t, s, a)
		}
	}

	// JWT authorizer on the route.
	must(t, "jwt authorizer", func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Authorizer"), &map[string]any{
			"AuthorizerType": "JWT",
			"JwtConfiguration": map[string]any{
				"Issuer": "https://issuer.example.com/", "Audience": []any{"slicework", "ops"},
			},
		})
	})
	must(t, "jwt route", func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), &map[string]any{
			"RouteKey": "$default", "AuthorizationType": "JWT",
		})
	})

	// Tracing.
	must(t, "tracing", func() {
		s.template.AllResourcesProperties(jsii.String("AWS::Lambda::Function"), &map[string]any{
			"TracingConfig": map[string]any{"Mode": "Active"},
		})
	})

	// Schedules, one with ids beyond 2^53 and a fake placeholder.
	checkScheduleRules(t, s, testSchedules())
	must(t, "rule count", func() { s.template.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(3)) })
}

// TestVariantPublicAPI: an explicit opt-out of authorization builds, warns
// loudly, and is suppressed in cdk-nag with its reason.
func TestVariantPublicAPI(t *testing.T) {
	cfg := DefaultConfig("scratch")
	cfg.BuildDir = testBuildDir
	cfg.PublicAPI = true
	reg := testRegistry(t)
	s := variant(t, cfg, StackInputs{Registry: reg, Schema: JobTableSchema()})
	if errs := nagErrors(s); len(errs) > 0 {
		t.Errorf("cdk-nag AwsSolutions errors:\n%s", strings.Join(errs, "\n"))
	}
	must(t, "public route", func() {
		s.template.HasResourceProperties(jsii.String("AWS::ApiGatewayV2::Route"), &map[string]any{
			"RouteKey": "$default", "AuthorizationType": "NONE",
		})
	})
	must(t, "warning", func() {
		assertions.Annotations_FromStack(s.stack.Stack).HasWarning(jsii.String("*"),
			assertions.Match_StringLikeRegexp(jsii.String("NO AUTHORIZATION")))
	})
	found := false
	for _, sups := range s.stack.NagSuppressions() {
		for _, sp := range sups {
			found = found || sp.Rule == "AwsSolutions-APIG4"
		}
	}
	if !found {
		t.Error("no APIG4 suppression for the public API")
	}
	must(t, "no schedule rules", func() { s.template.ResourceCountIs(jsii.String("AWS::Events::Rule"), jsii.Number(1)) })
}
