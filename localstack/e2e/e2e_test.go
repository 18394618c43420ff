package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/google/go-cmp/cmp"
)

func TestTransform(t *testing.T) {
	t.Parallel()
	event := map[string]any{"id": "e-1", "time": "2026-11-23T03:00:00Z", "account": "000000000000", "region": "us-east-1",
		"resources": []string{"arn:aws:events:us-east-1:000000000000:rule/r"}}
	paths := map[string]string{"id": "$.id", "time": "$.time", "account": "$.account", "region": "$.region", "rule": "$.resources[0]"}
	for _, tc := range []struct {
		name, template, paths, want, err string
	}{
		{name: "schedule event", template: `{"id":"<id>","time":"<time>","account":"<account>","region":"<region>","resources":["<rule>"],"detail":{"name":"n","args":{"a":"\u003cx\u003e"}}}`,
			want: `{"id":"e-1","time":"2026-11-23T03:00:00Z","account":"000000000000","region":"us-east-1","resources":["arn:aws:events:us-east-1:000000000000:rule/r"],"detail":{"name":"n","args":{"a":"\u003cx\u003e"}}}`},
		{name: "placeholder without a path", template: `{"x":"<nope>"}`, err: "placeholders without a path: [nope]"},
		{name: "not JSON", template: `{"x":<id>}`, err: "did not give JSON"},
		{name: "unsupported path", paths: "$.detail.x", template: `{}`, err: "supports only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := paths
			if tc.paths != "" {
				p = map[string]string{"x": tc.paths}
			}
			got, err := transform(event, &ebtypes.InputTransformer{InputPathsMap: p, InputTemplate: aws.String(tc.template)})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestAlarmInputResolvesReferences(t *testing.T) {
	t.Parallel()
	res := &resources{stack: "s",
		physical: map[string]string{"Topic": "arn:aws:sns:us-east-1:000000000000:topic", "Q": "http://127.0.0.1:4566/000000000000/s-Q-ABC"},
		types:    map[string]string{"Topic": "AWS::SNS::Topic", "Q": "AWS::SQS::Queue"}}
	props := `{"AlarmActions":[{"Ref":"Topic"}],"ComparisonOperator":"GreaterThanThreshold","EvaluationPeriods":3,"Threshold":5,
	  "TreatMissingData":"notBreaching","Metrics":[{"Expression":"100*f/r","Id":"e","ReturnData":true},
	  {"Id":"r","ReturnData":false,"MetricStat":{"Metric":{"MetricName":"NumberOfMessagesReceived","Namespace":"AWS/SQS",
	  "Dimensions":[{"Name":"QueueName","Value":{"Fn::GetAtt":["Q","QueueName"]}}]},"Period":300,"Stat":"Sum"}}]}`
	in, err := alarmInput("s-Alarm", json.RawMessage(props), res)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"arn:aws:sns:us-east-1:000000000000:topic"}, in.AlarmActions); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	if len(in.Metrics) != 2 || aws.ToString(in.Metrics[1].MetricStat.Metric.Dimensions[0].Value) != "s-Q-ABC" ||
		aws.ToString(in.Metrics[0].Expression) != "100*f/r" || aws.ToFloat64(in.Threshold) != 5 {
		t.Errorf("resolved input: %+v", in)
	}

	for _, bad := range []string{`{"AlarmActions":[{"Ref":"Missing"}]}`, `{"AlarmActions":[{"Fn::Sub":"x"}]}`,
		`{"AlarmActions":[{"Fn::GetAtt":["Topic","TopicName"]}]}`, `{"Unknown":1}`} {
		if _, err := alarmInput("s-Alarm", json.RawMessage(bad), res); err == nil {
			t.Errorf("alarmInput(%s): no error", bad)
		}
	}
}
