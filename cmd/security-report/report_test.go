package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// The fixtures under testdata were captured from `make security` on the
// dev stage: assembly/ is a cloud assembly trimmed to the manifest, the
// templates' logical ids with their construct paths, and cdk-nag's report;
// cfn-lint.json and checkov.json are the tools' outputs on it.
const (
	fixtureAssembly = "testdata/assembly"
	fixtureCfnLint  = "testdata/cfn-lint.json"
	fixtureCheckov  = "testdata/checkov.json"
	fixtureFindings = "testdata/findings.json"
)

func fixtureOptions() Options {
	return Options{CdkOut: fixtureAssembly, Findings: fixtureFindings, CfnLintJSON: fixtureCfnLint, CheckovJSON: fixtureCheckov}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s (-want +got), go test -update rewrites it:\n%s", file, d)
	}
}

// TestRunAllJustified: the captured outputs with the justifications of the
// time: every finding justified, the report passes.
func TestRunAllJustified(t *testing.T) {
	var out, errOut bytes.Buffer
	ok, err := Run(context.Background(), fixtureOptions(), &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Errorf("report failed:\n%s", out.String())
	}
	golden(t, "report.golden", out.Bytes())
	if errOut.Len() > 0 {
		t.Errorf("ran a tool although outputs were given: %s", errOut.String())
	}
}

// TestRunUnjustifiedAndStale: a finding whose justification is removed is
// UNJUSTIFIED; a justification of a fixed finding is stale; both fail.
func TestRunUnjustifiedAndStale(t *testing.T) {
	data, err := os.ReadFile(fixtureFindings)
	if err != nil {
		t.Fatal(err)
	}
	var f JustificationFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	// Drop the versioning justification; narrow the W3005 one to leave the
	// worker out; add one for a rule that found nothing.
	f.Findings = slices.DeleteFunc(f.Findings, func(j Justification) bool { return j.Rule == "CKV_AWS_21" })
	for i, j := range f.Findings {
		if j.Rule == "W3005" {
			f.Findings[i].Resources = slices.DeleteFunc(j.Resources, func(r string) bool { return strings.HasPrefix(r, "Worker") })
		}
	}
	f.Findings = append(f.Findings, Justification{
		Tool: ToolCheckov, Rule: "CKV_AWS_26", Resources: []string{"MonitoringAlarmTopic*"},
		Reason: "A justification of a finding that was fixed since: it must be removed.",
	})
	file := filepath.Join(t.TempDir(), "findings.json")
	data, _ = json.Marshal(f)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	o := fixtureOptions()
	o.Findings = file
	var out bytes.Buffer
	ok, err := Run(context.Background(), o, &out, &out)
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Error("report passed with an unjustified finding and a stale justification")
	}
	golden(t, "report-fail.golden", bytes.ReplaceAll(out.Bytes(), []byte(file), []byte("findings.json")))
}

