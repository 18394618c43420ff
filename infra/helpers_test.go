package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds"
	"github.com/slicework/slicework/shared/schedule"
)

// testBuildDir holds placeholder `bootstrap` files, so that synthesizing
// needs no `make build`. testRoot holds it and the shared assembly.
var testBuildDir, testRoot string

func TestMain(m *testing.M) {
	// The stack must not depend on the developer's credentials.
	os.Unsetenv("CDK_DEFAULT_ACCOUNT")
	os.Unsetenv("CDK_DEFAULT_REGION")
	root, err := os.MkdirTemp("", "slicework-infra-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir := filepath.Join(root, "build")
	for _, fn := range FunctionNames {
		if err := os.MkdirAll(filepath.Join(dir, fn), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(filepath.Join(dir, fn, "bootstrap"), []byte("#!/bin/sh\n# placeholder for "+fn+"\n"), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	testRoot, testBuildDir = root, dir
	code := m.Run()
	jsii.Close()
	os.RemoveAll(root)
	os.Exit(code)
}

// cdkJSONContext returns the context of cdk.json (the stage and the feature
// flags), so the tests synthesize as `cdk synth` does.
func cdkJSONContext(t testing.TB) map[string]any {
	t.Helper()
	data, err := os.ReadFile("cdk.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		App     string         `json:"app"`
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("cdk.json: %v", err)
	}
	if f.App != "go run ." {
		t.Errorf(`cdk.json: app = %q, want "go run ."`, f.App)
	}
	return f.Context
}

// newTestApp is an App with cdk.json's context plus extra, writing its
// assembly to outdir.
func newTestApp(t testing.TB, outdir string, extra map[string]any) awscdk.App {
	t.Helper()
	ctx := cdkJSONContext(t)
	for k, v := range extra {
		ctx[k] = v
	}
	return awscdk.NewApp(&awscdk.AppProps{Context: &ctx, Outdir: jsii.String(outdir)})
}

// synthesized is a stack with its template, as Go values.
type synthesized struct {
	stack    *SliceworkStack
	template assertions.Template
	// resources by logical id.
	resources map[string]resource
	outputs   map[string]any
}

type resource struct {
	Type           string         `json:"Type"`
	Condition      string         `json:"Condition"`
	Properties     map[string]any `json:"Properties"`
	DeletionPolicy string         `json:"DeletionPolicy"`
	Metadata       map[string]any `json:"Metadata"`
}

func synthesize(t testing.TB, s *SliceworkStack) *synthesized {
	t.Helper()
	tpl := assertions.Template_FromStack(s.Stack, nil)
	raw, err := json.Marshal(*tpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Resources map[string]resource `json:"Resources"`
		Outputs   map[string]any      `json:"Outputs"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return &synthesized{stack: s, template: tpl, resources: doc.Resources, outputs: doc.Outputs}
}

// ofType returns the resources of type typ by logical id.
func (s *synthesized) ofType(typ string) map[string]resource {
	out := map[string]resource{}
	for id, r := range s.resources {
		if r.Type == typ {
			out[id] = r
		}
	}
	return out
}

// logicalID is the logical id of r's main resource.
func (s *synthesized) logicalID(r awscdk.IResource) string { return s.stack.logicalID(r) }

// must runs an assertions call, turning its panic into a test error.
func must(t testing.TB, what string, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s: %v", what, r)
		}
	}()
	f()
}

var (
	defaultOnce  sync.Once
	defaultStack *synthesized
	defaultErr   error
)

// theDefaultStack is the stack that `cdk synth` makes from cdk.json (stage
// dev, the built-in kinds, the repository's schedules.json), with the
// cdk-nag checks applied. It is synthesized once for all tests.
func theDefaultStack(t testing.TB) *synthesized {
	t.Helper()
	defaultOnce.Do(func() {
		app := newTestApp(t, filepath.Join(testRoot, "cdk.out"), map[string]any{"buildDir": testBuildDir})
		s, err := BuildApp(app)
		if err != nil {
			defaultErr = err
			return
		}
		defaultStack = synthesize(t, s)
	})
	if defaultErr != nil {
		t.Fatalf("BuildApp: %v", defaultErr)
	}
	return defaultStack
}

// bulkArgs is a test kind on its own channel.
type bulkArgs struct{}

func (bulkArgs) Kind() string { return "bulk-test" }

type bulkHandler struct{}

func (bulkHandler) Process(context.Context, *engine.Chunk[bulkArgs]) error { return nil }

// testRegistry holds the built-in kinds and bulk-test on channel "bulk".
func testRegistry(t testing.TB) *engine.Registry {
	t.Helper()
	r, err := kinds.Registry()
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.Register[bulkArgs](r, bulkHandler{}, engine.Options{Channel: "bulk"}); err != nil {
		t.Fatal(err)
	}
	return r
}

// testSchedules are two schedules; the second has ids beyond 2^53 and a
// string that looks like a placeholder.
func testSchedules() []schedule.Definition {
	return []schedule.Definition{
		{Name: "nightly", Expression: "cron(0 3 * * ? *)", Kind: "recompute", Args: json.RawMessage(`{"work_ms":1}`),
			Input: job.Input{Type: job.InputIDRange, Start: 1, End: 1001}},
		{Name: "hourly-bulk", Expression: "rate(1 hour)", Kind: "bulk-test", Channel: "bulk", Args: json.RawMessage(`{"note":"<time>"}`),
			Input: job.Input{Type: job.InputIDRange, Start: 1<<62 - 10, End: 1 << 62}, Tags: []string{"bulk"}},
	}
}

// variant synthesizes a stack from cfg (stage, build dir set by the
// caller) and in, with the nag checks applied.
func variant(t testing.TB, cfg Config, in StackInputs) *synthesized {
	t.Helper()
	app := newTestApp(t, t.TempDir(), nil)
	s, err := NewSliceworkStack(app, cfg, in)
	if err != nil {
		t.Fatalf("NewSliceworkStack: %v", err)
	}
	s.AddNagSuppressions()
	ApplyNagChecks(app)
	return synthesize(t, s)
}

// nagErrors returns cdk-nag's unsuppressed errors on the stack.
func nagErrors(s *synthesized) []string {
	msgs := assertions.Annotations_FromStack(s.stack.Stack).FindError(jsii.String("*"),
		assertions.Match_StringLikeRegexp(jsii.String("AwsSolutions-.*")))
	var out []string
	for _, m := range *msgs {
		out = append(out, fmt.Sprintf("%s: %v", *m.Id, m.Entry.Data))
	}
	sort.Strings(out)
	return out
}

// ref returns the logical id that v, a {"Ref": id} or {"Fn::GetAtt": [id, attr]}, names.
func ref(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	if r, ok := m["Ref"].(string); ok {
		return r
	}
	if ga, ok := m["Fn::GetAtt"].([]any); ok && len(ga) == 2 {
		return ga[0].(string) + "." + ga[1].(string)
	}
	return ""
}

// render turns an intrinsic value into a string: Ref x as "<x>", GetAtt as
// "<x.Attr>", and Fn::Join joined.
func render(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			var parts []string
			for _, p := range j[1].([]any) {
				parts = append(parts, render(p))
			}
			return strings.Join(parts, j[0].(string))
		}
		if r := ref(x); r != "" {
			return "<" + r + ">"
		}
		if r, ok := x["Ref"].(string); ok {
			return "<" + r + ">"
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// path walks nested maps and slices: path(v, "A", "B", 0, "C").
func path(v any, keys ...any) any {
	for _, k := range keys {
		switch key := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[key]
		case int:
			s, ok := v.([]any)
			if !ok || key >= len(s) {
				return nil
			}
			v = s[key]
		}
	}
	return v
}

// strs returns v as a []string (a single string becomes one element).
func strs(v any) []string {
	switch x := v.(type) {
	case string:
		return []string{x}
	case []any:
		var out []string
		for _, e := range x {
			out = append(out, render(e))
		}
		return out
	case map[string]any:
		return []string{render(x)}
	}
	return nil
}
