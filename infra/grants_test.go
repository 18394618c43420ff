package main

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// statement is one IAM statement, its resources rendered.
type statement struct {
	actions   []string
	resources []string
}

// statements returns the statements of f's role policies.
func statements(s *synthesized, f *SliceworkFunction) []statement {
	role := s.logicalID(f.Role)
	var out []statement
	for _, r := range s.ofType("AWS::IAM::Policy") {
		attached := false
		for _, rr := range r.Properties["Roles"].([]any) {
			attached = attached || ref(rr) == role
		}
		if !attached {
			continue
		}
		for _, st := range path(r.Properties, "PolicyDocument", "Statement").([]any) {
			if path(st, "Effect") != "Allow" {
				continue
			}
			out = append(out, statement{actions: strs(path(st, "Action")), resources: strs(path(st, "Resource"))})
		}
	}
	return out
}

// hasStatement reports whether f may do action on the resource rendered as
// "<resource>" (a logical id with its attribute: "Queue123.Arn").
func hasStatement(s *synthesized, f *SliceworkFunction, action, resource string) bool {
	for _, st := range statements(s, f) {
		if slices.Contains(st.actions, action) && slices.Contains(st.resources, "<"+resource+">") {
			return true
		}
	}
	return false
}

// allowedWildcards are the only resource patterns with "*" in the
// functions' policies; each is justified where it is granted.
var allowedWildcards = []*regexp.Regexp{
	regexp.MustCompile(`^<JobTable[0-9A-F]+\.Arn>/index/\*$`), // the table's own GSIs (grantReadWriteData)
	regexp.MustCompile(`^<DataBucket[0-9A-F]+\.Arn>/\*$`),     // every object of the one bucket (GrantBlobAccess)
}

func TestGrantsHaveNoWildcardActionOrResource(t *testing.T) {
	s := theDefaultStack(t)
	for _, name := range FunctionNames {
		for _, st := range statements(s, s.stack.Functions[name]) {
			for _, a := range st.actions {
				if strings.Contains(a, "*") {
					t.Errorf("%s: wildcard action %q", name, a)
				}
			}
			for _, r := range st.resources {
				if !strings.Contains(r, "*") {
					continue
				}
				ok := false
				for _, re := range allowedWildcards {
					ok = ok || re.MatchString(r)
				}
				if !ok {
					t.Errorf("%s: wildcard resource %q", name, r)
				}
			}
		}
	}
}

func TestLeastPrivilege(t *testing.T) {
	s := theDefaultStack(t)
	slice := s.logicalID(s.stack.SliceQueue.Queue) + ".Arn"
	var chunks []string
	for _, q := range s.stack.ChannelQueues {
		chunks = append(chunks, s.logicalID(q.Queue)+".Arn")
	}
	table := s.logicalID(s.stack.Table) + ".Arn"
	bucket := s.logicalID(s.stack.Bucket) + ".Arn"
	objects := "<" + bucket + ">/*"
	type perms map[string][]string // action → resources
	want := map[string]perms{}
	add := func(fn string, resources []string, actions ...string) {
		if want[fn] == nil {
			want[fn] = perms{}
		}
		for _, a := range actions {
			want[fn][a] = append(want[fn][a], resources...)
		}
	}
	send := []string{"sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
	consume := []string{"sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"}
	tableRW := []string{"dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:ConditionCheckItem", "dynamodb:DeleteItem",
		"dynamodb:DescribeTable", "dynamodb:GetItem", "dynamodb:GetRecords", "dynamodb:GetShardIterator", "dynamodb:PutItem",
		"dynamodb:Query", "dynamodb:Scan", "dynamodb:UpdateItem"}
	wrap := func(ids ...string) []string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = "<" + id + ">"
		}
		return out
	}
	for _, fn := range FunctionNames {
		logs := s.logicalID(s.stack.Functions[fn].LogGroup) + ".Arn"
		add(fn, wrap(logs), "logs:CreateLogStream", "logs:PutLogEvents")
		add(fn, wrap(slice), send...)
		add(fn, append(wrap(table), "<"+table+">/index/*"), tableRW...)
		add(fn, wrap(s.logicalID(s.stack.EventBus)+".Arn"), "events:PutEvents")
		add(fn, wrap(bucket), "s3:ListBucket")
		add(fn, []string{objects}, "s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload")
	}
	add(FnSlicer, wrap(slice), consume...)
	add(FnSlicer, wrap(chunks...), send...)
	add(FnWorker, wrap(chunks...), consume...)
	add(FnScheduler, wrap(chunks...), send...)
	add(FnScheduler, wrap(s.logicalID(s.stack.SchedulerDLQ)+".Arn"), "sqs:SendMessage")
	for _, fn := range []string{FnAPI, FnWorker, FnScheduler} {
		add(fn, []string{objects}, "s3:DeleteObject")
	}
	for _, fn := range FunctionNames {
		got := perms{}
		for _, st := range statements(s, s.stack.Functions[fn]) {
			for _, a := range st.actions {
				got[a] = append(got[a], st.resources...)
			}
		}
		norm := func(p perms) string {
			var lines []string
			for a, rs := range p {
				rs = slices.Clone(rs)
				sort.Strings(rs)
				rs = slices.Compact(rs)
				lines = append(lines, a+" on "+strings.Join(rs, ", "))
			}
			sort.Strings(lines)
			return strings.Join(lines, "\n")
		}
		if g, w := norm(got), norm(want[fn]); g != w {
			t.Errorf("%s: permissions\n got:\n%s\nwant:\n%s", fn, g, w)
		}
	}
}
