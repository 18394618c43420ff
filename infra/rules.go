package main

import (
	"encoding/json"
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/slicework/slicework/shared/schedule"
)

// The event that a schedule rule sends to the scheduler function. It has
// the shape of an EventBridge event (events.EventBridgeEvent decodes it):
//
//	{"version": "0", "id": <the firing's event id>, "source": "slicework.schedule",
//	 "detail-type": "Scheduled Job", "time": <the firing time, RFC 3339>,
//	 "account": ..., "region": ..., "resources": [<the rule's ARN>],
//	 "detail": <the schedule.Definition, as in schedules.json>}
//
// The scheduler submits detail.Request(time): the firing's tick (its time
// truncated to the minute) makes the unique key, so a duplicate delivery of
// one firing submits nothing. The local host fires the same event (see
// schedule.Definition.Event). The per-minute sweeper rule sends
// EventBridge's plain scheduled event (source "aws.events"), which the
// scheduler takes as "sweep".
const (
	ScheduleEventSource     = schedule.EventSource
	ScheduleEventDetailType = schedule.EventDetailType
)

// maxInputTemplate is EventBridge's limit on an input template's length.
const maxInputTemplate = 8192

// NewCompletionBus creates the event bus on which jobs that reach a
// terminal state are published (source "slicework", one event per job).
// Its physical name is derived by CloudFormation from the stack, so stages
// do not collide.
func NewCompletionBus(scope constructs.Construct, id string) awsevents.EventBus {
	return awsevents.NewEventBus(scope, jsii.String(id), &awsevents.EventBusProps{
		Description: jsii.String("slicework job completion events"),
	})
}

// NewSweeperRule creates the rule that runs the scheduler (the sweeper)
// once a minute. A sweep that could not be delivered within a minute is
// dropped: the next one does the same work.
func NewSweeperRule(scope constructs.Construct, id string, scheduler awslambda.IFunction) awsevents.Rule {
	return awsevents.NewRule(scope, jsii.String(id), &awsevents.RuleProps{
		Description: jsii.String("slicework sweeper: releases due jobs and parked retries, re-drives stalled jobs"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(scheduler, &awseventstargets.LambdaFunctionProps{
			MaxEventAge:   awscdk.Duration_Minutes(jsii.Number(1)),
			RetryAttempts: jsii.Number(1),
		})},
	})
}

// NewScheduleRules creates one rule per definition (construct id
// "Schedule-<name>", in a construct named id), each sending the schedule's
// event to the scheduler. Definitions must be valid (schedule.Load
// validates them); a definition too large for an input template is an
// error.
func NewScheduleRules(scope constructs.Construct, id string, defs []schedule.Definition, scheduler awslambda.IFunction) ([]awsevents.Rule, error) {
	c := constructs.NewConstruct(scope, jsii.String(id))
	rules := make([]awsevents.Rule, 0, len(defs))
	for _, d := range defs {
		tmpl, err := ScheduleInputTemplate(d)
		if err != nil {
			return nil, err
		}
		desc := "slicework schedule " + d.Name
		if d.Description != "" {
			desc += ": " + d.Description
		}
		if len(desc) > 512 {
			desc = desc[:509] + "..."
		}
		r := awsevents.NewRule(c, jsii.String("Schedule-"+d.Name), &awsevents.RuleProps{
			Description: jsii.String(desc),
			Schedule:    awsevents.Schedule_Expression(jsii.String(d.Expression)),
			Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(scheduler, nil)},
		})
		// The L2 input helpers pass numbers through JavaScript, where ids
		// above 2^53 lose precision; the template is written here instead,
		// byte for byte from encoding/json.
		cfn := r.Node().DefaultChild().(awsevents.CfnRule)
		cfn.AddPropertyOverride(jsii.String("Targets.0.InputTransformer"), map[string]any{
			"InputPathsMap": map[string]string{
				"id": "$.id", "time": "$.time", "account": "$.account", "region": "$.region", "rule": "$.resources[0]",
			},
			"InputTemplate": tmpl,
		})
		rules = append(rules, r)
	}
	return rules, nil
}

// ScheduleInputTemplate is the input template of d's rule: the event
// documented at ScheduleEventSource, with placeholders for the firing's
// fields. encoding/json escapes '<' and '>' in the definition's strings, so
// no text of it can be taken for a placeholder.
func ScheduleInputTemplate(d schedule.Definition) (string, error) {
	detail, err := json.Marshal(d)
	if err != nil {
		return "", fmt.Errorf("schedule %q: %w", d.Name, err)
	}
	tmpl := `{"version":"0","id":"<id>","source":"` + ScheduleEventSource + `","detail-type":"` + ScheduleEventDetailType +
		`","time":"<time>","account":"<account>","region":"<region>","resources":["<rule>"],"detail":` + string(detail) + `}`
	if len(tmpl) > maxInputTemplate {
		return "", fmt.Errorf("schedule %q: its event is %d bytes, above EventBridge's %d-byte input template limit: shorten its args or input", d.Name, len(tmpl), maxInputTemplate)
	}
	return tmpl, nil
}
