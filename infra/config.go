package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/slicework/slicework/shared/engine"
)

// Function names: each is a folder under functions/ and under the build
// directory, holding that function's `bootstrap`.
const (
	FnAPI       = "api"
	FnSlicer    = "slicer"
	FnWorker    = "worker"
	FnScheduler = "scheduler"
)

// FunctionNames lists every Lambda function of the stack.
var FunctionNames = []string{FnAPI, FnSlicer, FnWorker, FnScheduler}

// FunctionSettings sizes one Lambda function.
type FunctionSettings struct {
	// MemoryMB is the function's memory (and so its CPU share), 128–10240.
	MemoryMB int
	// Timeout bounds one invocation, 1 s–15 min. The API function's is at
	// most 30 s, API Gateway's integration limit.
	Timeout time.Duration
}

// ChannelSettings configures the event source mapping of one channel (or of
// the slice queue).
type ChannelSettings struct {
	// MaxConcurrency caps the concurrent invocations the mapping makes
	// (ScalingConfig.MaximumConcurrency, 2-1000).
	MaxConcurrency int
	// BatchSize is the records per invocation, 1-10 (above 10 SQS needs a
	// batch window, and one slow chunk would hold more records hostage).
	BatchSize int
	// BatchWindow is how long the mapping gathers records before invoking,
	// 0-300 s; it trades latency for fewer invocations at low load.
	BatchWindow time.Duration
}

// JWTAuth configures a JWT authorizer on the HTTP API instead of IAM.
type JWTAuth struct {
	// Issuer is the token issuer URL (https://...).
	Issuer string
	// Audience lists the accepted "aud" values; at least one.
	Audience []string
}

// Config is everything a deployment of slicework may vary. Zero values are
// not defaults: build a Config with DefaultConfig or ConfigFromContext, then
// change fields, then Validate.
type Config struct {
	// Stage names this copy of the stack ("dev", "prod", "alice"): it is in
	// the stack name, on every resource as the tag slicework:stage, and in
	// the custom metric namespace, so several stages can share an account.
	Stage string
	// Protect keeps the data of the stage: the table gets deletion
	// protection and, like the bucket and the log groups, a RETAIN removal
	// policy. It defaults to true for the stage "prod" only.
	Protect bool
	// BuildDir holds <fn>/bootstrap for every function (`make build`).
	BuildDir string
	// Architecture is the functions' instruction set, "arm64" (the
	// default: Graviton costs less per GB-second) or "x86_64". It must
	// match the GOARCH the bootstraps in BuildDir were built for; a local
	// deployment to an emulator that runs bootstraps as host processes uses
	// the host's.
	Architecture string
	// SchedulesFile is the schedules definition shared with the local host.
	SchedulesFile string
	// Functions sizes each function, by name.
	Functions map[string]FunctionSettings
	// Slice configures the slicer's mapping on the slice queue.
	Slice ChannelSettings
	// Channels configures the worker's mapping of each channel; channels
	// absent here use DefaultChannel.
	Channels map[string]ChannelSettings
	// DefaultChannel is the mapping of channels without their own settings.
	DefaultChannel ChannelSettings
	// MaxReceiveCount is how many receives move a message to its DLQ.
	MaxReceiveCount int
	// JobDataDays is how long objects under jobs/ in the bucket live.
	JobDataDays int
	// LogRetentionDays is the functions' and the API's log retention; one
	// of CloudWatch Logs' allowed values (1, 3, 5, 7, 14, 30, 60, 90, ...).
	LogRetentionDays int
	// LogLevel is SLICEWORK_LOG_LEVEL: debug, info, warn or error.
	LogLevel string
	// Tracing turns on X-Ray active tracing for every function.
	Tracing bool
	// JWT, if set, authorizes API calls with JWTs instead of IAM (SigV4).
	JWT *JWTAuth
	// PublicAPI removes authorization from the API. Anyone who finds the URL
	// can then submit and cancel jobs: only for throw-away stages.
	PublicAPI bool
	// APIRateLimit and APIBurstLimit throttle the API's default stage
	// (requests per second, and burst).
	APIRateLimit  float64
	APIBurstLimit int
	// OldestMessageAlarm is the age of the oldest message on a work queue
	// above which an alarm fires.
	OldestMessageAlarm time.Duration
	// ChunkFailureAlarmPct is the share of chunk deliveries, in percent,
	// whose attempt failed, above which an alarm fires.
	ChunkFailureAlarmPct float64
	// AlarmEmail, if set, subscribes this address to the alarm topic.
	AlarmEmail string
	// EmulatorGaps names parts of the stack that the emulator it is
	// deployed to cannot create (see KnownEmulatorGaps). Each stays in the
	// template under a CloudFormation condition that is false, so the
	// deployment skips it and the local end-to-end test creates it through
	// the service's API from the deployed template. Empty for AWS.
	EmulatorGaps []string
	// Account and Region pin the stack's environment; empty leaves it
	// environment-agnostic (CDK_DEFAULT_ACCOUNT and CDK_DEFAULT_REGION fill
	// them when `cdk` runs the app).
	Account, Region string
}

