// Command infra is the CDK app of slicework: `cdk synth` and `cdk deploy`
// run it (cdk.json: "go run ."). It builds one stage's stack from the CDK
// context (see ConfigFromContext and README.md), the built-in job kinds
// (their channels get queues), the job table's schema and the schedules
// file, and checks the result with cdk-nag's AWS Solutions rules.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/slicework/slicework/shared/kinds"
	"github.com/slicework/slicework/shared/schedule"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "slicework infra:", err)
		os.Exit(1)
	}
}

// run builds and synthesizes the app; it stops the jsii runtime (and removes
// its temporary files) before main exits.
func run() error {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	if _, err := BuildApp(app); err != nil {
		return err
	}
	app.Synth(nil)
	return nil
}

// BuildApp adds the stage's stack, configured from app's context, to app,
// with its cdk-nag suppressions and the AWS Solutions checks. It does not
// synthesize.
func BuildApp(app awscdk.App) (*SliceworkStack, error) {
	cfg, err := ConfigFromContext(AppContext(app))
	if err != nil {
		return nil, err
	}
	cfg.Account, cfg.Region = EnvironmentFromOS()
	reg, err := kinds.Registry()
	if err != nil {
		return nil, err
	}
	defs, err := schedule.Load(cfg.SchedulesFile)
	if err != nil {
		return nil, err
	}
	s, err := NewSliceworkStack(app, cfg, StackInputs{Registry: reg, Schema: JobTableSchema(), Schedules: defs})
	if err != nil {
		return nil, err
	}
	if cfg.PublicAPI {
		fmt.Fprintln(os.Stderr, "WARNING:", PublicAPIWarning)
	}
	s.AddNagSuppressions()
	ApplyNagChecks(app)
	return s, nil
}
