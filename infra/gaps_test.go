package main

import (
	"path/filepath"
	"testing"
)

// The default stack has no conditions; for an emulator without metric math
// alarms, the chunk failure alarm stays in the template under a false
// condition and leaves the dashboard, and nothing else changes; a Lambda
// architecture of x86_64 reaches every function.
func TestEmulatorGapsAndArchitecture(t *testing.T) {
	def := theDefaultStack(t)
	for id, r := range def.resources {
		if r.Condition != "" {
			t.Errorf("default stack: %s has condition %s", id, r.Condition)
		}
	}

	app := newTestApp(t, filepath.Join(testRoot, "cdk.out.gaps"), map[string]any{
		"buildDir": testBuildDir, "emulatorGaps": GapMetricMathAlarm, "architecture": ArchX8664,
	})
	st, err := BuildApp(app)
	if err != nil {
		t.Fatal(err)
	}
	s := synthesize(t, st)
	alarm := s.logicalID(st.Monitoring.ChunkFailureAlarm)
	for id, r := range s.resources {
		want := ""
		if id == alarm {
			want = MetricMathCondition
		}
		if r.Condition != want {
			t.Errorf("%s (%s): condition %q, want %q", id, r.Type, r.Condition, want)
		}
	}
	if _, ok := s.resources[alarm].Properties["Metrics"]; !ok {
		t.Errorf("alarm %s lost its metric math", alarm)
	}
	if len(s.resources) != len(def.resources) {
		t.Errorf("%d resources, want %d as in the default stack", len(s.resources), len(def.resources))
	}
	for id, r := range s.ofType("AWS::CloudWatch::Dashboard") {
		if refersTo(r.Properties, alarm) {
			t.Errorf("dashboard %s refers to %s, which an emulator with the gap does not create", id, alarm)
		}
	}
	for id, r := range s.ofType("AWS::Lambda::Function") {
		if a := r.Properties["Architectures"].([]any); len(a) != 1 || a[0] != ArchX8664 {
			t.Errorf("function %s: architectures %v, want [%s]", id, a, ArchX8664)
		}
	}
}

// refersTo reports whether v holds a Ref or Fn::GetAtt of logical id id.
func refersTo(v any, id string) bool {
	switch x := v.(type) {
	case map[string]any:
		if x["Ref"] == id {
			return true
		}
		if ga, ok := x["Fn::GetAtt"].([]any); ok && len(ga) > 0 && ga[0] == id {
			return true
		}
		for _, e := range x {
			if refersTo(e, id) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if refersTo(e, id) {
				return true
			}
		}
	}
	return false
}