// Defaults, and the one fixed ratio.
const (
	DefaultStage = "dev"
	// DefaultMaxReceiveCount is well above the engine's default attempts
	// per chunk (5) and its finish attempts (5): the engine, not SQS,
	// decides when a chunk fails for good, and receives that are not
	// attempts (infrastructure errors, deadline hand-backs, duplicate
	// deliveries) also count. 20 matches the local host. Kinds or jobs
	// allowed more than ~15 attempts need a higher value.
	DefaultMaxReceiveCount = 20
	// VisibilityFactor is the queue visibility timeout as a multiple
	// of its consumer's timeout, as AWS advises for Lambda event sources.
	VisibilityFactor = 6
)

// GapMetricMathAlarm: the emulator's CloudFormation cannot create an
// AWS::CloudWatch::Alarm with Metrics (metric math): the chunk failure
// rate alarm.
const GapMetricMathAlarm = "metric-math-alarm"

// KnownEmulatorGaps lists the values EmulatorGaps accepts.
var KnownEmulatorGaps = []string{GapMetricMathAlarm}

// HasGap reports whether gap is one of c.EmulatorGaps.
func (c Config) HasGap(gap string) bool { return slices.Contains(c.EmulatorGaps, gap) }

// Function architectures.
const (
	ArchARM64 = "arm64"
	ArchX8664 = "x86_64"
)

// DefaultConfig returns the defaults for stage.
func DefaultConfig(stage string) Config {
	return Config{
		Stage:         stage,
		Protect:       stage == "prod",
		BuildDir:      filepath.Join("..", "build"),
		Architecture:  ArchARM64,
		SchedulesFile: filepath.Join("..", "schedules.json"),
		Functions: map[string]FunctionSettings{
			// The API answers within API Gateway's 30 s limit.
			FnAPI: {MemoryMB: 512, Timeout: 29 * time.Second},
			// A slicer hands over after half its time; 5 min leaves room
			// for 10,000 chunk tasks and for a kind's Finish step.
			FnSlicer: {MemoryMB: 1024, Timeout: 5 * time.Minute},
			// A batch of 10 chunks of about a minute each (the kinds'
			// default timeout) with the deadline guard's hand-back.
			FnWorker: {MemoryMB: 1024, Timeout: 3 * time.Minute},
			// The sweeper runs every minute and must end before the next.
			FnScheduler: {MemoryMB: 256, Timeout: 55 * time.Second},
		},
		Slice:                ChannelSettings{MaxConcurrency: 5, BatchSize: 10, BatchWindow: time.Second},
		DefaultChannel:       ChannelSettings{MaxConcurrency: 10, BatchSize: 10, BatchWindow: time.Second},
		Channels:             map[string]ChannelSettings{},
		MaxReceiveCount:      DefaultMaxReceiveCount,
		JobDataDays:          30,
		LogRetentionDays:     30,
		LogLevel:             "info",
		APIRateLimit:         50,
		APIBurstLimit:        100,
		OldestMessageAlarm:   30 * time.Minute,
		ChunkFailureAlarmPct: 5,
	}
}

// Channel returns the mapping settings of channel ch.
func (c Config) Channel(ch string) ChannelSettings {
	if s, ok := c.Channels[ch]; ok {
		return s
	}
	return c.DefaultChannel
}

// Visibility is the visibility timeout of the queues that fn consumes.
func (c Config) Visibility(fn string) time.Duration {
	return VisibilityFactor * c.Functions[fn].Timeout
}

// StackName is the CloudFormation stack name of the stage.
func (c Config) StackName() string { return "slicework-" + c.Stage }

// MetricNamespace is the CloudWatch namespace of the stage's custom metrics.
func (c Config) MetricNamespace() string { return "Slicework/" + c.Stage }

var stagePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,18}[a-z0-9]$|^[a-z]$`)

// Validate reports every setting out of its range, not only the first.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !stagePattern.MatchString(c.Stage) {
		bad("stage %q: want 1-20 characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'", c.Stage)
	}
	if c.BuildDir == "" {
		bad("buildDir: empty")
	}
	if c.SchedulesFile == "" {
		bad("schedulesFile: empty")
	}
	if c.Architecture != ArchARM64 && c.Architecture != ArchX8664 {
		bad("architecture %q: want %s or %s", c.Architecture, ArchARM64, ArchX8664)
	}
	for _, fn := range FunctionNames {
		s, ok := c.Functions[fn]
		switch {
		case !ok:
			bad("function %s: no settings", fn)
			continue
		case s.MemoryMB < 128 || s.MemoryMB > 10240:
			bad("function %s: memory %d MB: want 128-10240", fn, s.MemoryMB)
		}
		maxTimeout := 15 * time.Minute
		if fn == FnAPI {
			maxTimeout = 30 * time.Second
		}
		if s.Timeout < time.Second || s.Timeout > maxTimeout || s.Timeout%time.Second != 0 {
			bad("function %s: timeout %s: want whole seconds from 1s to %s", fn, s.Timeout, maxTimeout)
		}
	}
	// SQS's visibility timeout is at most 12 hours: 6 × 15 min fits.
	check := func(name string, s ChannelSettings) {
		if s.MaxConcurrency < 2 || s.MaxConcurrency > 1000 {
			bad("%s: maxConcurrency %d: want 2-1000", name, s.MaxConcurrency)
		}
		if s.BatchSize < 1 || s.BatchSize > 10 {
			bad("%s: batchSize %d: want 1-10", name, s.BatchSize)
		}
		if s.BatchWindow < 0 || s.BatchWindow > 5*time.Minute || s.BatchWindow%time.Second != 0 {
			bad("%s: batch window %s: want whole seconds from 0 to 300", name, s.BatchWindow)
		}
	}
	check("slice queue", c.Slice)
	check("default channel", c.DefaultChannel)
	for _, ch := range sortedKeys(c.Channels) {
		check("channel "+ch, c.Channels[ch])
	}
	if c.MaxReceiveCount <= engine.DefaultMaxAttempts || c.MaxReceiveCount <= engine.MaxFinishAttempts || c.MaxReceiveCount > 1000 {
		bad("maxReceiveCount %d: want %d-1000, above the engine's default attempts, so that the engine and not SQS decides when a chunk fails",
			c.MaxReceiveCount, max(engine.DefaultMaxAttempts, engine.MaxFinishAttempts)+1)
	}
	if c.JobDataDays < 1 {
		bad("jobDataDays %d: want at least 1", c.JobDataDays)
	}
	if _, ok := retentionDays[c.LogRetentionDays]; !ok {
		days := make([]int, 0, len(retentionDays))
		for d := range retentionDays {
			days = append(days, d)
		}
		slices.Sort(days)
		bad("logRetentionDays %d: want one of %v", c.LogRetentionDays, days)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("logLevel %q: want debug, info, warn or error", c.LogLevel)
	}
	if c.JWT != nil {
		if !strings.HasPrefix(c.JWT.Issuer, "https://") {
			bad("jwtIssuer %q: want an https:// URL", c.JWT.Issuer)
		}
		if len(c.JWT.Audience) == 0 {
			bad("jwtAudience: want at least one audience with a JWT issuer")
		}
		if c.PublicAPI {
			bad("publicApi and jwtIssuer: choose one")
		}
	}
	if c.PublicAPI && c.Protect {
		bad("publicApi on a protected stage (%s): refused", c.Stage)
	}
	if c.APIRateLimit <= 0 || c.APIBurstLimit <= 0 {
		bad("apiRateLimit %g, apiBurstLimit %d: want both above 0", c.APIRateLimit, c.APIBurstLimit)
	}
	if c.OldestMessageAlarm < time.Minute {
		bad("oldestMessageAlarmSeconds %d: want at least 60", int(c.OldestMessageAlarm/time.Second))
	}
	if c.ChunkFailureAlarmPct <= 0 || c.ChunkFailureAlarmPct > 100 {
		bad("chunkFailureAlarmPct %g: want above 0 and at most 100", c.ChunkFailureAlarmPct)
	}
	for _, g := range c.EmulatorGaps {
		if !slices.Contains(KnownEmulatorGaps, g) {
			bad("emulatorGaps: unknown gap %q: want one of %v", g, KnownEmulatorGaps)
		}
	}
	if len(c.EmulatorGaps) > 0 && c.Protect {
		bad("emulatorGaps on a protected stage (%s): refused, gaps are for emulators", c.Stage)
	}
	if c.AlarmEmail != "" && !strings.Contains(c.AlarmEmail, "@") {
		bad("alarmEmail %q: not an e-mail address", c.AlarmEmail)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// ContextKeys are the CDK context keys that ConfigFromContext reads (from
// cdk.json or `cdk -c key=value`).
var ContextKeys = []string{
	"stage", "protect", "buildDir", "architecture", "schedulesFile", "maxReceiveCount", "jobDataDays", "logRetentionDays",
	"logLevel", "tracing", "jwtIssuer", "jwtAudience", "publicApi", "apiRateLimit", "apiBurstLimit",
	"oldestMessageAlarmSeconds", "chunkFailureAlarmPct", "alarmEmail", "emulatorGaps", "sliceQueue", "channels",
	"apiMemoryMB", "apiTimeoutSeconds", "slicerMemoryMB", "slicerTimeoutSeconds",
	"workerMemoryMB", "workerTimeoutSeconds", "schedulerMemoryMB", "schedulerTimeoutSeconds",
}

// ConfigFromContext builds the Config from the app's context: the defaults
// of DefaultConfig for the stage named by "stage" (default "dev"),
// overridden by every key of ContextKeys that is set. Values may be strings
// (as `-c key=value` gives them) or JSON values (as cdk.json gives them);
// "sliceQueue" and "channels" are JSON objects of ChannelSettings ("channels"
// by channel name). The result is validated.
func ConfigFromContext(node func(key string) any) (Config, error) {
	ctx := contextReader{get: node}
	stage := ctx.str("stage", DefaultStage)
	c := DefaultConfig(stage)
	c.Protect = ctx.boolean("protect", c.Protect)
	c.BuildDir = ctx.str("buildDir", c.BuildDir)
	c.Architecture = ctx.str("architecture", c.Architecture)
	c.SchedulesFile = ctx.str("schedulesFile", c.SchedulesFile)
	c.MaxReceiveCount = ctx.integer("maxReceiveCount", c.MaxReceiveCount)
	c.JobDataDays = ctx.integer("jobDataDays", c.JobDataDays)
	c.LogRetentionDays = ctx.integer("logRetentionDays", c.LogRetentionDays)
	c.LogLevel = ctx.str("logLevel", c.LogLevel)
	c.Tracing = ctx.boolean("tracing", c.Tracing)
	if iss := ctx.str("jwtIssuer", ""); iss != "" {
		c.JWT = &JWTAuth{Issuer: iss}
		for _, a := range strings.Split(ctx.str("jwtAudience", ""), ",") {
			if a = strings.TrimSpace(a); a != "" {
				c.JWT.Audience = append(c.JWT.Audience, a)
			}
		}
	}
	c.PublicAPI = ctx.boolean("publicApi", c.PublicAPI)
	c.APIRateLimit = ctx.float("apiRateLimit", c.APIRateLimit)
	c.APIBurstLimit = ctx.integer("apiBurstLimit", c.APIBurstLimit)
	c.OldestMessageAlarm = time.Duration(ctx.integer("oldestMessageAlarmSeconds", int(c.OldestMessageAlarm/time.Second))) * time.Second
	c.ChunkFailureAlarmPct = ctx.float("chunkFailureAlarmPct", c.ChunkFailureAlarmPct)
	c.AlarmEmail = ctx.str("alarmEmail", c.AlarmEmail)
	for _, g := range strings.Split(ctx.str("emulatorGaps", ""), ",") {
		if g = strings.TrimSpace(g); g != "" {
			c.EmulatorGaps = append(c.EmulatorGaps, g)
		}
	}
	for _, fn := range FunctionNames {
		s := c.Functions[fn]
		s.MemoryMB = ctx.integer(fn+"MemoryMB", s.MemoryMB)
		s.Timeout = time.Duration(ctx.integer(fn+"TimeoutSeconds", int(s.Timeout/time.Second))) * time.Second
		c.Functions[fn] = s
	}
	c.Slice = ctx.channel("sliceQueue", c.Slice)
	if raw, ok := ctx.json("channels"); ok {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			ctx.errs = append(ctx.errs, fmt.Errorf("context channels: want a JSON object of channel name to settings: %w", err))
		}
		for _, name := range sortedKeys(m) {
			c.Channels[name] = ctx.decodeChannel("channels."+name, m[name], c.DefaultChannel)
		}
	}
	if err := errors.Join(ctx.errs...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, c.Validate()
}

// AppContext adapts an app's context to ConfigFromContext.
func AppContext(app awscdk.App) func(string) any {
	return func(key string) any { return app.Node().TryGetContext(jsii.String(key)) }
}

// EnvironmentFromOS returns the account and region that `cdk` passes to the
// app (CDK_DEFAULT_ACCOUNT, CDK_DEFAULT_REGION), empty when unset.
func EnvironmentFromOS() (account, region string) {
	return os.Getenv("CDK_DEFAULT_ACCOUNT"), os.Getenv("CDK_DEFAULT_REGION")
}

// contextReader reads typed context values, collecting every error.
type contextReader struct {
	get  func(string) any
	errs []error
}

func (r *contextReader) raw(key string) (any, bool) {
	v := r.get(key)
	if v == nil {
		return nil, false
	}
	if s, ok := v.(string); ok && s == "" {
		return nil, false
	}
	return v, true
}

func (r *contextReader) str(key, def string) string {
	v, ok := r.raw(key)
	if !ok {
		return def
	}
	s, ok := v.(string)
	if !ok {
		r.errs = append(r.errs, fmt.Errorf("context %s: %v is not a string", key, v))
		return def
	}
	return s
}

func (r *contextReader) boolean(key string, def bool) bool {
	v, ok := r.raw(key)
	if !ok {
		return def
	}
	switch b := v.(type) {
	case bool:
		return b
	case string:
		p, err := strconv.ParseBool(b)
		if err == nil {
			return p
		}
	}
	r.errs = append(r.errs, fmt.Errorf("context %s: %v is not true or false", key, v))
	return def
}

func (r *contextReader) float(key string, def float64) float64 {
	v, ok := r.raw(key)
	if !ok {
		return def
	}
	switch n := v.(type) {
	case float64:
		return n
	case string:
		p, err := strconv.ParseFloat(n, 64)
		if err == nil {
			return p
		}
	}
	r.errs = append(r.errs, fmt.Errorf("context %s: %v is not a number", key, v))
	return def
}

func (r *contextReader) integer(key string, def int) int {
	v, ok := r.raw(key)
	if !ok {
		return def
	}
	switch n := v.(type) {
	case float64:
		if n == float64(int(n)) {
			return int(n)
		}
	case string:
		p, err := strconv.Atoi(n)
		if err == nil {
			return p
		}
	}
	r.errs = append(r.errs, fmt.Errorf("context %s: %v is not a whole number", key, v))
	return def
}

// json returns the value of key as JSON: a string is taken as JSON text, any
// other value is marshalled.
func (r *contextReader) json(key string) (json.RawMessage, bool) {
	v, ok := r.raw(key)
	if !ok {
		return nil, false
	}
	if s, ok := v.(string); ok {
		return json.RawMessage(s), true
	}
	b, err := json.Marshal(v)
	if err != nil {
		r.errs = append(r.errs, fmt.Errorf("context %s: %w", key, err))
		return nil, false
	}
	return b, true
}

func (r *contextReader) channel(key string, def ChannelSettings) ChannelSettings {
	raw, ok := r.json(key)
	if !ok {
		return def
	}
	return r.decodeChannel(key, raw, def)
}

// decodeChannel overlays the fields set in raw on def.
func (r *contextReader) decodeChannel(key string, raw json.RawMessage, def ChannelSettings) ChannelSettings {
	var in struct {
		MaxConcurrency     *int `json:"maxConcurrency"`
		BatchSize          *int `json:"batchSize"`
		BatchWindowSeconds *int `json:"batchWindowSeconds"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		r.errs = append(r.errs, fmt.Errorf(`context %s: want {"maxConcurrency", "batchSize", "batchWindowSeconds"}: %w`, key, err))
		return def
	}
	s := def
	if in.MaxConcurrency != nil {
		s.MaxConcurrency = *in.MaxConcurrency
	}
	if in.BatchSize != nil {
		s.BatchSize = *in.BatchSize
	}
	if in.BatchWindowSeconds != nil {
		s.BatchWindow = time.Duration(*in.BatchWindowSeconds) * time.Second
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
