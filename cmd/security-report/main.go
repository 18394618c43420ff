// Command security-report checks the synthesized CloudFormation templates
// of the CDK app (infra/cdk.out) with three tools, cdk-nag (the AWS
// Solutions pack, whose CSV reports the synthesis writes into the cloud
// assembly), cfn-lint and checkov, and matches every finding against the
// justification file (infra/lint/findings.json). cdk-nag findings that the
// stack suppresses (infra/nag.go, each with its reason) are justified there.
//
// It prints one table per tool (rule, resource, status, reason) and a
// summary line, and exits 1 if a finding is unjustified or a justification
// matches no finding (stale), 2 if a tool or an input failed.
//
// By default it runs cfn-lint and checkov from the virtualenv -venv
// (`make venv-lint`) and keeps their JSON output in the cloud assembly
// (cfn-lint.json, checkov.json); -cfn-lint-json and -checkov-json read
// such outputs instead of running the tools.
//
// Usage (from the repository root; `make security` synthesizes first):
//
//	go run ./cmd/security-report [-cdk-out infra/cdk.out] [-findings infra/lint/findings.json]
//	    [-venv .venv-lint] [-cfn-lint-json FILE] [-checkov-json FILE]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Options are the command's inputs.
type Options struct {
	// CdkOut is the cloud assembly directory.
	CdkOut string
	// Findings is the justification file.
	Findings string
	// Venv is the virtualenv whose bin/ holds cfn-lint and checkov.
	Venv string
	// CfnLintJSON and CheckovJSON, if set, are captured tool outputs read
	// instead of running the tool.
	CfnLintJSON, CheckovJSON string
}

func main() {
	var o Options
	flag.StringVar(&o.CdkOut, "cdk-out", "infra/cdk.out", "the cloud assembly (`make synth`)")
	flag.StringVar(&o.Findings, "findings", "infra/lint/findings.json", "the justification file")
	flag.StringVar(&o.Venv, "venv", ".venv-lint", "virtualenv with cfn-lint and checkov (`make venv-lint`)")
	flag.StringVar(&o.CfnLintJSON, "cfn-lint-json", "", "read this `cfn-lint --format json` output instead of running cfn-lint")
	flag.StringVar(&o.CheckovJSON, "checkov-json", "", "read this `checkov -o json` output instead of running checkov")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "security-report: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	ok, err := Run(ctx, o, os.Stdout, os.Stderr)
	cancel()
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "security-report:", err)
		os.Exit(2)
	case !ok:
		os.Exit(1)
	}
}

// Run builds the report described by o and writes it to stdout; progress
// goes to stderr. It returns whether every finding is justified and no
// justification is stale; an error means the report could not be made.
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) (bool, error) {
	js, err := LoadJustifications(o.Findings)
	if err != nil {
		return false, err
	}
	a, err := LoadAssembly(o.CdkOut)
	if err != nil {
		return false, err
	}
	templates := a.Templates()
	names := make([]string, len(templates))
	for i, t := range templates {
		names[i] = filepath.Base(t)
	}
	var findings []Finding
	nag, err := a.ReadNagReports()
	if err != nil {
		return false, err
	}
	findings = append(findings, nag...)

	lintOut, err := toolOutput(ctx, o.CfnLintJSON, filepath.Join(a.Dir, "cfn-lint.json"), stderr, cfnLintCommand(o.Venv, templates), anyExit)
	if err != nil {
		return false, fmt.Errorf("cfn-lint: %w", err)
	}
	lint, err := ParseCfnLint(lintOut, a)
	if err != nil {
		return false, err
	}
	findings = append(findings, lint...)

	checkovOut, err := toolOutput(ctx, o.CheckovJSON, filepath.Join(a.Dir, "checkov.json"), stderr, checkovCommand(o.Venv, templates), zeroExit)
	if err != nil {
		return false, fmt.Errorf("checkov: %w", err)
	}
	checkov, err := ParseCheckov(checkovOut, a)
	if err != nil {
		return false, err
	}
	findings = append(findings, checkov...)

	r := Evaluate(findings, js)
	var nagFiles []string
	for _, s := range a.Stacks {
		nagFiles = append(nagFiles, NagReportFile(s.Name))
	}
	r.Sources[ToolCdkNag] = strings.Join(nagFiles, ", ")
	r.Sources[ToolCfnLint] = strings.Join(names, ", ")
	r.Sources[ToolCheckov] = strings.Join(names, ", ")
	if v := checkovVersion(checkovOut); v != "" {
		r.Sources[ToolCheckov] = "checkov " + v + ": " + r.Sources[ToolCheckov]
	}
	if err := r.Write(stdout); err != nil {
		return false, err
	}
	if !r.OK() {
		fmt.Fprintf(stdout, "Fix the UNJUSTIFIED findings in the stack (infra/*.go), or justify each in %s; remove stale justifications.\n", o.Findings)
	}
	return r.OK(), nil
}

// exitPolicy decides whether a tool's exit code, with its output, is a
// failure of the tool (rather than findings).
type exitPolicy func(code int, stdout []byte) bool

// anyExit: cfn-lint's exit code is a bit mask of the levels it found (2
// error, 4 warning, 8 informational); the tool failed only if it printed
// no JSON.
func anyExit(_ int, stdout []byte) bool { return !json.Valid(stdout) }

// zeroExit: the tool runs with --soft-fail, so any other exit code is a
// failure.
func zeroExit(code int, _ []byte) bool { return code != 0 }

// cfnLintCommand is the cfn-lint invocation on templates.
func cfnLintCommand(venv string, templates []string) []string {
	return append([]string{filepath.Join(venv, "bin", "cfn-lint"), "--format", "json", "--"}, templates...)
}

// checkovCommand is the checkov invocation on templates. --skip-download
// keeps checkov off the network (it would fetch guideline links).
func checkovCommand(venv string, templates []string) []string {
	args := []string{filepath.Join(venv, "bin", "checkov"), "--framework", "cloudformation", "--output", "json",
		"--compact", "--quiet", "--soft-fail", "--skip-download"}
	for _, t := range templates {
		args = append(args, "--file", t)
	}
	return args
}

// toolOutput returns the captured output in file captured if set; else it
// runs argv, keeps its stdout in keep, and returns it.
func toolOutput(ctx context.Context, captured, keep string, stderr io.Writer, argv []string, failed exitPolicy) ([]byte, error) {
	if captured != "" {
		return os.ReadFile(captured)
	}
	if _, err := os.Stat(argv[0]); err != nil {
		return nil, fmt.Errorf("%w (run `make venv-lint`)", err)
	}
	fmt.Fprintf(stderr, "security-report: %s\n", strings.Join(argv, " "))
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		return nil, err
	}
	if failed(code, out.Bytes()) {
		return nil, fmt.Errorf("%s exited with %d: %s", filepath.Base(argv[0]), code, tail(errOut.String(), 2000))
	}
	if err := os.WriteFile(keep, out.Bytes(), 0o644); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// checkovVersion is the checkov version that a checkov JSON output names,
// or "".
func checkovVersion(out []byte) string {
	var r struct {
		Summary struct {
			Version string `json:"checkov_version"`
		} `json:"summary"`
	}
	if json.Unmarshal(out, &r) == nil {
		return r.Summary.Version
	}
	var rs []struct {
		Summary struct {
			Version string `json:"checkov_version"`
		} `json:"summary"`
	}
	if json.Unmarshal(out, &rs) == nil && len(rs) > 0 {
		return rs[0].Summary.Version
	}
	return ""
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