func TestEvaluate(t *testing.T) {
	findings := []Finding{
		{Tool: ToolCheckov, Rule: "CKV_AWS_27", LogicalID: "ChannelQueuebulkQueue1234ABCD", Path: "ChannelQueue-bulk/Queue/Resource", Message: "m1"},
		{Tool: ToolCheckov, Rule: "CKV_AWS_27", LogicalID: "SliceQueueDC4BD4AF", Path: "SliceQueue/Queue/Resource", Message: "m2"},
		{Tool: ToolCfnLint, Rule: "W3005", LogicalID: "SliceQueueDC4BD4AF", Message: "m3"},
		{Tool: ToolCdkNag, Rule: "AwsSolutions-S1", LogicalID: "DataBucketE3889A50", Suppression: "in code"},
		{Tool: ToolCdkNag, Rule: "AwsSolutions-SQS3", Path: "SliceQueue/Queue/Resource", Message: "m4"},
	}
	reason := strings.Repeat("r", MinReasonLength)
	js := []Justification{
		// By construct path: '*' stays within one path segment.
		{Tool: ToolCheckov, Rule: "CKV_AWS_27", Resources: []string{"ChannelQueue-*/Queue/Resource", "*/DeadLetter/Resource"}, Reason: reason},
		// Right resource, other tool: does not justify the cfn-lint finding.
		{Tool: ToolCheckov, Rule: "W3005", Resources: []string{"SliceQueueDC4BD4AF"}, Reason: reason},
		// A cdk-nag entry for a suppressed finding is stale: the stack holds it.
		{Tool: ToolCdkNag, Rule: "AwsSolutions-S1", Resources: []string{"DataBucket*"}, Reason: reason},
		{Tool: ToolCdkNag, Rule: "AwsSolutions-SQS3", Resources: []string{"SliceQueue/Queue/Resource"}, Reason: reason},
	}
	r := Evaluate(findings, js)
	got := map[string]Status{}
	for _, row := range r.Rows {
		got[row.Tool+" "+row.Rule+" "+row.Resource()] = row.Status
	}
	want := map[string]Status{
		"checkov CKV_AWS_27 ChannelQueuebulkQueue1234ABCD":    Justified,
		"checkov CKV_AWS_27 SliceQueueDC4BD4AF":               Unjustified,
		"cfn-lint W3005 SliceQueueDC4BD4AF":                   Unjustified,
		"cdk-nag AwsSolutions-S1 DataBucketE3889A50":          Justified,
		"cdk-nag AwsSolutions-SQS3 SliceQueue/Queue/Resource": Justified,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("statuses (-want +got):\n%s", d)
	}
	var stale []string
	for _, s := range r.Stale {
		stale = append(stale, s.Tool+" "+s.Rule+" "+s.Pattern)
	}
	wantStale := []string{"checkov CKV_AWS_27 */DeadLetter/Resource", "checkov W3005 SliceQueueDC4BD4AF", "cdk-nag AwsSolutions-S1 DataBucket*"}
	if d := cmp.Diff(wantStale, stale); d != "" {
		t.Errorf("stale (-want +got):\n%s", d)
	}
	if total, unjustified := r.Counts(""); total != 5 || unjustified != 2 || r.OK() {
		t.Errorf("counts %d/%d, OK %v; want 5 findings, 2 unjustified, not OK", total, unjustified, r.OK())
	}
	if r.Rows[0].Tool != ToolCdkNag || r.Rows[len(r.Rows)-1].Tool != ToolCheckov {
		t.Errorf("rows not in tool order: %v ... %v", r.Rows[0].Tool, r.Rows[len(r.Rows)-1].Tool)
	}
}

