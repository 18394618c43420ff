package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/lambda"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/schedule"
)

// fireSchedule finds the stack's first schedule rule (the one whose target
// has an input transformer), delivers one tick of it to its target twice,
// as EventBridge would on a duplicate delivery, and checks that exactly one
// job with the tick's unique key exists.
func fireSchedule(ctx context.Context, cfg aws.Config, res *resources, api *apiClient, timeout time.Duration) error {
	eb := eventbridge.NewFromConfig(cfg)
	var rule string
	var target ebtypes.Target
	for _, id := range res.ofType("AWS::Events::Rule") {
		name := res.physical[id]
		if i := strings.LastIndex(name, "|"); i >= 0 { // "bus|rule" for rules off the default bus
			name = name[i+1:]
		}
		out, err := eb.ListTargetsByRule(ctx, &eventbridge.ListTargetsByRuleInput{Rule: aws.String(name)})
		if err != nil {
			return fmt.Errorf("rule %s: %w", name, err)
		}
		for _, t := range out.Targets {
			if t.InputTransformer != nil && (rule == "" || name < rule) {
				rule, target = name, t
			}
		}
	}
	if rule == "" {
		return fmt.Errorf("no schedule rule with an input transformer in the stack")
	}
	desc, err := eb.DescribeRule(ctx, &eventbridge.DescribeRuleInput{Name: aws.String(rule)})
	if err != nil {
		return fmt.Errorf("rule %s: %w", rule, err)
	}
	tick := time.Now().UTC().Truncate(time.Minute)
	event := map[string]any{
		"version": "0", "id": fmt.Sprintf("e2e-%d", tick.Unix()), "detail-type": "Scheduled Event", "source": "aws.events",
		"account": "000000000000", "time": tick.Format(time.RFC3339), "region": cfg.Region,
		"resources": []string{aws.ToString(desc.Arn)}, "detail": map[string]any{},
	}
	payload, err := transform(event, target.InputTransformer)
	if err != nil {
		return fmt.Errorf("rule %s: %w", rule, err)
	}
	var fired struct {
		Detail schedule.Definition `json:"detail"`
	}
	if err := json.Unmarshal(payload, &fired); err != nil || fired.Detail.Name == "" {
		return fmt.Errorf("rule %s: its input is not a schedule event: %s", rule, payload)
	}
	step("rule %s (%s, %s) fires at %s", rule, fired.Detail.Name, aws.ToString(desc.ScheduleExpression), tick.Format(time.RFC3339))

	lc := lambda.NewFromConfig(cfg)
	for i := 1; i <= 2; i++ {
		out, err := lc.Invoke(ctx, &lambda.InvokeInput{FunctionName: target.Arn, Payload: payload})
		if err != nil {
			return fmt.Errorf("invoke %s: %w", aws.ToString(target.Arn), err)
		}
		if out.FunctionError != nil {
			return fmt.Errorf("invoke %s: %s: %s", aws.ToString(target.Arn), *out.FunctionError, out.Payload)
		}
		step("delivery %d to the scheduler: %s", i, strings.TrimSpace(string(out.Payload)))
	}

	key := schedule.UniqueKey(fired.Detail.Name, tick)
	var page struct {
		Jobs []*job.Job `json:"jobs"`
	}
	if err := api.call(ctx, "GET", "/jobs?tag="+url.QueryEscape(schedule.TagPrefix+fired.Detail.Name)+"&limit=100", nil, &page); err != nil {
		return err
	}
	var matched []*job.Job
	for _, j := range page.Jobs {
		if j.UniqueKey == key {
			matched = append(matched, j)
		}
	}
	if len(matched) != 1 {
		return fmt.Errorf("schedule %s tick %s: %d jobs with unique key %q, want exactly 1", fired.Detail.Name, tick.Format(time.RFC3339), len(matched), key)
	}
	j := matched[0]
	step("one job for the tick: %s (%s, %s, unique key %s)", j.ID, j.Kind, j.State, j.UniqueKey)
	return nil
}

var placeholder = regexp.MustCompile(`<([A-Za-z0-9_.-]+)>`)

// transform applies an EventBridge input transformer to event: each path
// of InputPathsMap (only "$.field" and "$.field[n]" forms) is looked up and
// its placeholder in InputTemplate replaced by the value.
func transform(event map[string]any, it *ebtypes.InputTransformer) ([]byte, error) {
	values := map[string]string{}
	for name, path := range it.InputPathsMap {
		v, err := lookup(event, path)
		if err != nil {
			return nil, fmt.Errorf("input path %s: %w", name, err)
		}
		values[name] = v
	}
	var missing []string
	out := placeholder.ReplaceAllStringFunc(aws.ToString(it.InputTemplate), func(m string) string {
		name := m[1 : len(m)-1]
		v, ok := values[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("input template placeholders without a path: %v", missing)
	}
	if !json.Valid([]byte(out)) {
		return nil, fmt.Errorf("input template did not give JSON: %s", out)
	}
	return []byte(out), nil
}

var pathPattern = regexp.MustCompile(`^\$\.([A-Za-z0-9_-]+)(?:\[(\d+)\])?$`)

func lookup(event map[string]any, path string) (string, error) {
	m := pathPattern.FindStringSubmatch(path)
	if m == nil {
		return "", fmt.Errorf("path %q: e2e supports only $.field and $.field[n]", path)
	}
	v, ok := event[m[1]]
	if !ok {
		return "", fmt.Errorf("path %q: no field %s in the event", path, m[1])
	}
	if m[2] != "" {
		var n int
		fmt.Sscan(m[2], &n)
		list, ok := v.([]string)
		if !ok || n >= len(list) {
			return "", fmt.Errorf("path %q: no element %d", path, n)
		}
		v = list[n]
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("path %q: not a string", path)
	}
	return s, nil
}
