// Command e2e checks a slicework stack deployed to a local AWS-API emulator
// (MiniStack or LocalStack) end to end, through the deployed endpoints only:
//
//  1. creates, through the service's API, each stack part that the
//     emulator's CloudFormation cannot create (the template keeps it under a
//     false condition; see localstack/README.md);
//  2. uploads sample job (a)'s corpus to the deployed bucket and submits the
//     job through the deployed HTTP API, signed with SigV4;
//  3. lets the emulator run the Lambda bootstraps through the SQS event
//     source mappings, waits for the job to finish, and checks exact counts
//     and the result object;
//  4. runs a dependency chain (A, B after A, C after B) and an event
//     fan-out by REPLACE (firedevent → processsubscription →
//     processnotification), checking order, edges, lineage and counts;
//  5. fires a scheduled rule: the rule's target and input transformer
//     applied to a scheduled event, as EventBridge does, twice for the same
//     tick, and checks that the scheduler submitted exactly one job.
//
// localstack/local.sh e2e (make local-e2e) deploys the stack and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.stack, "stack", "slicework-local", "CloudFormation stack name")
	flag.StringVar(&o.outputs, "outputs", ".local/outputs.json", "cdk deploy --outputs-file of the stack")
	flag.StringVar(&o.template, "template", "", "synthesized template of the stack (for the emulator's gaps)")
	flag.StringVar(&o.emulator, "emulator", "ministack", "emulator that runs the stack: ministack or localstack")
	flag.Int64Var(&o.records, "records", 20_000, "records in the sample corpus")
	flag.Int64Var(&o.chunks, "chunks", 8, "chunks to cut the corpus into")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long to wait for each job")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL:", err)
		var code exitError
		if errors.As(err, &code) {
			os.Exit(int(code))
		}
		os.Exit(1)
	}
	fmt.Println("e2e: PASS")
}

type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit %d", int(e)) }
