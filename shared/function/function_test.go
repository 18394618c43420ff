package function

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseEnv(t *testing.T) {
	t.Parallel()
	const (
		slice  = "https://sqs.eu-west-1.amazonaws.com/123456789012/dev-slicework-SliceQueue-AbC123"
		chunks = "https://sqs.eu-west-1.amazonaws.com/123456789012/dev-slicework-ChunksDefault-XyZ789"
	)
	good := map[string]string{
		EnvTable:                     "dev-slicework-Table-1",
		EnvBucket:                    "dev-slicework-bucket-1",
		EnvQueues:                    `{"slice":"` + slice + `","chunks-default":"` + chunks + `"}`,
		"AWS_LAMBDA_FUNCTION_NAME":   "dev-slicework-Worker",
		"AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/23/[$LATEST]0f1e2d3c4b5a69788796a5b4c3d2e1f0",
	}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for k, v := range good {
			m[k] = v
		}
		m[k] = v
		return m
	}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr []string
	}{
		{"complete", good, nil},
		{"debug level", with(EnvLogLevel, "debug"), nil},
		{"nothing set", map[string]string{}, []string{EnvTable + " is not set", EnvBucket + " is not set", EnvQueues + " is not set"}},
		{"queues not JSON", with(EnvQueues, "slice=x"), []string{"not a JSON object"}},
		{"no slice queue", with(EnvQueues, `{"chunks-default":"`+chunks+`"}`), []string{"no URL for the slice queue"}},
		{"not a URL", with(EnvQueues, `{"slice":"dev-slice"}`), []string{`"dev-slice" is not a queue URL`}},
		{"bad level", with(EnvLogLevel, "loud"), []string{EnvLogLevel + `="loud"`}},
		{"slice budget", with(EnvBudget, "5000"), nil},
		{"event bus", with(EnvEventBus, "dev-slicework-CompletionEvents-1"), nil},
		{"bad event bus", with(EnvEventBus, "two words"), []string{EnvEventBus + `="two words"`}},
		{"bad slice budget", with(EnvBudget, "0"), []string{EnvBudget + `="0": want a positive whole number`}},
		{"slice budget not a number", with(EnvBudget, "10k"), []string{EnvBudget + `="10k"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, err := ParseEnv(func(k string) string { return tc.env[k] })
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("ParseEnv = %+v, want an error", env)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			wantURLs := map[string]string{
				"slice": slice, "dev-slicework-SliceQueue-AbC123": slice,
				"chunks-default": chunks, "dev-slicework-ChunksDefault-XyZ789": chunks,
			}
			if d := cmp.Diff(wantURLs, env.Backend.QueueURLs); d != "" {
				t.Errorf("queue URLs (-want +got):\n%s", d)
			}
			if env.Backend.Table != good[EnvTable] || env.Backend.Bucket != good[EnvBucket] {
				t.Errorf("table %q bucket %q", env.Backend.Table, env.Backend.Bucket)
			}
			if env.Worker != "dev-slicework-Worker:c3d2e1f0" {
				t.Errorf("worker %q, want the function name and the stream's last 8 characters", env.Worker)
			}
			if b := tc.env[EnvBudget]; b == "5000" && env.SliceBudget != 5000 {
				t.Errorf("slice budget %d, want 5000", env.SliceBudget)
			}
			if env.EventBus != tc.env[EnvEventBus] {
				t.Errorf("event bus %q, want %q", env.EventBus, tc.env[EnvEventBus])
			}
			if lv := tc.env[EnvLogLevel]; lv == "debug" && env.LogLevel != slog.LevelDebug {
				t.Errorf("log level %v, want debug", env.LogLevel)
			}
		})
	}
}

func TestWorkerID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ fn, stream, want string }{
		{"fn", "2026/11/23/[$LATEST]0123456789abcdef", "fn:89abcdef"},
		{"fn", "2026/11/23/[7]abc", "fn:abc"},
		{"fn", "", "fn"},
	} {
		if got := workerID(tc.fn, tc.stream); got != tc.want {
			t.Errorf("workerID(%q, %q) = %q, want %q", tc.fn, tc.stream, got, tc.want)
		}
	}
	if got := workerID("", ""); !strings.Contains(got, ":") {
		t.Errorf("workerID outside Lambda = %q, want host:pid", got)
	}
}
