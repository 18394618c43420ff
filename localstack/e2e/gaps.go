package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
)

// gapCondition is the condition under which infra/ keeps the parts an
// emulator cannot create (infra.MetricMathCondition).
const gapCondition = "MetricMathAlarmsSupported"

type templateResource struct {
	Type       string          `json:"Type"`
	Condition  string          `json:"Condition"`
	Properties json.RawMessage `json:"Properties"`
}

// createGaps creates, through the service's API, every resource of the
// template that sits under gapCondition, resolving its references with the
// deployed stack's physical ids.
func createGaps(ctx context.Context, cfg aws.Config, o options, res *resources) error {
	data, err := os.ReadFile(o.template)
	if err != nil {
		return fmt.Errorf("template: %w", err)
	}
	var t struct {
		Resources map[string]templateResource `json:"Resources"`
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return fmt.Errorf("template %s: %w", o.template, err)
	}
	ids := make([]string, 0)
	for id, r := range t.Resources {
		if r.Condition == gapCondition {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		step("none: the template has no resource under %s", gapCondition)
		return nil
	}
	cw := cloudwatch.NewFromConfig(cfg)
	for _, id := range ids {
		r := t.Resources[id]
		if r.Type != "AWS::CloudWatch::Alarm" {
			return fmt.Errorf("template resource %s (%s) is under %s: e2e knows how to create only AWS::CloudWatch::Alarm", id, r.Type, gapCondition)
		}
		in, err := alarmInput(res.stack+"-"+id, r.Properties, res)
		if err != nil {
			return fmt.Errorf("template resource %s: %w", id, err)
		}
		if _, err := cw.PutMetricAlarm(ctx, in); err != nil {
			return fmt.Errorf("create alarm %s: %w", *in.AlarmName, err)
		}
		got, err := cw.DescribeAlarms(ctx, &cloudwatch.DescribeAlarmsInput{AlarmNames: []string{*in.AlarmName}})
		if err != nil || len(got.MetricAlarms) != 1 {
			return fmt.Errorf("alarm %s not found after PutMetricAlarm: %v", *in.AlarmName, err)
		}
		step("created %s (%s, %d metric queries) with PutMetricAlarm", *in.AlarmName, r.Type, len(in.Metrics))
	}
	return nil
}

// alarmInput turns an AWS::CloudWatch::Alarm's properties into the
// PutMetricAlarm call that creates the same alarm.
func alarmInput(name string, props json.RawMessage, res *resources) (*cloudwatch.PutMetricAlarmInput, error) {
	var raw any
	if err := json.Unmarshal(props, &raw); err != nil {
		return nil, err
	}
	resolved, err := resolve(raw, res)
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(resolved)
	if err != nil {
		return nil, err
	}
	var p struct {
		AlarmDescription   string
		ComparisonOperator cwtypes.ComparisonOperator
		EvaluationPeriods  int32
		Threshold          float64
		TreatMissingData   string
		AlarmActions       []string
		OKActions          []string
		Metrics            []struct {
			ID         string `json:"Id"`
			Expression string
			Label      string
			ReturnData *bool
			MetricStat *struct {
				Metric struct {
					MetricName string
					Namespace  string
					Dimensions []struct{ Name, Value string }
				}
				Period int32
				Stat   string
			}
		}
		Tags []struct{ Key, Value string }
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("alarm properties: %w", err)
	}
	in := &cloudwatch.PutMetricAlarmInput{
		AlarmName: aws.String(name), AlarmDescription: aws.String(p.AlarmDescription),
		ComparisonOperator: p.ComparisonOperator, EvaluationPeriods: aws.Int32(p.EvaluationPeriods),
		Threshold: aws.Float64(p.Threshold), TreatMissingData: aws.String(p.TreatMissingData),
		AlarmActions: p.AlarmActions, OKActions: p.OKActions,
	}
	for _, m := range p.Metrics {
		q := cwtypes.MetricDataQuery{Id: aws.String(m.ID), ReturnData: m.ReturnData}
		if m.Expression != "" {
			q.Expression = aws.String(m.Expression)
		}
		if m.Label != "" {
			q.Label = aws.String(m.Label)
		}
		if s := m.MetricStat; s != nil {
			ms := &cwtypes.MetricStat{Period: aws.Int32(s.Period), Stat: aws.String(s.Stat),
				Metric: &cwtypes.Metric{MetricName: aws.String(s.Metric.MetricName), Namespace: aws.String(s.Metric.Namespace)}}
			for _, d := range s.Metric.Dimensions {
				ms.Metric.Dimensions = append(ms.Metric.Dimensions, cwtypes.Dimension{Name: aws.String(d.Name), Value: aws.String(d.Value)})
			}
			q.MetricStat = ms
		}
		in.Metrics = append(in.Metrics, q)
	}
	for _, t := range p.Tags {
		in.Tags = append(in.Tags, cwtypes.Tag{Key: aws.String(t.Key), Value: aws.String(t.Value)})
	}
	return in, nil
}

// resolve replaces the intrinsic functions that the stack's alarms use
// (Ref, and Fn::GetAtt of a queue's QueueName) with deployed values; any
// other intrinsic is an error.
func resolve(v any, res *resources) (any, error) {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := resolve(e, res)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	case map[string]any:
		if ref, ok := x["Ref"].(string); ok && len(x) == 1 {
			id, ok := res.physical[ref]
			if !ok {
				return nil, fmt.Errorf("Ref %s: no such resource in the stack", ref)
			}
			return id, nil
		}
		if ga, ok := x["Fn::GetAtt"].([]any); ok && len(x) == 1 {
			if len(ga) != 2 {
				return nil, fmt.Errorf("Fn::GetAtt %v: want [resource, attribute]", ga)
			}
			id, _ := ga[0].(string)
			attr, _ := ga[1].(string)
			phys, ok := res.physical[id]
			if !ok {
				return nil, fmt.Errorf("Fn::GetAtt %s.%s: no such resource in the stack", id, attr)
			}
			if res.types[id] == "AWS::SQS::Queue" && attr == "QueueName" {
				// A queue's physical id is its URL; the name is the last segment.
				return phys[strings.LastIndex(phys, "/")+1:], nil
			}
			return nil, fmt.Errorf("Fn::GetAtt %s.%s: not supported by e2e", id, attr)
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			if strings.HasPrefix(k, "Fn::") {
				return nil, fmt.Errorf("intrinsic %s: not supported by e2e", k)
			}
			r, err := resolve(e, res)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	}
	return v, nil
}
