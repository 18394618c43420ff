package main

import (
	"bytes"
	"cmp"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
)

// Tool names, as they appear in the justification file and the report.
const (
	ToolCdkNag  = "cdk-nag"
	ToolCfnLint = "cfn-lint"
	ToolCheckov = "checkov"
)

// Tools lists the tools in the order of the report.
var Tools = []string{ToolCdkNag, ToolCfnLint, ToolCheckov}

// MinReasonLength is the shortest reason a justification may give: a
// reason is a sentence a reviewer can check, not "ok" or "false positive".
const MinReasonLength = 40

// Finding is one result of a tool that is not a pass: a cfn-lint match of
// any level, a failed or skipped checkov check, or a cdk-nag rule that was
// not compliant (suppressed in the stack or not).
type Finding struct {
	// Tool is one of Tools.
	Tool string
	// Rule is the tool's rule id ("W3005", "CKV_AWS_21", "AwsSolutions-S1").
	Rule string
	// LogicalID is the CloudFormation logical id of the resource. For a
	// finding outside Resources it is the section and the name
	// ("Outputs/ApiUrl"); for one on the whole template it is "".
	LogicalID string
	// Path is the resource's construct path relative to its stack
	// ("DataBucket/Resource"), "" if the template does not record it.
	Path string
	// Template is the file name of the template the finding is about.
	Template string
	// Message is what the tool says about the finding.
	Message string
	// Suppression is the reason of a suppression recorded in the stack
	// itself (a cdk-nag finding reported as Suppressed); "" otherwise.
	Suppression string
}

// Resource is the finding's resource as the report shows it: the logical
// id, else the construct path, else "(template)".
func (f Finding) Resource() string {
	switch {
	case f.LogicalID != "":
		return f.LogicalID
	case f.Path != "":
		return f.Path
	}
	return "(template)"
}

// Justification is one entry of the justification file: the findings of
// Rule by Tool on the resources that Resources name are accepted, for
// Reason.
type Justification struct {
	// Tool is one of Tools.
	Tool string `json:"tool"`
	// Rule is the tool's rule id, exactly.
	Rule string `json:"rule"`
	// Resources are patterns (path.Match syntax: '*' does not cross '/')
	// matched against a finding's logical id and its stack-relative
	// construct path. Each pattern must match at least one finding, or the
	// entry is stale.
	Resources []string `json:"resources"`
	// Reason is why the finding is acceptable, for a reviewer.
	Reason string `json:"reason"`
}

// JustificationFile is the layout of the justification file.
type JustificationFile struct {
	// About says what the file is, for its readers; it is not interpreted.
	About string `json:"about"`
	// Findings are the accepted findings.
	Findings []Justification `json:"findings"`
}

