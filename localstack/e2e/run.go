package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudformation"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/blob/s3blob"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/keycount"
)

type options struct {
	stack, outputs, template, emulator string
	records, chunks                    int64
	timeout                            time.Duration
}

// stackOutputs are the outputs of the deployed stack (infra/stack.go).
type stackOutputs struct {
	APIURL       string `json:"ApiUrl"`
	TableName    string `json:"TableName"`
	BucketName   string `json:"BucketName"`
	Queues       string `json:"Queues"`
	EventBusName string `json:"EventBusName"`
}

func readOutputs(path, stack string) (stackOutputs, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return stackOutputs{}, fmt.Errorf("stack outputs: %w (run localstack/local.sh deploy)", err)
	}
	var all map[string]stackOutputs
	if err := json.Unmarshal(data, &all); err != nil {
		return stackOutputs{}, fmt.Errorf("stack outputs %s: %w", path, err)
	}
	out, ok := all[stack]
	if !ok || out.APIURL == "" || out.BucketName == "" {
		return stackOutputs{}, fmt.Errorf("stack outputs %s: no ApiUrl and BucketName of stack %s", path, stack)
	}
	return out, nil
}

func step(format string, a ...any) { fmt.Printf("e2e: "+format+"\n", a...) }

func run(ctx context.Context, o options) error {
	cfg, err := awsconfig.Load(ctx)
	if err != nil {
		return err
	}
	if cfg.BaseEndpoint == nil || *cfg.BaseEndpoint == "" {
		return fmt.Errorf("AWS_ENDPOINT_URL is not set: e2e runs only against an emulator")
	}
	out, err := readOutputs(o.outputs, o.stack)
	if err != nil {
		return err
	}
	res, err := newResources(ctx, cloudformation.NewFromConfig(cfg), o.stack)
	if err != nil {
		return err
	}
	step("stack %s on %s: API %s, bucket %s, %d resources", o.stack, o.emulator, out.APIURL, out.BucketName, len(res.physical))

	step("[1/7] stack parts the emulator's CloudFormation could not create")
	if o.template != "" {
		if err := createGaps(ctx, cfg, o, res); err != nil {
			return err
		}
	}

	api, err := newAPIClient(cfg, out.APIURL, *cfg.BaseEndpoint)
	if err != nil {
		return err
	}
	step("[2/7] API: unsigned requests are refused")
	if code, _, err := api.do(ctx, http.MethodGet, "/kinds", nil, false); err != nil {
		return err
	} else if code != http.StatusForbidden && code != http.StatusUnauthorized {
		return fmt.Errorf("GET /kinds without a signature: status %d, want 401 or 403 (the API requires IAM auth)", code)
	}

	if out.EventBusName == "" {
		return fmt.Errorf("stack outputs: no EventBusName")
	}
	lis, err := newListener(ctx, cfg, out.EventBusName, o.stack)
	if err != nil {
		return err
	}
	defer lis.close(context.WithoutCancel(ctx))

	step("[3/7] sample job (a): keycount over a %d-record corpus in %d chunks", o.records, o.chunks)
	sample, err := sampleJob(ctx, cfg, o, out, api)
	if err != nil {
		return err
	}

	step("[4/7] a dependency chain: A, then B after A, then C after B")
	chain, err := dependencyChain(ctx, api, o.timeout)
	if err != nil {
		return err
	}

	step("[5/7] completion events on the stack's EventBridge bus %s", out.EventBusName)
	if err := checkEvents(ctx, lis, append([]string{sample}, chain...)); err != nil {
		return err
	}

	step("[6/7] REPLACE fan-out: an event, its subscriptions, their notifications")
	if err := replaceFanout(ctx, api, o.timeout); err != nil {
		return err
	}

	step("[7/7] a scheduled rule fires (twice for one tick)")
	return fireSchedule(ctx, cfg, res, api, o.timeout)
}