func TestParseJustificationsRejects(t *testing.T) {
	reason := `"` + strings.Repeat("r", MinReasonLength) + `"`
	for _, tc := range []struct{ name, file, want string }{
		{"unknown tool", `{"findings":[{"tool":"tfsec","rule":"X","resources":["A"],"reason":` + reason + `}]}`, `tool "tfsec"`},
		{"no rule", `{"findings":[{"tool":"checkov","rule":" ","resources":["A"],"reason":` + reason + `}]}`, "no rule"},
		{"no resources", `{"findings":[{"tool":"checkov","rule":"X","reason":` + reason + `}]}`, "no resources"},
		{"everything", `{"findings":[{"tool":"checkov","rule":"X","resources":["*"],"reason":` + reason + `}]}`, `pattern "*"`},
		{"malformed pattern", `{"findings":[{"tool":"checkov","rule":"X","resources":["Queue["],"reason":` + reason + `}]}`, `pattern "Queue["`},
		{"short reason", `{"findings":[{"tool":"checkov","rule":"X","resources":["A"],"reason":"false positive"}]}`, "reason of 14 characters"},
		{"misspelt field", `{"findings":[{"tool":"checkov","rule":"X","resource":["A"],"reason":` + reason + `}]}`, `unknown field "resource"`},
		{"not JSON", `findings: []`, "justification file"},
	} {
		_, err := ParseJustifications([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestRepoJustificationFile: the project's own file is well formed (whether
// it matches today's findings is `make security`'s job).
func TestRepoJustificationFile(t *testing.T) {
	js, err := LoadJustifications("../../infra/lint/findings.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(js) == 0 {
		t.Error("no justification in infra/lint/findings.json")
	}
}

func TestParseNagReport(t *testing.T) {
	s := &Stack{ID: "st", Name: "st", TemplateFile: "st.template.json",
		Paths: map[string]string{"Bucket1": "Bucket/Resource"}, byPath: map[string]string{"st/Bucket/Resource": "Bucket1"}}
	csvData := `Rule ID,Resource ID,Compliance,Exception Reason,Rule Level,Rule Info
"AwsSolutions-S10","st/Bucket/Resource","Compliant","N/A","Error","TLS only."
"AwsSolutions-S1","st/Bucket/Resource","Suppressed","No access logs, because
of ""reasons"".","Error","Server access logs disabled."
"AwsSolutions-SQS3","st/Queue/Resource","Non-Compliant","N/A","Error","The queue has no DLQ."
"AwsSolutions-L1","st/Fn/Resource","UNKNOWN","N/A","Warning","Latest runtime."
`
	got, err := ParseNagReport([]byte(csvData), s)
	if err != nil {
		t.Fatal(err)
	}
	want := []Finding{
		{Tool: ToolCdkNag, Rule: "AwsSolutions-S1", LogicalID: "Bucket1", Path: "Bucket/Resource", Template: "st.template.json",
			Message: "Server access logs disabled.", Suppression: "No access logs, because\nof \"reasons\"."},
		{Tool: ToolCdkNag, Rule: "AwsSolutions-SQS3", Path: "Queue/Resource", Template: "st.template.json", Message: "Error: The queue has no DLQ."},
		{Tool: ToolCdkNag, Rule: "AwsSolutions-L1", Path: "Fn/Resource", Template: "st.template.json", Message: "UNKNOWN (Warning): Latest runtime."},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("findings (-want +got):\n%s", d)
	}
	if _, err := ParseNagReport([]byte("a,b\n"), s); err == nil {
		t.Error("a CSV that is not a cdk-nag report was accepted")
	}
}

func TestParseCfnLintLocations(t *testing.T) {
	a, err := LoadAssembly(fixtureAssembly)
	if err != nil {
		t.Fatal(err)
	}
	out := `[
 {"Filename": "x/slicework-dev.template.json", "Level": "Error", "Message": "bad", "Rule": {"Id": "E6101"}, "Location": {"Path": ["Outputs", "ApiUrl", "Value"]}},
 {"Filename": "x/slicework-dev.template.json", "Level": "Error", "Message": "unparsable", "Rule": {"Id": "E0000"}, "Location": {"Path": []}},
 {"Filename": "x/slicework-dev.template.json", "Level": "Informational", "Message": "m", "Rule": {"Id": "I3042"}, "Location": {"Path": ["Resources", "DataBucketE3889A50", "Properties"]}}
]`
	got, err := ParseCfnLint([]byte(out), a)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range got {
		ids = append(ids, f.Rule+" "+f.Resource()+" "+f.Path)
	}
	want := []string{"E6101 Outputs/ApiUrl ", "E0000 (template) ", "I3042 DataBucketE3889A50 DataBucket/Resource"}
	if d := cmp.Diff(want, ids); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, err := ParseCfnLint([]byte("Traceback (most recent call last):"), a); err == nil {
		t.Error("a crash output was accepted")
	}
}

func TestParseCheckovForms(t *testing.T) {
	a, err := LoadAssembly(fixtureAssembly)
	if err != nil {
		t.Fatal(err)
	}
	report := `{"check_type": "cloudformation", "results": {
	  "failed_checks": [{"check_id": "CKV_AWS_21", "check_name": "versioning", "resource": "AWS::S3::Bucket.DataBucketE3889A50", "file_path": "/a/slicework-dev.template.json"}],
	  "skipped_checks": [{"check_id": "CKV_AWS_18", "check_name": "logging", "resource": "AWS::S3::Bucket.DataBucketE3889A50", "file_path": "/a/slicework-dev.template.json", "suppress_comment": "meh"}]},
	 "summary": {"passed": 3, "failed": 1, "parsing_errors": 0, "resource_count": 2, "checkov_version": "9.9.9"}}`
	for _, data := range []string{report, "[" + report + "]"} {
		got, err := ParseCheckov([]byte(data), a)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Rule != "CKV_AWS_21" || got[0].Path != "DataBucket/Resource" ||
			got[1].Rule != "CKV_AWS_18" || !strings.Contains(got[1].Message, `skipped in the template ("meh")`) {
			t.Errorf("findings: %+v", got)
		}
		if v := checkovVersion([]byte(data)); v != "9.9.9" {
			t.Errorf("version %q", v)
		}
	}
	for _, bad := range []string{
		`{"check_type": "cloudformation", "results": {}, "summary": {"parsing_errors": 1, "resource_count": 0}}`,
		`{"passed": 0, "failed": 0, "skipped": 0, "parsing_errors": 0, "resource_count": 0}`,
		`not json`,
	} {
		if _, err := ParseCheckov([]byte(bad), a); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestLoadAssemblyErrors(t *testing.T) {
	if _, err := LoadAssembly(t.TempDir()); err == nil || !strings.Contains(err.Error(), "make synth") {
		t.Errorf("empty directory: %v", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"artifacts": {"s": {"type": "aws:cloudformation:stack", "properties": {"templateFile": "s.template.json"}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAssembly(dir); err == nil || !strings.Contains(err.Error(), "s.template.json") {
		t.Errorf("missing template: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "s.template.json"), []byte(`{"Resources": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := LoadAssembly(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.ReadNagReports(); err == nil || !strings.Contains(err.Error(), "AwsSolutions-s-NagReport.csv") {
		t.Errorf("missing cdk-nag report: %v", err)
	}
}

// TestToolOutput runs stand-ins for the tools: cfn-lint's non-zero exit
// with JSON is findings; checkov's non-zero exit (it runs with --soft-fail)
// and output that is not JSON are failures.
func TestToolOutput(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("shell scripts")
	}
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	keep := filepath.Join(dir, "kept.json")
	var log bytes.Buffer
	out, err := toolOutput(ctx, "", keep, &log, []string{script("warns", `echo '[]'; exit 4`)}, anyExit)
	if err != nil || strings.TrimSpace(string(out)) != "[]" {
		t.Errorf("exit 4 with JSON: %q, %v", out, err)
	}
	if kept, _ := os.ReadFile(keep); !bytes.Equal(kept, out) {
		t.Errorf("kept output %q, want %q", kept, out)
	}
	if _, err := toolOutput(ctx, "", keep, &log, []string{script("crash", `echo boom >&2; exit 1`)}, anyExit); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("crash: %v", err)
	}
	if _, err := toolOutput(ctx, "", keep, &log, []string{script("fails", `echo '{}'; exit 1`)}, zeroExit); err == nil {
		t.Error("exit 1 under zeroExit accepted")
	}
	if _, err := toolOutput(ctx, "", keep, &log, []string{filepath.Join(dir, "missing")}, zeroExit); err == nil || !strings.Contains(err.Error(), "make venv-lint") {
		t.Errorf("missing tool: %v", err)
	}
}

func TestCompareNatural(t *testing.T) {
	got := []string{"CKV_AWS_21", "CKV_AWS_115", "CKV2_AWS_1", "CKV_AWS_18", "CKV_AWS_027", "W3005", "E1001"}
	slices.SortFunc(got, compareNatural)
	want := []string{"CKV2_AWS_1", "CKV_AWS_18", "CKV_AWS_21", "CKV_AWS_027", "CKV_AWS_115", "E1001", "W3005"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
