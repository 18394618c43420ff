// Package function is what every slicework Lambda function opens before it
// calls lambda.Start: configuration from the environment, the AWS adapters,
// and an engine with every built-in kind. The mains in functions/ are
// wiring only; the logic and its tests live here and in shared/handler.
//
// Environment (set by the CDK stack):
//
//	SLICEWORK_TABLE      DynamoDB table name (required)
//	SLICEWORK_BUCKET     S3 bucket name (required)
//	SLICEWORK_QUEUES     JSON object: queue name ("slice", "chunks-<channel>") → queue URL (required)
//	SLICEWORK_LOG_LEVEL  debug, info (default), warn or error
//	SLICEWORK_EVENT_BUS  EventBridge bus (name or ARN) of job completion events (optional: none are published without it)
//	SLICEWORK_SLICE_BUDGET  most chunk tasks one slicer invocation sends (default 10000; engine.Config.SliceBudget)
//
// plus the SDK's standard variables (AWS_REGION, AWS_ENDPOINT_URL, ...).
package function

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/backend"
	"github.com/slicework/slicework/shared/backend/awsbackend"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/events"
	"github.com/slicework/slicework/shared/events/ebevents"
	"github.com/slicework/slicework/shared/kinds"
)

// Environment variable names.
const (
	EnvTable    = "SLICEWORK_TABLE"
	EnvBucket   = "SLICEWORK_BUCKET"
	EnvQueues   = "SLICEWORK_QUEUES"
	EnvLogLevel = "SLICEWORK_LOG_LEVEL"
	EnvEventBus = "SLICEWORK_EVENT_BUS"
	EnvBudget   = "SLICEWORK_SLICE_BUDGET"
)

// Env is the function's configuration.
type Env struct {
	Backend  awsbackend.Config
	LogLevel slog.Level
	// SliceBudget is engine.Config.SliceBudget (0: the engine's default).
	SliceBudget int64
	// Worker identifies this function instance in attempt records.
	Worker string
	// EventBus is the EventBridge bus (name or ARN) that completion events
	// go to; empty: none are published.
	EventBus string
}

// ParseEnv reads the configuration through getenv (os.Getenv in
// production). Every problem is reported, not only the first.
func ParseEnv(getenv func(string) string) (Env, error) {
	var errs []error
	env := Env{Backend: awsbackend.Config{Table: getenv(EnvTable), Bucket: getenv(EnvBucket)}}
	if env.Backend.Table == "" {
		errs = append(errs, fmt.Errorf("%s is not set", EnvTable))
	}
	if env.Backend.Bucket == "" {
		errs = append(errs, fmt.Errorf("%s is not set", EnvBucket))
	}
	urls, err := parseQueues(getenv(EnvQueues))
	if err != nil {
		errs = append(errs, err)
	}
	env.Backend.QueueURLs = urls
	if lv := getenv(EnvLogLevel); lv != "" {
		if err := env.LogLevel.UnmarshalText([]byte(lv)); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want debug, info, warn or error", EnvLogLevel, lv))
		}
	}
	if b := getenv(EnvBudget); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s=%q: want a positive whole number", EnvBudget, b))
		}
		env.SliceBudget = n
	}
	if bus := getenv(EnvEventBus); bus != "" {
		if len(bus) > 1600 || strings.ContainsAny(bus, " \t\r\n") {
			errs = append(errs, fmt.Errorf("%s=%q: want an EventBridge bus name or ARN", EnvEventBus, bus))
		}
		env.EventBus = bus
	}
	env.Worker = workerID(getenv("AWS_LAMBDA_FUNCTION_NAME"), getenv("AWS_LAMBDA_LOG_STREAM_NAME"))
	if err := errors.Join(errs...); err != nil {
		return Env{}, fmt.Errorf("function: environment: %w", err)
	}
	return env, nil
}

// parseQueues decodes the queue map and adds each queue's physical name
// (the last segment of its URL) as a second key, because the worker learns
// its queue from the event's ARN, which carries the physical name.
func parseQueues(s string) (map[string]string, error) {
	if s == "" {
		return nil, fmt.Errorf("%s is not set", EnvQueues)
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object of queue name to URL: %w", EnvQueues, err)
	}
	if _, ok := m["slice"]; !ok {
		return nil, fmt.Errorf("%s: no URL for the slice queue", EnvQueues)
	}
	out := make(map[string]string, 2*len(m))
	for name, raw := range m {
		u, err := url.Parse(raw)
		if err != nil || u.Scheme == "" || u.Host == "" || path.Base(u.Path) == "/" || path.Base(u.Path) == "." {
			return nil, fmt.Errorf("%s: queue %q: %q is not a queue URL", EnvQueues, name, raw)
		}
		out[name] = raw
		out[path.Base(u.Path)] = raw
	}
	return out, nil
}

// workerID is the function name and the tail of the log stream name, which
// tells one execution environment from another in attempt records.
func workerID(fn, stream string) string {
	if fn == "" {
		host, _ := os.Hostname()
		return fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	if i := strings.LastIndexByte(stream, ']'); i >= 0 {
		stream = stream[i+1:]
	}
	if len(stream) > 8 {
		stream = stream[len(stream)-8:]
	}
	if stream == "" {
		return fn
	}
	return fn + ":" + stream
}

// Runtime is an opened function: its engine and logger.
type Runtime struct {
	Env     Env
	Backend *backend.Backend
	Engine  *engine.Engine
	Log     *slog.Logger
}

// Open reads the environment, loads the SDK configuration through the
// standard chain and builds the engine with every built-in kind.
func Open(ctx context.Context) (*Runtime, error) {
	env, err := ParseEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: env.LogLevel}))
	cfg, err := awsconfig.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("function: %w", err)
	}
	be, err := awsbackend.Open(cfg, env.Backend)
	if err != nil {
		return nil, fmt.Errorf("function: %w", err)
	}
	reg, err := kinds.Registry()
	if err != nil {
		return nil, fmt.Errorf("function: %w", err)
	}
	var pub events.Publisher
	if env.EventBus != "" {
		pub = ebevents.New(awsconfig.EventBridge(cfg), env.EventBus)
	}
	eng, err := engine.New(engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Worker: env.Worker, Logger: log, SliceBudget: env.SliceBudget,
		Events: pub})
	if err != nil {
		return nil, fmt.Errorf("function: %w", err)
	}
	return &Runtime{Env: env, Backend: be, Engine: eng, Log: log}, nil
}

// MustOpen is Open for a main: on error it logs the reason and exits 1, so
// the Lambda init fails with the message in the function's log.
func MustOpen(ctx context.Context) *Runtime {
	rt, err := Open(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return rt
}