// ParseJustifications decodes a justification file and checks every entry:
// a known tool, a rule, at least one valid resource pattern, and a reason
// of at least MinReasonLength characters. Unknown fields are errors (a
// misspelt "resources" would otherwise justify nothing silently). Every
// problem is reported.
func ParseJustifications(data []byte) ([]Justification, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f JustificationFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("justification file: %w", err)
	}
	var errs []error
	for i, j := range f.Findings {
		what := fmt.Sprintf("justification %d (%s %s)", i+1, j.Tool, j.Rule)
		if !slices.Contains(Tools, j.Tool) {
			errs = append(errs, fmt.Errorf("%s: tool %q: want one of %v", what, j.Tool, Tools))
		}
		if strings.TrimSpace(j.Rule) == "" {
			errs = append(errs, fmt.Errorf("%s: no rule", what))
		}
		if len(j.Resources) == 0 {
			errs = append(errs, fmt.Errorf("%s: no resources: name the logical ids (or as narrow a pattern as possible)", what))
		}
		for _, p := range j.Resources {
			if _, err := path.Match(p, ""); err != nil || p == "" || p == "*" {
				errs = append(errs, fmt.Errorf("%s: resource pattern %q: empty, '*' or malformed", what, p))
			}
		}
		if n := len(strings.TrimSpace(j.Reason)); n < MinReasonLength {
			errs = append(errs, fmt.Errorf("%s: reason of %d characters: say why the finding is acceptable (at least %d)", what, n, MinReasonLength))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return f.Findings, nil
}

// LoadJustifications reads and checks the justification file at path (see
// ParseJustifications).
func LoadJustifications(path string) ([]Justification, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	js, err := ParseJustifications(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return js, nil
}

// matches reports whether pattern p of a justification matches f's
// logical id or construct path.
func matches(p string, f Finding) bool {
	for _, s := range []string{f.LogicalID, f.Path} {
		if ok, _ := path.Match(p, s); ok && s != "" {
			return true
		}
	}
	return false
}

// Stack is one CloudFormation stack of a cloud assembly.
type Stack struct {
	// ID is the stack's artifact id (its construct id).
	ID string
	// Name is the stack's CloudFormation name.
	Name string
	// TemplateFile is the template's file name, relative to the assembly.
	TemplateFile string
	// Paths maps the template's logical ids to their construct paths
	// (aws:cdk:path metadata), relative to the stack.
	Paths map[string]string
	// byPath maps full construct paths to logical ids.
	byPath map[string]string
}

// relPath strips the stack's construct id from a full construct path.
func relPath(full string) string {
	if _, rest, ok := strings.Cut(full, "/"); ok {
		return rest
	}
	return full
}

// Assembly is the part of a cloud assembly (cdk.out) that the report
// needs: its stacks and their templates.
type Assembly struct {
	// Dir is the assembly directory.
	Dir string
	// Stacks are the assembly's stacks, by artifact id.
	Stacks []*Stack
}

// LoadAssembly reads the manifest of the cloud assembly in dir and the
// template of each of its stacks. Only the manifest's stacks count: files
// of an earlier synthesis (another stage) are ignored.
func LoadAssembly(dir string) (*Assembly, error) {
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("cloud assembly: %w (run `make synth`)", err)
	}
	var m struct {
		Artifacts map[string]struct {
			Type       string `json:"type"`
			Properties struct {
				TemplateFile string `json:"templateFile"`
				StackName    string `json:"stackName"`
			} `json:"properties"`
		} `json:"artifacts"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("cloud assembly %s: manifest.json: %w", dir, err)
	}
	a := &Assembly{Dir: dir}
	for id, art := range m.Artifacts {
		if art.Type != "aws:cloudformation:stack" {
			continue
		}
		s := &Stack{ID: id, Name: art.Properties.StackName, TemplateFile: art.Properties.TemplateFile}
		if s.Name == "" {
			s.Name = id
		}
		if err := s.readTemplate(filepath.Join(dir, s.TemplateFile)); err != nil {
			return nil, fmt.Errorf("cloud assembly %s: stack %s: %w", dir, id, err)
		}
		a.Stacks = append(a.Stacks, s)
	}
	if len(a.Stacks) == 0 {
		return nil, fmt.Errorf("cloud assembly %s: no stack in manifest.json (run `make synth`)", dir)
	}
	slices.SortFunc(a.Stacks, func(x, y *Stack) int { return strings.Compare(x.ID, y.ID) })
	return a, nil
}

func (s *Stack) readTemplate(file string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var t struct {
		Resources map[string]struct {
			Metadata map[string]any `json:"Metadata"`
		} `json:"Resources"`
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	s.Paths, s.byPath = map[string]string{}, map[string]string{}
	for id, r := range t.Resources {
		if p, ok := r.Metadata["aws:cdk:path"].(string); ok {
			s.Paths[id] = relPath(p)
			s.byPath[p] = id
		}
	}
	return nil
}

// Templates returns the path of every stack's template.
func (a *Assembly) Templates() []string {
	var out []string
	for _, s := range a.Stacks {
		out = append(out, filepath.Join(a.Dir, s.TemplateFile))
	}
	return out
}

// stackOf returns the stack whose template has file's base name, or nil.
func (a *Assembly) stackOf(file string) *Stack {
	base := filepath.Base(file)
	for _, s := range a.Stacks {
		if filepath.Base(s.TemplateFile) == base {
			return s
		}
	}
	return nil
}

// finding fills in a finding's template and construct path from its stack.
func (a *Assembly) finding(tool, rule, file, logicalID, msg string) Finding {
	f := Finding{Tool: tool, Rule: rule, LogicalID: logicalID, Template: filepath.Base(file), Message: msg}
	if s := a.stackOf(file); s != nil {
		f.Path = s.Paths[logicalID]
		f.Template = s.TemplateFile
	}
	return f
}

// NagReportFile is the name of cdk-nag's CSV report of the AWS Solutions
// pack for a stack.
func NagReportFile(stackName string) string {
	return "AwsSolutions-" + stackName + "-NagReport.csv"
}

// ReadNagReports parses the cdk-nag report of every stack of a (see
// ParseNagReport). A stack without a report is an error: cdk-nag's reports
// are off, or the assembly was not synthesized by this app.
func (a *Assembly) ReadNagReports() ([]Finding, error) {
	var out []Finding
	for _, s := range a.Stacks {
		file := filepath.Join(a.Dir, NagReportFile(s.Name))
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("cdk-nag report of stack %s: %w (are cdk-nag's reports on? see infra/nag.go)", s.Name, err)
		}
		fs, err := ParseNagReport(data, s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, fs...)
	}
	return out, nil
}

// nagHeader is the header line of cdk-nag's CSV report.
var nagHeader = []string{"Rule ID", "Resource ID", "Compliance", "Exception Reason", "Rule Level", "Rule Info"}

// ParseNagReport parses one cdk-nag CSV report of stack s. Compliant rows
// are passes. Suppressed rows are findings justified in the stack, with the
// suppression's reason. Non-Compliant rows and rules that failed to
// evaluate (UNKNOWN) are findings that need a justification.
func ParseNagReport(data []byte, s *Stack) ([]Finding, error) {
	r := csv.NewReader(bytes.NewReader(data))
	r.FieldsPerRecord = len(nagHeader)
	rows, err := r.ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || !slices.Equal(rows[0], nagHeader) {
		return nil, fmt.Errorf("not a cdk-nag CSV report: want the header %q", strings.Join(nagHeader, ","))
	}
	var out []Finding
	for _, row := range rows[1:] {
		rule, resource, compliance, reason, level, info := row[0], row[1], row[2], row[3], row[4], row[5]
		f := Finding{Tool: ToolCdkNag, Rule: rule, LogicalID: s.byPath[resource], Path: relPath(resource), Template: s.TemplateFile}
		switch compliance {
		case "Compliant", "N/A":
			continue
		case "Suppressed":
			f.Suppression = reason
			f.Message = info
		case "Non-Compliant":
			f.Message = level + ": " + info
		default:
			f.Message = fmt.Sprintf("%s (%s): %s", compliance, level, info)
		}
		out = append(out, f)
	}
	return out, nil
}

// ParseCfnLint parses the JSON output of `cfn-lint --format json` on the
// templates of a: every match, whatever its level, is a finding.
func ParseCfnLint(data []byte, a *Assembly) ([]Finding, error) {
	var matches []struct {
		Filename string `json:"Filename"`
		Level    string `json:"Level"`
		Message  string `json:"Message"`
		Rule     struct {
			ID string `json:"Id"`
		} `json:"Rule"`
		Location struct {
			Path []any `json:"Path"`
		} `json:"Location"`
	}
	if err := json.Unmarshal(data, &matches); err != nil {
		return nil, fmt.Errorf("cfn-lint output: %w", err)
	}
	out := make([]Finding, 0, len(matches))
	for _, m := range matches {
		if m.Rule.ID == "" {
			return nil, fmt.Errorf("cfn-lint output: a match without a rule id: %q", m.Message)
		}
		var id string
		if p := m.Location.Path; len(p) >= 2 {
			section, _ := p[0].(string)
			name := fmt.Sprint(p[1])
			if section == "Resources" {
				id = name
			} else {
				id = section + "/" + name
			}
		}
		out = append(out, a.finding(ToolCfnLint, m.Rule.ID, m.Filename, id, m.Level+": "+m.Message))
	}
	return out, nil
}

// checkovCheck is one check result in checkov's JSON output.
type checkovCheck struct {
	CheckID        string `json:"check_id"`
	CheckName      string `json:"check_name"`
	Resource       string `json:"resource"`
	FilePath       string `json:"file_path"`
	SuppressReason string `json:"suppress_comment"`
}

// checkovReport is checkov's JSON output for one framework.
type checkovReport struct {
	CheckType string `json:"check_type"`
	Results   struct {
		Failed  []checkovCheck `json:"failed_checks"`
		Skipped []checkovCheck `json:"skipped_checks"`
	} `json:"results"`
	Summary struct {
		Passed        int    `json:"passed"`
		Failed        int    `json:"failed"`
		ParsingErrors int    `json:"parsing_errors"`
		ResourceCount int    `json:"resource_count"`
		Version       string `json:"checkov_version"`
	} `json:"summary"`
}

// ParseCheckov parses the JSON output of `checkov -o json` (one report
// object, or a list of them when several frameworks ran) on the templates
// of a. Failed checks are findings; so are checks skipped by a
// `checkov:skip` in the template, because the justification file is the
// one place where findings are accepted. A template checkov could not
// parse, or an output that checked no resource, is an error.
func ParseCheckov(data []byte, a *Assembly) ([]Finding, error) {
	data = bytes.TrimSpace(data)
	var reports []checkovReport
	if len(data) > 0 && data[0] == '[' {
		if err := json.Unmarshal(data, &reports); err != nil {
			return nil, fmt.Errorf("checkov output: %w", err)
		}
	} else {
		var r checkovReport
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("checkov output: %w", err)
		}
		reports = []checkovReport{r}
	}
	var out []Finding
	resources := 0
	for _, r := range reports {
		if r.Summary.ParsingErrors > 0 {
			return nil, fmt.Errorf("checkov output: %d %s file(s) could not be parsed", r.Summary.ParsingErrors, r.CheckType)
		}
		resources += r.Summary.ResourceCount
		add := func(c checkovCheck, msg string) {
			// "AWS::S3::Bucket.DataBucketE3889A50": logical ids have no dot.
			id := c.Resource[strings.LastIndex(c.Resource, ".")+1:]
			out = append(out, a.finding(ToolCheckov, c.CheckID, c.FilePath, id, msg))
		}
		for _, c := range r.Results.Failed {
			add(c, c.CheckName)
		}
		for _, c := range r.Results.Skipped {
			add(c, fmt.Sprintf("skipped in the template (%q): %s", c.SuppressReason, c.CheckName))
		}
	}
	if resources == 0 {
		return nil, errors.New("checkov output: no resource was checked (wrong file, or not a CloudFormation template?)")
	}
	return out, nil
}

// Status is a finding's verdict.
type Status string

// The statuses of a finding.
const (
	// Justified: an entry of the justification file, or a cdk-nag
	// suppression in the stack, accepts the finding.
	Justified Status = "justified"
	// Unjustified: nothing accepts the finding; the report fails.
	Unjustified Status = "UNJUSTIFIED"
)

// Row is one finding with its verdict.
type Row struct {
	Finding
	// Status is the verdict.
	Status Status
	// Reason is the justification's reason (prefixed "in the stack: " for
	// a cdk-nag suppression), or for an unjustified finding the tool's
	// message.
	Reason string
}

// StaleJustification is a resource pattern of a justification entry that
// matched no finding: the finding was fixed, or the pattern is wrong.
type StaleJustification struct {
	// Entry is the entry's 1-based position in the file.
	Entry int
	Justification
	// Pattern is the pattern that matched nothing.
	Pattern string
}

// Report is the verdict on every finding of every tool.
type Report struct {
	// Rows are the findings with their verdicts, by tool (Tools order),
	// rule and resource.
	Rows []Row
	// Stale are the justification patterns that matched nothing.
	Stale []StaleJustification
	// Sources describes, by tool, what was read ("slicework-dev.template.json").
	Sources map[string]string
}

// Evaluate matches every finding against the justifications: a cdk-nag
// finding suppressed in the stack is justified by its suppression and
// needs (and matches) no entry; any other finding is justified by the
// first entry of its tool and rule with a resource pattern that matches
// it. Every pattern of every entry must match a finding, or it is stale.
func Evaluate(findings []Finding, js []Justification) *Report {
	used := make([][]bool, len(js))
	for i, j := range js {
		used[i] = make([]bool, len(j.Resources))
	}
	r := &Report{Sources: map[string]string{}}
	for _, f := range findings {
		row := Row{Finding: f, Status: Unjustified, Reason: f.Message}
		if f.Suppression != "" {
			row.Status, row.Reason = Justified, "in the stack: "+f.Suppression
			r.Rows = append(r.Rows, row)
			continue
		}
		for i, j := range js {
			if j.Tool != f.Tool || j.Rule != f.Rule {
				continue
			}
			for k, p := range j.Resources {
				if matches(p, f) {
					used[i][k] = true
					if row.Status == Unjustified {
						row.Status, row.Reason = Justified, j.Reason
					}
				}
			}
		}
		r.Rows = append(r.Rows, row)
	}
	for i, j := range js {
		for k, p := range j.Resources {
			if !used[i][k] {
				r.Stale = append(r.Stale, StaleJustification{Entry: i + 1, Justification: j, Pattern: p})
			}
		}
	}
	slices.SortStableFunc(r.Rows, func(a, b Row) int {
		if c := slices.Index(Tools, a.Tool) - slices.Index(Tools, b.Tool); c != 0 {
			return c
		}
		if c := compareNatural(a.Rule, b.Rule); c != 0 {
			return c
		}
		return strings.Compare(a.Resource(), b.Resource())
	})
	return r
}

// compareNatural compares a and b with runs of digits taken as numbers, so
// that CKV_AWS_18 sorts before CKV_AWS_115.
func compareNatural(a, b string) int {
	for a != "" && b != "" {
		da, db := digitRun(a), digitRun(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if c := cmp.Compare(len(na), len(nb)); c != 0 {
				return c
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return cmp.Compare(a[0], b[0])
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

// digitRun is the length of the run of ASCII digits that s starts with.
func digitRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// Counts returns how many findings of tool ("" for all tools) there are,
// and how many of them are unjustified.
func (r *Report) Counts(tool string) (total, unjustified int) {
	for _, row := range r.Rows {
		if tool == "" || row.Tool == tool {
			total++
			if row.Status == Unjustified {
				unjustified++
			}
		}
	}
	return total, unjustified
}

// OK reports whether every finding is justified and no justification is
// stale.
func (r *Report) OK() bool {
	_, u := r.Counts("")
	return u == 0 && len(r.Stale) == 0
}

// reasonWidth is where a justified finding's reason is cut in the table
// (the file has it whole). An unjustified finding's message is not cut.
const reasonWidth = 100

// Write prints one table per tool (rule, resource, status, reason), the
// stale justifications if any, and a summary line.
func (r *Report) Write(w io.Writer) error {
	var b bytes.Buffer
	for _, tool := range Tools {
		total, unjustified := r.Counts(tool)
		fmt.Fprintf(&b, "== %s: %d findings, %d unjustified", tool, total, unjustified)
		if src := r.Sources[tool]; src != "" {
			fmt.Fprintf(&b, " (%s)", src)
		}
		fmt.Fprintln(&b)
		if total == 0 {
			fmt.Fprintln(&b, "   none")
			fmt.Fprintln(&b)
			continue
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "   RULE\tRESOURCE\tSTATUS\tREASON")
		for _, row := range r.Rows {
			if row.Tool != tool {
				continue
			}
			reason := oneLine(row.Reason)
			if row.Status == Justified {
				reason = cut(reason, reasonWidth)
			}
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\n", row.Rule, row.Resource(), row.Status, reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintln(&b)
	}
	if len(r.Stale) > 0 {
		fmt.Fprintf(&b, "== STALE justifications (their pattern matches no finding: remove or correct them): %d\n", len(r.Stale))
		for _, s := range r.Stale {
			fmt.Fprintf(&b, "   entry %d: %s %s %q\n", s.Entry, s.Tool, s.Rule, s.Pattern)
		}
		fmt.Fprintln(&b)
	}
	total, unjustified := r.Counts("")
	var parts []string
	for _, tool := range Tools {
		n, _ := r.Counts(tool)
		parts = append(parts, fmt.Sprintf("%s %d", tool, n))
	}
	verdict := "OK"
	if !r.OK() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "security: %s: %d findings (%s): %d justified, %d unjustified; %d stale justifications\n",
		verdict, total, strings.Join(parts, ", "), total-unjustified, unjustified, len(r.Stale))
	_, err := w.Write(b.Bytes())
	return err
}

// oneLine joins the lines of s with spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// cut shortens s to n runes, marking the cut with "...".
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-3]) + "..."
}