// sampleJob runs sample job (a) through the deployed API and checks it.
// It returns the job id.
func sampleJob(ctx context.Context, cfg aws.Config, o options, out stackOutputs, api *apiClient) (string, error) {
	var corpus bytes.Buffer
	want, err := keycount.GenerateCorpus(&corpus, o.records, 1)
	if err != nil {
		return "", err
	}
	size := int64(corpus.Len())
	chunkBytes := (size + o.chunks - 1) / o.chunks
	wantChunks := (size + chunkBytes - 1) / chunkBytes
	blobs := s3blob.New(awsconfig.S3(cfg), out.BucketName)
	key := fmt.Sprintf("inputs/e2e-corpus-%d.ndjson", o.records)
	if err := blobs.Put(ctx, key, &corpus); err != nil {
		return "", fmt.Errorf("upload corpus: %w", err)
	}
	step("uploaded s3://%s/%s (%d bytes)", out.BucketName, key, size)

	j, err := api.submit(ctx, map[string]any{
		"kind":       keycount.Kind,
		"input":      job.Input{Type: job.InputLines, Key: key, Format: job.FormatNDJSON},
		"chunk_size": chunkBytes,
		"tags":       []string{"e2e"},
	})
	if err != nil {
		return "", err
	}
	step("submitted job %s through POST /jobs", j.ID)
	j, err = api.wait(ctx, j.ID, o.timeout)
	if err != nil {
		return "", err
	}
	c := j.Counters
	if j.State != job.StateSucceeded {
		return "", fmt.Errorf("job %s ended %s: %s (counters %+v)", j.ID, j.State, j.Error, c)
	}
	if !c.Sliced || c.ChunksTotal != wantChunks || c.ChunksDone != wantChunks || c.ChunksFailed != 0 ||
		c.ItemsDone != o.records || c.ItemsFailed != 0 {
		return "", fmt.Errorf("job %s counters %+v: want %d chunks done, 0 failed, %d items done", j.ID, c, wantChunks, o.records)
	}
	step("counts exact: %d of %d chunks done, %d items, %d retries", c.ChunksDone, c.ChunksTotal, c.ItemsDone, c.Retries)

	rc, err := blobs.Get(ctx, j.Result)
	if err != nil {
		return "", fmt.Errorf("result object %s: %w", j.Result, err)
	}
	defer rc.Close()
	var res keycount.Result
	if err := json.NewDecoder(rc).Decode(&res); err != nil {
		return "", fmt.Errorf("result object %s: %w", j.Result, err)
	}
	if res.Records != o.records || len(res.Keys) != len(want) {
		return "", fmt.Errorf("result %s: %d records and %d keys, want %d and %d", j.Result, res.Records, len(res.Keys), o.records, len(want))
	}
	for _, k := range res.Keys {
		w := want[k.Key]
		if k.Count != w.Count || fmt.Sprintf("%.2f", k.Sum) != fmt.Sprintf("%.2f", w.Sum) {
			return "", fmt.Errorf("result %s: key %s: count %d sum %.2f, want %d %.2f", j.Result, k.Key, k.Count, k.Sum, w.Count, w.Sum)
		}
	}
	step("result s3://%s/%s matches the corpus: %d records, %d keys, every count and sum", out.BucketName, j.Result, res.Records, len(res.Keys))
	return j.ID, nil
}

// checkEvents checks that each of ids published exactly one completion
// event, of its terminal state, that reached a listener on the bus.
func checkEvents(ctx context.Context, lis *listener, ids []string) error {
	got, err := lis.collect(ctx, ids, time.Minute)
	if err != nil {
		return err
	}
	for _, id := range ids {
		evs := got[id]
		if len(evs) != 1 || evs[0].State != job.StateSucceeded || evs[0].ID != id+":"+string(job.StateSucceeded) {
			return fmt.Errorf("job %s: completion events %+v, want exactly one of state succeeded", id, evs)
		}
	}
	step("one completion event per job for %d jobs, each with its final counters", len(ids))
	return nil
}
