package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// ApplyNagChecks runs cdk-nag's AWS Solutions rules on every stack of app
// at synthesis: an unsuppressed finding of level error fails `cdk synth`.
// It also writes one report per stack into the cloud assembly
// (AwsSolutions-<stack>-NagReport.csv in cdk.out: rule, resource,
// Compliant/Non-Compliant/Suppressed, the suppression's reason), which
// `make security` (cmd/security-report) reads.
func ApplyNagChecks(app awscdk.App) {
	awscdk.Aspects_Of(app).Add(cdknag.NewAwsSolutionsChecks(&cdknag.NagPackProps{
		Verbose:       jsii.Bool(true),
		Reports:       jsii.Bool(true),
		ReportFormats: &[]cdknag.NagReportFormat{cdknag.NagReportFormat_CSV},
	}), nil)
}

// NagSuppression is one cdk-nag finding accepted on purpose, with why.
type NagSuppression struct {
	// Rule is the cdk-nag rule id ("AwsSolutions-S1").
	Rule string
	// AppliesTo narrows the suppression to these findings of the rule
	// (e.g. "Resource::<Bucket.Arn>/*"); empty: every finding on the
	// resource.
	AppliesTo []string
	// Reason is shown in cdk-nag's report.
	Reason string
}

// NagSuppressions returns the suppressions of s, by construct, for the
// findings that are deliberate. Each has a reason.
func (s *SliceworkStack) NagSuppressions() map[awscdk.IResource][]NagSuppression {
	tableArn := "Resource::<" + s.logicalID(s.Table) + ".Arn>/index/*"
	objects := "Resource::<" + s.logicalID(s.Bucket) + ".Arn>/*"
	out := map[awscdk.IResource][]NagSuppression{
		s.Bucket: {{
			Rule: "AwsSolutions-S1",
			Reason: "Server access logs are not kept: only the stack's own functions write to the bucket, through IAM; " +
				"CloudTrail S3 data events are the audit trail where one is needed, without a second bucket per stage.",
		}},
	}
	for _, name := range FunctionNames {
		f := s.Functions[name]
		sup := NagSuppression{
			Rule:      "AwsSolutions-IAM5",
			AppliesTo: []string{tableArn, objects},
			Reason: "Scoped wildcards only: <table>/index/* is this table's own indexes (the store queries its GSIs), " +
				"and <bucket>/* is every object of this one bucket (job inputs are uploaded under keys users choose). " +
				"No action wildcard is granted.",
		}
		if s.Config.Tracing {
			sup.AppliesTo = append(sup.AppliesTo, "Resource::*")
			sup.Reason += " With tracing on, xray:PutTraceSegments and xray:PutTelemetryRecords take no resource but \"*\"."
		}
		out[f.Role] = append(out[f.Role], sup)
	}
	if s.Config.PublicAPI {
		out[s.API.API] = append(out[s.API.API], NagSuppression{
			Rule:   "AwsSolutions-APIG4",
			Reason: "publicApi=true was set explicitly for a throw-away stage; the stack carries a warning. Protected stages refuse it.",
		})
	}
	return out
}

// AddNagSuppressions records NagSuppressions on their constructs (and their
// children, such as a role's default policy).
func (s *SliceworkStack) AddNagSuppressions() {
	for res, sups := range s.NagSuppressions() {
		var list []*cdknag.NagPackSuppression
		for _, sp := range sups {
			n := &cdknag.NagPackSuppression{Id: jsii.String(sp.Rule), Reason: jsii.String(sp.Reason)}
			if len(sp.AppliesTo) > 0 {
				applies := make([]any, len(sp.AppliesTo))
				for i, a := range sp.AppliesTo {
					applies[i] = a
				}
				n.AppliesTo = &applies
			}
			list = append(list, n)
		}
		cdknag.NagSuppressions_AddResourceSuppressions(res, &list, jsii.Bool(true))
	}
}

// logicalID is the CloudFormation logical id of r's main resource.
func (s *SliceworkStack) logicalID(r awscdk.IResource) string {
	return *s.Stack.GetLogicalId(r.Node().DefaultChild().(awscdk.CfnElement))
}
