package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/slicework/slicework/shared/schedule"
	"github.com/slicework/slicework/shared/store/dynamostore"
)

func mapContext(m map[string]any) func(string) any {
	return func(k string) any { return m[k] }
}

func TestConfigFromContext(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ctx   map[string]any
		check func(t *testing.T, c Config)
	}{
		{"defaults", nil, func(t *testing.T, c Config) {
			if c.Stage != "dev" || c.Protect || c.BuildDir != filepath.Join("..", "build") || c.MaxReceiveCount != 20 ||
				c.PublicAPI || c.JWT != nil || c.Tracing || c.StackName() != "slicework-dev" || c.MetricNamespace() != "Slicework/dev" {
				t.Errorf("defaults: %+v", c)
			}
			if c.Visibility(FnWorker) != 18*time.Minute || c.Visibility(FnSlicer) != 30*time.Minute {
				t.Errorf("visibility: worker %s, slicer %s", c.Visibility(FnWorker), c.Visibility(FnSlicer))
			}
		}},
		{"prod protects", map[string]any{"stage": "prod"}, func(t *testing.T, c Config) {
			if !c.Protect || c.StackName() != "slicework-prod" {
				t.Errorf("prod: protect %v, stack %s", c.Protect, c.StackName())
			}
		}},
		{"strings from -c", map[string]any{
			"stage": "alice", "protect": "true", "architecture": "x86_64", "maxReceiveCount": "50", "tracing": "true", "apiRateLimit": "12.5",
			"workerTimeoutSeconds": "600", "workerMemoryMB": "2048", "jwtIssuer": "https://id.example.com", "jwtAudience": "a, b,",
			"channels": `{"default": {"maxConcurrency": 40, "batchWindowSeconds": 0}}`, "sliceQueue": `{"batchSize": 1}`,
		}, func(t *testing.T, c Config) {
			if c.Stage != "alice" || !c.Protect || c.Architecture != ArchX8664 || c.MaxReceiveCount != 50 || !c.Tracing || c.APIRateLimit != 12.5 {
				t.Errorf("scalars: %+v", c)
			}
			if w := c.Functions[FnWorker]; w.Timeout != 10*time.Minute || w.MemoryMB != 2048 {
				t.Errorf("worker: %+v", w)
			}
			if c.JWT == nil || c.JWT.Issuer != "https://id.example.com" || strings.Join(c.JWT.Audience, "|") != "a|b" {
				t.Errorf("jwt: %+v", c.JWT)
			}
			if d := c.Channel("default"); d.MaxConcurrency != 40 || d.BatchSize != 10 || d.BatchWindow != 0 {
				t.Errorf("channel default: %+v", d)
			}
			if c.Slice.BatchSize != 1 || c.Slice.MaxConcurrency != 5 {
				t.Errorf("slice: %+v", c.Slice)
			}
		}},
		{"JSON values from cdk.json", map[string]any{
			"protect": false, "maxReceiveCount": float64(7), "jobDataDays": float64(90), "publicApi": true,
			"channels": map[string]any{"bulk": map[string]any{"maxConcurrency": float64(3)}},
		}, func(t *testing.T, c Config) {
			if c.MaxReceiveCount != 7 || c.JobDataDays != 90 || !c.PublicAPI || c.Channel("bulk").MaxConcurrency != 3 {
				t.Errorf("json: %+v", c)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ConfigFromContext(mapContext(tc.ctx))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestConfigFromContextErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  map[string]any
		want string
	}{
		{"type errors", map[string]any{"stage": 3.0, "tracing": "maybe", "maxReceiveCount": "many", "apiRateLimit": true,
			"channels": `{"default": {"maxConcurency": 4}}`},
			`config: context stage: 3 is not a string
context maxReceiveCount: many is not a whole number
context tracing: maybe is not true or false
context apiRateLimit: true is not a number
context channels.default: want {"maxConcurrency", "batchSize", "batchWindowSeconds"}: json: unknown field "maxConcurency"`},
		{"channels not an object", map[string]any{"channels": `[1]`},
			`config: context channels: want a JSON object of channel name to settings: json: cannot unmarshal array into Go value of type map[string]json.RawMessage`},
		{"bad values", map[string]any{
			"stage": "Prod_1", "architecture": "amd64", "maxReceiveCount": "5", "jobDataDays": "0", "logRetentionDays": "10", "logLevel": "loud",
			"apiTimeoutSeconds": "60", "workerTimeoutSeconds": "0", "slicerMemoryMB": "64",
			"sliceQueue": `{"maxConcurrency": 1, "batchSize": 11, "batchWindowSeconds": 301}`,
			"jwtIssuer":  "http://id", "publicApi": "true", "oldestMessageAlarmSeconds": "30", "chunkFailureAlarmPct": "0",
			"alarmEmail": "ops", "apiBurstLimit": "0",
		}, `config: stage "Prod_1": want 1-20 characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'
architecture "amd64": want arm64 or x86_64
function api: timeout 1m0s: want whole seconds from 1s to 30s
function slicer: memory 64 MB: want 128-10240
function worker: timeout 0s: want whole seconds from 1s to 15m0s
slice queue: maxConcurrency 1: want 2-1000
slice queue: batchSize 11: want 1-10
slice queue: batch window 5m1s: want whole seconds from 0 to 300
maxReceiveCount 5: want 6-1000, above the engine's default attempts, so that the engine and not SQS decides when a chunk fails
jobDataDays 0: want at least 1
logRetentionDays 10: want one of [1 3 5 7 14 30 60 90 120 150 180 365 400 545 731 1096 1827 2192 2557 2922 3288 3653]
logLevel "loud": want debug, info, warn or error
jwtIssuer "http://id": want an https:// URL
jwtAudience: want at least one audience with a JWT issuer
publicApi and jwtIssuer: choose one
apiRateLimit 50, apiBurstLimit 0: want both above 0
oldestMessageAlarmSeconds 30: want at least 60
chunkFailureAlarmPct 0: want above 0 and at most 100
alarmEmail "ops": not an e-mail address`},
		{"public prod", map[string]any{"stage": "prod", "publicApi": "true"}, `config: publicApi on a protected stage (prod): refused`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ConfigFromContext(mapContext(tc.ctx))
			if err == nil || err.Error() != tc.want {
				t.Errorf("error\n got: %v\nwant: %s", err, tc.want)
			}
		})
	}
}

func TestStageNames(t *testing.T) {
	for stage, ok := range map[string]bool{"dev": true, "d": true, "pr-123": true, "prod": true, "a234567890123456789b": true,
		"": false, "Dev": false, "1dev": false, "dev-": false, "a2345678901234567890x": false, "dev_1": false} {
		c := DefaultConfig(stage)
		if err := c.Validate(); (err == nil) != ok {
			t.Errorf("stage %q: Validate() = %v, want ok=%v", stage, err, ok)
		}
	}
}

func TestStackInputErrors(t *testing.T) {
	reg := testRegistry(t)
	good := testSchedules()
	for _, tc := range []struct {
		name   string
		mutate func(*Config, *StackInputs)
		want   []string
	}{
		{"no build", func(c *Config, _ *StackInputs) { c.BuildDir = t.TempDir() }, []string{
			"function api: no ", "run `make build` first", "function worker:", "function scheduler:", "function slicer:"}},
		{"unknown kind and channel", func(_ *Config, in *StackInputs) {
			in.Schedules = append(in.Schedules, good[0])
			in.Schedules[len(in.Schedules)-1].Name, in.Schedules[len(in.Schedules)-1].Kind = "x", "nope"
			in.Schedules = append(in.Schedules, good[0])
			in.Schedules[len(in.Schedules)-1].Name, in.Schedules[len(in.Schedules)-1].Channel = "y", "fast"
		}, []string{`schedule "x": kind "nope" is not registered`, `schedule "y": channel "fast" has no queue (channels: [bulk default])`}},
		{"unknown channel settings", func(c *Config, _ *StackInputs) { c.Channels["fast"] = c.DefaultChannel },
			[]string{`context channels: "fast" is not a channel of any kind`}},
		{"schedule too large", func(_ *Config, in *StackInputs) {
			d := good[0]
			d.Description = strings.Repeat("x", 9000)
			in.Schedules = append(in.Schedules, d)
		}, []string{`schedule "nightly": its event is`, "above EventBridge's 8192-byte input template limit"}},
		{"bad schema", func(_ *Config, in *StackInputs) {
			in.Schema.Indexes = append(in.Schema.Indexes, IndexSchema{Name: dynamostore.IndexByKind, PartitionKey: KeyAttribute{Name: "x", Type: "Q"}, Projection: "SOME"})
		}, []string{`index "` + dynamostore.IndexByKind + `": empty or duplicate name`, `index ` + dynamostore.IndexByKind + ` partition key x: type "Q": want S, N or B`, `projection "SOME"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig("dev")
			cfg.BuildDir = testBuildDir
			cfg.Channels = map[string]ChannelSettings{}
			in := StackInputs{Registry: reg, Schema: JobTableSchema(), Schedules: append([]schedule.Definition(nil), good...)}
			tc.mutate(&cfg, &in)
			app := awscdk.NewApp(&awscdk.AppProps{Outdir: jsii.String(t.TempDir())})
			_, err := NewSliceworkStack(app, cfg, in)
			if err == nil {
				t.Fatal("NewSliceworkStack succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// TestWorkerLogWording pins the log line that the chunk failure metric
// filter counts to the worker handler's source.
func TestWorkerLogWording(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "shared", "handler", "handler.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), `log.Warn("`+WorkerFailureLogMessage+`"`) {
		t.Errorf("shared/handler/handler.go no longer logs %q: update WorkerFailureLogMessage and the metric filter", WorkerFailureLogMessage)
	}
}

// TestContextKeys: ConfigFromContext reads exactly ContextKeys, and the
// README documents each of them.
func TestContextKeys(t *testing.T) {
	read := map[string]bool{}
	values := map[string]any{"jwtIssuer": "https://id.example.com", "jwtAudience": "a"}
	if _, err := ConfigFromContext(func(k string) any { read[k] = true; return values[k] }); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ContextKeys {
		if !read[k] {
			t.Errorf("ContextKeys lists %q, which ConfigFromContext does not read", k)
		}
		delete(read, k)
		doc := k
		if fn, ok := strings.CutSuffix(k, "MemoryMB"); ok && slices.Contains(FunctionNames, fn) {
			doc = "<fn>MemoryMB"
		} else if fn, ok := strings.CutSuffix(k, "TimeoutSeconds"); ok && slices.Contains(FunctionNames, fn) {
			doc = "<fn>TimeoutSeconds"
		}
		if !strings.Contains(string(readme), "`"+doc+"`") {
			t.Errorf("README.md does not document the context key %q", k)
		}
	}
	for k := range read {
		t.Errorf("ConfigFromContext reads %q, which ContextKeys does not list", k)
	}
}
