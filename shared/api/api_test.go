package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/api"
	"github.com/slicework/slicework/shared/backend"
	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/keycount"
	"github.com/slicework/slicework/shared/kinds/recompute"
	"github.com/slicework/slicework/shared/queue"
)

// t0 is the fake clock's start; whole seconds, so RFC 3339 round-trips it.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// corpusKey is an uploaded lines object every env holds. It is outside
// "jobs/", where the engine writes a job's data.
const corpusKey = "inputs/corpus.ndjson"

const corpus = `{"key":"a","amount":1}
{"key":"b","amount":2}
{"key":"a","amount":3}
`

// env is the API served over HTTP by a real engine on a fresh embedded
// backend with the keycount and recompute kinds, under a fake clock.
type env struct {
	t   *testing.T
	clk *clock.Fake
	be  *backend.Backend
	e   *engine.Engine
	srv *httptest.Server
}

func newEnv(t *testing.T) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	be, err := embedded.Open(t.TempDir(), clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	reg := engine.NewRegistry()
	if err := keycount.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := recompute.Register(reg); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	e, err := engine.New(engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Clock: clk, Worker: "api-test", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := e.CreateQueues(ctx, time.Minute, 50); err != nil {
		t.Fatal(err)
	}
	if err := be.Blobs.Put(ctx, corpusKey, strings.NewReader(corpus)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.New(e, log))
	t.Cleanup(srv.Close)
	return &env{clk: clk, be: be, e: e, srv: srv}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// do sends a request; contentType "" sends none.
func (v *env) do(t *testing.T, method, path, contentType string, body []byte) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, v.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := v.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (v *env) get(t *testing.T, path string) response {
	t.Helper()
	return v.do(t, http.MethodGet, path, "", nil)
}

func (v *env) submit(t *testing.T, body string) response {
	t.Helper()
	return v.do(t, http.MethodPost, "/jobs", "application/json", []byte(body))
}

// mustSubmit submits body, wants 201 and returns the job.
func (v *env) mustSubmit(t *testing.T, body string) api.JobView {
	t.Helper()
	r := v.submit(t, body)
	if r.status != http.StatusCreated {
		t.Fatalf("POST /jobs %s: status %d, body %s", body, r.status, r.body)
	}
	return r.view(t)
}

// decodeStrict decodes b into dst, rejecting fields dst does not know, so a
// response that drifts from the documented shape fails.
func decodeStrict(t *testing.T, b []byte, dst any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		t.Fatalf("decode %T from %s: %v", dst, b, err)
	}
}

func (r response) wantJSON(t *testing.T) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
}

// apiErr decodes an error body, which must be exactly {"error": {...}}.
func (r response) apiErr(t *testing.T) api.Error {
	t.Helper()
	r.wantJSON(t)
	var body struct {
		Error *api.Error `json:"error"`
	}
	decodeStrict(t, r.body, &body)
	if body.Error == nil {
		t.Fatalf("error body without \"error\": %s", r.body)
	}
	if body.Error.Message == "" {
		t.Errorf("error without a message: %s", r.body)
	}
	return *body.Error
}

// view decodes a job body and checks it carries progress.
func (r response) view(t *testing.T) api.JobView {
	t.Helper()
	r.wantJSON(t)
	var keys map[string]json.RawMessage
	decodeStrict(t, r.body, &keys)
	for _, k := range []string{"id", "kind", "state", "input", "progress", "counters", "created_at"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("job body has no %q: %s", k, r.body)
		}
	}
	var jv api.JobView
	decodeStrict(t, r.body, &jv)
	if jv.Job == nil || jv.ID == "" {
		t.Fatalf("job body without an id: %s", r.body)
	}
	return jv
}

// wantErr checks status and error body and returns the error.
func (r response) wantErr(t *testing.T, status int, code, field string) api.Error {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	e := r.apiErr(t)
	if e.Code != code || e.Field != field {
		t.Errorf("error code %q field %q, want %q %q (message %q)", e.Code, e.Field, code, field, e.Message)
	}
	return e
}

func (v *env) stats(t *testing.T, name string) queue.Stats {
	t.Helper()
	st, err := v.be.Queue.Stats(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (v *env) jobBlobs(t *testing.T) []string {
	t.Helper()
	infos, err := v.be.Blobs.List(context.Background(), "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, i := range infos {
		keys = append(keys, i.Key)
	}
	return keys
}

func (v *env) storedJobs(t *testing.T) []*job.Job {
	t.Helper()
	p, err := v.be.Store.ListJobs(context.Background(), job.Query{Limit: job.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	return p.Jobs
}

// assertNothingWritten checks that no job, no queued task and no job data exist.
func (v *env) assertNothingWritten(t *testing.T) {
	t.Helper()
	if jobs := v.storedJobs(t); len(jobs) != 0 {
		t.Errorf("%d jobs stored after a rejected request, first %+v", len(jobs), jobs[0])
	}
	for _, name := range []string{v.e.Queues().Slice(), v.e.Queues().Channel(engine.DefaultChannel)} {
		if st := v.stats(t, name); st.Visible+st.InFlight+st.Delayed != 0 {
			t.Errorf("queue %s holds messages after a rejected request: %+v", name, st)
		}
	}
	if keys := v.jobBlobs(t); len(keys) != 0 {
		t.Errorf("blobs written under jobs/ after a rejected request: %v", keys)
	}
}

// compact returns raw without insignificant space (responses are indented).
func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %s: %v", raw, err)
	}
	return b.String()
}

// pad returns a valid submission padded with trailing spaces to n bytes.
func pad(n int) []byte {
	b := []byte(`{"kind":"recompute","input":{"type":"ids","start":0,"end":10}}`)
	return append(b, bytes.Repeat([]byte(" "), n-len(b))...)
}

// itemsBody is a recompute submission of n items.
func itemsBody(n int) string {
	return `{"kind":"recompute","input":{"type":"items","items":[` + strings.TrimSuffix(strings.Repeat("1,", n), ",") + `]}}`
}

func TestSubmitCreates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		contentType string
		body        string
		kind        string
		state       job.State
		slice       queue.Stats // the slice queue afterwards
		check       func(t *testing.T, v *env, j api.JobView)
	}{
		{name: "ids", body: `{"kind":"recompute","input":{"type":"ids","start":0,"end":25000}}`,
			kind: recompute.Kind, state: job.StateQueued, slice: queue.Stats{Visible: 1},
			check: func(t *testing.T, v *env, j api.JobView) {
				if j.Input.Type != job.InputIDRange || j.Input.Start != 0 || j.Input.End != 25000 {
					t.Errorf("input %+v", j.Input)
				}
				// The kind's defaults apply.
				if j.ChunkSize != 10_000 || j.MaxAttempts != 4 || j.TolerateFailedPct != 2 || j.Channel != engine.DefaultChannel {
					t.Errorf("chunk_size %d max_attempts %d tolerate %v channel %q, want the kind's defaults",
						j.ChunkSize, j.MaxAttempts, j.TolerateFailedPct, j.Channel)
				}
				if keys := v.jobBlobs(t); len(keys) != 0 {
					t.Errorf("an ids job wrote blobs: %v", keys)
				}
			}},
		{name: "lines of an uploaded object", body: `{"kind":"keycount","args":{"key_field":"key"},"input":{"type":"lines","key":"` + corpusKey + `"}}`,
			kind: keycount.Kind, state: job.StateQueued, slice: queue.Stats{Visible: 1},
			check: func(t *testing.T, v *env, j api.JobView) {
				if j.Input.Type != job.InputLines || j.Input.Key != corpusKey || j.Input.Format != job.FormatNDJSON {
					t.Errorf("input %+v, want lines of %s defaulting to ndjson", j.Input, corpusKey)
				}
				if compact(t, j.Args) != `{"key_field":"key"}` {
					t.Errorf("args %s", j.Args)
				}
				if j.ChunkSize != 256<<10 || j.MaxAttempts != 5 {
					t.Errorf("chunk_size %d max_attempts %d, want keycount's defaults", j.ChunkSize, j.MaxAttempts)
				}
			}},
		{name: "items become data blocks", body: `{"kind":"recompute","chunk_size":2,"input":{"type":"items","items":[1,{"a":2},"three"]}}`,
			kind: recompute.Kind, state: job.StateQueued, slice: queue.Stats{Visible: 1},
			check: func(t *testing.T, v *env, j api.JobView) {
				if j.Input.Items != nil || j.Input.Key != engine.BlocksPrefix(j.ID) || j.Input.End != 3 {
					t.Errorf("input %+v, want the items moved to blocks under %s", j.Input, engine.BlocksPrefix(j.ID))
				}
				keys := v.jobBlobs(t)
				if len(keys) != 2 {
					t.Fatalf("blobs %v, want 2 data blocks", keys)
				}
				for _, k := range keys {
					if !strings.HasPrefix(k, engine.BlocksPrefix(j.ID)+"/") {
						t.Errorf("blob %s outside the job's blocks", k)
					}
				}
			}},
		{name: "exactly MaxItems items", body: itemsBody(engine.MaxItems),
			kind: recompute.Kind, state: job.StateQueued, slice: queue.Stats{Visible: 1},
			check: func(t *testing.T, v *env, j api.JobView) {
				if j.Input.End != engine.MaxItems {
					t.Errorf("input end %d, want %d", j.Input.End, engine.MaxItems)
				}
			}},
		{name: "every option", contentType: "application/json; charset=utf-8",
			body: `{"kind":"recompute","args":{"flaky_every":3,"flaky_attempts":2},"input":{"type":"ids","start":5,"end":50},
				"channel":"default","unique_key":"nightly-2026-03-04","tags":["nightly","team:a/b"],"chunk_size":7,
				"max_attempts":100,"tolerate_failed_pct":12.5,"run_at":"2020-01-01T00:00:00Z"}`,
			kind: recompute.Kind, state: job.StateQueued, slice: queue.Stats{Visible: 1},
			check: func(t *testing.T, v *env, j api.JobView) {
				if j.UniqueKey != "nightly-2026-03-04" || !slices.Equal(j.Tags, []string{"nightly", "team:a/b"}) ||
					j.ChunkSize != 7 || j.MaxAttempts != 100 || j.TolerateFailedPct != 12.5 {
					t.Errorf("options not kept: %+v", *j.Job)
				}
				if compact(t, j.Args) != `{"flaky_every":3,"flaky_attempts":2}` {
					t.Errorf("args %s", j.Args)
				}
			}},
		{name: "run_at within the queue delay waits on the queue", body: `{"kind":"recompute","input":{"type":"ids","end":10},"run_at":"` + t0.Add(5*time.Minute).Format(time.RFC3339) + `"}`,
			kind: recompute.Kind, state: job.StateQueued, slice: queue.Stats{Delayed: 1}},
		{name: "run_at beyond the queue delay is scheduled", body: `{"kind":"recompute","input":{"type":"ids","end":10},"run_at":"` + t0.Add(engine.MaxRunAhead).Format(time.RFC3339) + `"}`,
			kind: recompute.Kind, state: job.StateScheduled, slice: queue.Stats{},
			check: func(t *testing.T, v *env, j api.JobView) {
				if j.RunAt == nil || !j.RunAt.Equal(t0.Add(engine.MaxRunAhead)) {
					t.Errorf("run_at %v", j.RunAt)
				}
			}},
		{name: "max request body", body: string(pad(api.MaxBodyBytes)),
			kind: recompute.Kind, state: job.StateQueued, slice: queue.Stats{Visible: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t)
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			r := v.do(t, http.MethodPost, "/jobs", ct, []byte(tc.body))
			if r.status != http.StatusCreated {
				t.Fatalf("status %d, want 201; body %s", r.status, r.body)
			}
			j := r.view(t)
			if loc := r.header.Get("Location"); loc != "/jobs/"+j.ID {
				t.Errorf("Location %q, want /jobs/%s", loc, j.ID)
			}
			if j.Kind != tc.kind || j.State != tc.state {
				t.Errorf("kind %q state %q, want %q %q", j.Kind, j.State, tc.kind, tc.state)
			}
			if !j.CreatedAt.Equal(t0) {
				t.Errorf("created_at %v, want the clock's %v", j.CreatedAt, t0)
			}
			if want := (engine.Progress{}); j.Progress != want {
				t.Errorf("progress %+v of a new job, want zero", j.Progress)
			}
			stored := v.storedJobs(t)
			if len(stored) != 1 || stored[0].ID != j.ID || stored[0].State != tc.state {
				t.Fatalf("stored jobs %+v, want just %s", stored, j.ID)
			}
			st := v.stats(t, v.e.Queues().Slice())
			if st.Visible != tc.slice.Visible || st.Delayed != tc.slice.Delayed || st.InFlight != 0 {
				t.Errorf("slice queue %+v, want %+v", st, tc.slice)
			}
			if tc.slice.Visible == 1 {
				msgs, err := v.be.Queue.Receive(context.Background(), v.e.Queues().Slice(), 10, time.Minute, 0)
				if err != nil {
					t.Fatal(err)
				}
				var task job.ControlTask
				if len(msgs) != 1 || json.Unmarshal(msgs[0].Body, &task) != nil || task != (job.ControlTask{Op: job.OpSlice, JobID: j.ID}) {
					t.Errorf("slice queue holds %v, want one slice task for %s", msgs, j.ID)
				}
			}
			if tc.check != nil {
				tc.check(t, v, j)
			}
		})
	}
}

func TestSubmitRejectsAndWritesNothing(t *testing.T) {
	t.Parallel()
	const ids = `"input":{"type":"ids","start":0,"end":100}`
	tests := []struct {
		name        string
		contentType string // "-" sends none; "" sends application/json
		body        string
		status      int
		code        string
		field       string
		msg         string // a substring the message must hold
	}{
		// 415
		{name: "no Content-Type", contentType: "-", body: `{"kind":"recompute",` + ids + `}`, status: 415, code: "unsupported_media_type"},
		{name: "text/plain", contentType: "text/plain", body: `{"kind":"recompute",` + ids + `}`, status: 415, code: "unsupported_media_type", msg: "text/plain"},
		{name: "form", contentType: "application/x-www-form-urlencoded", body: `kind=recompute`, status: 415, code: "unsupported_media_type"},
		{name: "malformed Content-Type", contentType: "application/json; charset", body: `{"kind":"recompute",` + ids + `}`, status: 415, code: "unsupported_media_type"},

		// 413
		{name: "body over MaxBodyBytes", body: string(pad(api.MaxBodyBytes + 1)), status: 413, code: "too_large"},
		{name: "huge body", body: string(pad(3 * api.MaxBodyBytes)), status: 413, code: "too_large"},

		// 400: not the JSON of a request
		{name: "empty body", body: ``, status: 400, code: "invalid_json"},
		{name: "malformed JSON", body: `{"kind":"recompute",`, status: 400, code: "invalid_json"},
		{name: "not an object", body: `["recompute"]`, status: 400, code: "invalid_json"},
		{name: "unknown top-level field", body: `{"kind":"recompute",` + ids + `,"priority":1}`, status: 400, code: "invalid_json", msg: "priority"},
		{name: "unknown input field", body: `{"kind":"recompute","input":{"type":"ids","start":0,"end":100,"step":5}}`, status: 400, code: "invalid_json", msg: "step"},
		{name: "trailing object", body: `{"kind":"recompute",` + ids + `} {}`, status: 400, code: "invalid_json", msg: "trailing"},
		{name: "trailing garbage", body: `{"kind":"recompute",` + ids + `}x`, status: 400, code: "invalid_json"},
		{name: "trailing brace", body: `{"kind":"recompute",` + ids + `}}`, status: 400, code: "invalid_json", msg: "trailing"},
		{name: "trailing bracket", body: `{"kind":"recompute",` + ids + `}]`, status: 400, code: "invalid_json", msg: "trailing"},
		{name: "string for a number", body: `{"kind":"recompute",` + ids + `,"chunk_size":"big"}`, status: 400, code: "invalid_json", msg: "chunk_size"},
		{name: "string for a list", body: `{"kind":"recompute",` + ids + `,"tags":"nightly"}`, status: 400, code: "invalid_json", msg: "tags"},
		{name: "number for a string", body: `{"kind":7,` + ids + `}`, status: 400, code: "invalid_json", msg: "kind"},
		{name: "bad run_at time", body: `{"kind":"recompute",` + ids + `,"run_at":"tomorrow"}`, status: 400, code: "invalid_json"},
		{name: "invalid item", body: `{"kind":"recompute","input":{"type":"items","items":[1,nope]}}`, status: 400, code: "invalid_json"},

		// 422: well-formed but invalid
		{name: "missing kind", body: `{` + ids + `}`, status: 422, code: "invalid_argument", field: "kind"},
		{name: "null request", body: `null`, status: 422, code: "invalid_argument", field: "kind"},
		{name: "unknown kind", body: `{"kind":"nope",` + ids + `}`, status: 422, code: "invalid_argument", field: "kind", msg: "nope"},
		{name: "args with an unknown field", body: `{"kind":"recompute","args":{"flaky":1},` + ids + `}`, status: 422, code: "invalid_argument", field: "args"},
		{name: "args of the wrong type", body: `{"kind":"recompute","args":{"flaky_every":"often"},` + ids + `}`, status: 422, code: "invalid_argument", field: "args"},
		{name: "args not an object", body: `{"kind":"recompute","args":[1],` + ids + `}`, status: 422, code: "invalid_argument", field: "args"},
		{name: "args failing Validate", body: `{"kind":"recompute","args":{"flaky_attempts":99},` + ids + `}`, status: 422, code: "invalid_argument", field: "args"},
		{name: "keycount args failing Validate", body: `{"kind":"keycount","args":{"key_field":"` + strings.Repeat("k", 129) + `"},"input":{"type":"lines","key":"` + corpusKey + `"}}`, status: 422, code: "invalid_argument", field: "args"},
		{name: "no input", body: `{"kind":"recompute"}`, status: 422, code: "invalid_argument", field: "input.type"},
		{name: "missing input.type", body: `{"kind":"recompute","input":{"start":0,"end":100}}`, status: 422, code: "invalid_argument", field: "input.type"},
		{name: "unknown input.type", body: `{"kind":"recompute","input":{"type":"files"}}`, status: 422, code: "invalid_argument", field: "input.type", msg: "files"},
		{name: "lines object missing", body: `{"kind":"keycount","input":{"type":"lines","key":"inputs/missing.ndjson"}}`, status: 422, code: "invalid_argument", field: "input.key", msg: "inputs/missing.ndjson"},
		{name: "lines without a key", body: `{"kind":"keycount","input":{"type":"lines"}}`, status: 422, code: "invalid_argument", field: "input.key"},
		{name: "lines key escaping the bucket", body: `{"kind":"keycount","input":{"type":"lines","key":"../store.db"}}`, status: 422, code: "invalid_argument", field: "input.key"},
		{name: "lines unknown format", body: `{"kind":"keycount","input":{"type":"lines","key":"` + corpusKey + `","format":"xml"}}`, status: 422, code: "invalid_argument", field: "input.format", msg: "xml"},
		{name: "lines with an id range", body: `{"kind":"keycount","input":{"type":"lines","key":"` + corpusKey + `","end":5}}`, status: 422, code: "invalid_argument", field: "input"},
		{name: "ids end equals start", body: `{"kind":"recompute","input":{"type":"ids","start":5,"end":5}}`, status: 422, code: "invalid_argument", field: "input.end"},
		{name: "ids end before start", body: `{"kind":"recompute","input":{"type":"ids","start":5,"end":4}}`, status: 422, code: "invalid_argument", field: "input.end"},
		{name: "ids unknown bucket preset", body: `{"kind":"recompute","input":{"type":"ids","end":100,"buckets":{"preset":"log","count":3}}}`, status: 422, code: "invalid_argument", field: "input.buckets.preset"},
		{name: "ids zero buckets", body: `{"kind":"recompute","input":{"type":"ids","end":100,"buckets":{"preset":"inverse-log"}}}`, status: 422, code: "invalid_argument", field: "input.buckets.count"},
		{name: "ids with items", body: `{"kind":"recompute","input":{"type":"ids","end":100,"items":[1]}}`, status: 422, code: "invalid_argument", field: "input"},
		{name: "items empty", body: `{"kind":"recompute","input":{"type":"items","items":[]}}`, status: 422, code: "invalid_argument", field: "input.items"},
		{name: "items missing", body: `{"kind":"recompute","input":{"type":"items"}}`, status: 422, code: "invalid_argument", field: "input.items"},
		{name: "items over MaxItems", body: itemsBody(engine.MaxItems + 1), status: 422, code: "invalid_argument", field: "input.items"},
		{name: "items with a key", body: `{"kind":"recompute","input":{"type":"items","items":[1],"key":"inputs/x"}}`, status: 422, code: "invalid_argument", field: "input"},
		{name: "custom for a kind without Slice", body: `{"kind":"recompute","input":{"type":"custom","spec":{}}}`, status: 422, code: "invalid_argument", field: "input.type"},
		{name: "unknown channel", body: `{"kind":"recompute",` + ids + `,"channel":"fast"}`, status: 422, code: "invalid_argument", field: "channel", msg: "fast"},
		{name: "tag with a space", body: `{"kind":"recompute",` + ids + `,"tags":["ok","not ok"]}`, status: 422, code: "invalid_argument", field: "tags"},
		{name: "empty tag", body: `{"kind":"recompute",` + ids + `,"tags":[""]}`, status: 422, code: "invalid_argument", field: "tags"},
		{name: "tag too long", body: `{"kind":"recompute",` + ids + `,"tags":["` + strings.Repeat("t", 65) + `"]}`, status: 422, code: "invalid_argument", field: "tags"},
		{name: "too many tags", body: `{"kind":"recompute",` + ids + `,"tags":["t"` + strings.Repeat(`,"t"`, engine.MaxTags) + `]}`, status: 422, code: "invalid_argument", field: "tags"},
		{name: "unique_key too long", body: `{"kind":"recompute",` + ids + `,"unique_key":"` + strings.Repeat("u", engine.MaxUniqueKey+1) + `"}`, status: 422, code: "invalid_argument", field: "unique_key"},
		{name: "max_attempts over the limit", body: `{"kind":"recompute",` + ids + `,"max_attempts":101}`, status: 422, code: "invalid_argument", field: "max_attempts"},
		{name: "max_attempts negative", body: `{"kind":"recompute",` + ids + `,"max_attempts":-1}`, status: 422, code: "invalid_argument", field: "max_attempts"},
		{name: "tolerate_failed_pct over 100", body: `{"kind":"recompute",` + ids + `,"tolerate_failed_pct":101}`, status: 422, code: "invalid_argument", field: "tolerate_failed_pct"},
		{name: "tolerate_failed_pct negative", body: `{"kind":"recompute",` + ids + `,"tolerate_failed_pct":-0.5}`, status: 422, code: "invalid_argument", field: "tolerate_failed_pct"},
		{name: "run_at over a year ahead", body: `{"kind":"recompute",` + ids + `,"run_at":"` + t0.Add(engine.MaxRunAhead+time.Second).Format(time.RFC3339) + `"}`, status: 422, code: "invalid_argument", field: "run_at"},
		{name: "chunk_size negative", body: `{"kind":"recompute",` + ids + `,"chunk_size":-1}`, status: 422, code: "invalid_argument", field: "chunk_size"},
		{name: "chunk_size making too many chunks", body: fmt.Sprintf(`{"kind":"recompute","input":{"type":"ids","start":0,"end":%d},"chunk_size":1}`, engine.MaxChunks+1), status: 422, code: "invalid_argument", field: "chunk_size"},
		{name: "unknown parent", body: `{"kind":"recompute",` + ids + `,"parent":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`, status: 422, code: "invalid_argument", field: "parent"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := newEnv(t)
			ct := tc.contentType
			switch ct {
			case "-":
				ct = ""
			case "":
				ct = "application/json"
			}
			r := v.do(t, http.MethodPost, "/jobs", ct, []byte(tc.body))
			e := r.wantErr(t, tc.status, tc.code, tc.field)
			if !strings.Contains(e.Message, tc.msg) {
				t.Errorf("message %q does not mention %q", e.Message, tc.msg)
			}
			if e.Job != nil {
				t.Errorf("rejection carries a job: %+v", e.Job)
			}
			if loc := r.header.Get("Location"); loc != "" {
				t.Errorf("rejection has Location %q", loc)
			}
			v.assertNothingWritten(t)
		})
	}
}

func TestSubmitDuplicateUniqueKey(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	first := v.mustSubmit(t, `{"kind":"recompute","input":{"type":"ids","end":100},"unique_key":"once"}`)

	// The second request differs in everything but the key, and its items
	// would be written as blocks before the key is found held.
	r := v.submit(t, `{"kind":"recompute","input":{"type":"items","items":[1,2,3]},"unique_key":"once","tags":["again"]}`)
	e := r.wantErr(t, http.StatusConflict, "duplicate", "")
	if e.Job == nil {
		t.Fatalf("duplicate without the existing job: %s", r.body)
	}
	if e.Job.ID != first.ID || e.Job.UniqueKey != "once" || e.Job.State != job.StateQueued || e.Job.Input.Type != job.InputIDRange {
		t.Errorf("duplicate names job %+v, want the first, %s", *e.Job, first.ID)
	}
	if !strings.Contains(e.Message, first.ID) {
		t.Errorf("message %q does not name the holder %s", e.Message, first.ID)
	}
	if jobs := v.storedJobs(t); len(jobs) != 1 || jobs[0].ID != first.ID {
		t.Errorf("stored jobs %v, want only %s", jobs, first.ID)
	}
	if st := v.stats(t, v.e.Queues().Slice()); st.Visible != 1 {
		t.Errorf("slice queue %+v, want the first job's task only", st)
	}
	if keys := v.jobBlobs(t); len(keys) != 0 {
		t.Errorf("the duplicate's data blocks were left behind: %v", keys)
	}

	// A different key is a different job.
	other := v.mustSubmit(t, `{"kind":"recompute","input":{"type":"ids","end":100},"unique_key":"twice"}`)
	if other.ID == first.ID {
		t.Error("a different unique key returned the same job")
	}
	if jobs := v.storedJobs(t); len(jobs) != 2 {
		t.Errorf("%d jobs, want 2", len(jobs))
	}
}

func TestGetJob(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	sub := v.mustSubmit(t, `{"kind":"recompute","input":{"type":"ids","end":100},"tags":["x"]}`)

	r := v.get(t, "/jobs/"+sub.ID)
	if r.status != http.StatusOK {
		t.Fatalf("status %d; body %s", r.status, r.body)
	}
	got := r.view(t)
	if got.ID != sub.ID || got.Kind != recompute.Kind || got.State != job.StateQueued || !slices.Equal(got.Tags, []string{"x"}) {
		t.Errorf("got %+v, want the submitted job %+v", *got.Job, *sub.Job)
	}

	for _, id := range []string{"01ARZ3NDEKTSV4RRFFQ69G5FAV", "nope"} {
		t.Run("unknown "+id, func(t *testing.T) {
			v.get(t, "/jobs/"+id).wantErr(t, http.StatusNotFound, "not_found", "")
		})
	}
}

// listed returns the ids of GET /jobs?q, and its next cursor.
func (v *env) list(t *testing.T, q url.Values) ([]string, string) {
	t.Helper()
	r := v.get(t, "/jobs?"+q.Encode())
	if r.status != http.StatusOK {
		t.Fatalf("GET /jobs?%s: status %d; body %s", q.Encode(), r.status, r.body)
	}
	r.wantJSON(t)
	var raw map[string]json.RawMessage
	decodeStrict(t, r.body, &raw)
	if string(raw["jobs"]) == "null" || raw["jobs"] == nil {
		t.Errorf("jobs is %s, want a list", raw["jobs"])
	}
	var page api.ListResponse
	decodeStrict(t, r.body, &page)
	ids := []string{}
	for _, j := range page.Jobs {
		ids = append(ids, j.ID)
	}
	return ids, page.Next
}

func TestListJobs(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	lines := `"input":{"type":"lines","key":"` + corpusKey + `"}`
	ids := `"input":{"type":"ids","end":100}`
	bodies := []string{
		`{"kind":"recompute",` + ids + `,"tags":["nightly","team:a"]}`,
		`{"kind":"keycount",` + lines + `,"tags":["team:a"]}`,
		`{"kind":"recompute",` + ids + `,"tags":["nightly"]}`,
		`{"kind":"keycount",` + lines + `}`,
		`{"kind":"recompute",` + ids + `,"tags":["team:b"]}`,
	}
	var id []string // in submission order
	var created []time.Time
	for _, b := range bodies {
		j := v.mustSubmit(t, b)
		id = append(id, j.ID)
		created = append(created, j.CreatedAt)
		v.clk.Advance(time.Second)
	}
	if r := v.do(t, http.MethodPost, "/jobs/"+id[2]+"/cancel", "", nil); r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	newest := func(idx ...int) []string { // ids of the given jobs, newest first
		out := []string{}
		for _, i := range slices.Backward(idx) {
			out = append(out, id[i])
		}
		return out
	}
	rfc := func(i int) string { return created[i].Format(time.RFC3339) }

	t.Run("filters", func(t *testing.T) {
		tests := []struct {
			query url.Values
			want  []string
		}{
			{query: url.Values{}, want: newest(0, 1, 2, 3, 4)},
			{query: url.Values{"kind": {"keycount"}}, want: newest(1, 3)},
			{query: url.Values{"kind": {"recompute"}}, want: newest(0, 2, 4)},
			{query: url.Values{"kind": {"unregistered"}}, want: newest()},
			{query: url.Values{"state": {"cancelled"}}, want: newest(2)},
			{query: url.Values{"state": {"queued"}}, want: newest(0, 1, 3, 4)},
			{query: url.Values{"state": {"running"}}, want: newest()},
			{query: url.Values{"tag": {"team:a"}}, want: newest(0, 1)},
			{query: url.Values{"tag": {"nightly"}}, want: newest(0, 2)},
			{query: url.Values{"tag": {"team"}}, want: newest()},
			{query: url.Values{"tag": {"nightly"}, "kind": {"recompute"}, "state": {"queued"}}, want: newest(0)},
			{query: url.Values{"tag": {"team:a"}, "kind": {"keycount"}}, want: newest(1)},
			{query: url.Values{"created_after": {rfc(2)}}, want: newest(2, 3, 4)},
			{query: url.Values{"created_before": {rfc(2)}}, want: newest(0, 1)},
			{query: url.Values{"created_after": {rfc(1)}, "created_before": {rfc(3)}}, want: newest(1, 2)},
			{query: url.Values{"created_after": {created[1].In(time.FixedZone("x", -3600)).Format(time.RFC3339)}, "created_before": {rfc(3)}}, want: newest(1, 2)},
			{query: url.Values{"limit": {"1000"}, "state": {"queued"}, "kind": {"keycount"}}, want: newest(1, 3)},
		}
		for _, tc := range tests {
			got, next := v.list(t, tc.query)
			if !slices.Equal(got, tc.want) || next != "" {
				t.Errorf("GET /jobs?%s: %v next %q, want %v and no next", tc.query.Encode(), got, next, tc.want)
			}
		}
	})

	t.Run("views carry progress", func(t *testing.T) {
		r := v.get(t, "/jobs?kind=keycount")
		var page struct {
			Jobs []map[string]json.RawMessage `json:"jobs"`
		}
		if err := json.Unmarshal(r.body, &page); err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if _, ok := j["progress"]; !ok {
				t.Errorf("listed job without progress: %v", j)
			}
		}
	})

	t.Run("pages", func(t *testing.T) {
		for _, tc := range []struct {
			query url.Values
			want  []string
			pages []int
		}{
			{query: url.Values{"limit": {"2"}}, want: newest(0, 1, 2, 3, 4), pages: []int{2, 2, 1}},
			{query: url.Values{"limit": {"1"}, "kind": {"recompute"}}, want: newest(0, 2, 4), pages: []int{1, 1, 1}},
			{query: url.Values{"limit": {"3"}, "state": {"queued"}}, want: newest(0, 1, 3, 4), pages: []int{3, 1}},
		} {
			var all []string
			var sizes []int
			q := tc.query
			for range 10 {
				got, next := v.list(t, q)
				all = append(all, got...)
				sizes = append(sizes, len(got))
				if next == "" {
					break
				}
				q = url.Values{}
				for k, vs := range tc.query {
					q[k] = vs
				}
				q.Set("cursor", next)
			}
			if !slices.Equal(all, tc.want) || !slices.Equal(sizes, tc.pages) {
				t.Errorf("GET /jobs?%s paged: %v in pages %v, want %v in pages %v", tc.query.Encode(), all, sizes, tc.want, tc.pages)
			}
		}
	})

	t.Run("bad queries", func(t *testing.T) {
		for _, q := range []string{
			"state=bogus", "state=Queued", "state=pending",
			"limit=0", "limit=1001", "limit=x", "limit=-1", "limit=2.5",
			"sort=created", "kind=recompute&page=2", "Kind=recompute",
			"created_after=yesterday", "created_after=2026-03-04", "created_before=1741064767",
			"cursor=!!!", "cursor=not-a-cursor", "cursor=" + url.QueryEscape(`{"x":1}`),
		} {
			v.get(t, "/jobs?"+q).wantErr(t, http.StatusBadRequest, "invalid_argument", "")
		}
	})
}

// driveToEnd runs job id's tasks by hand, as a host would, until the job
// reaches a terminal state: control tasks go to Control, chunk tasks to
// ProcessChunk, and a retry verdict hides its message for the back-off,
// which the fake clock then skips.
func (v *env) driveToEnd(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	for range 50 {
		ran := 0
		for _, name := range []string{v.e.Queues().Slice(), v.e.Queues().Channel(engine.DefaultChannel)} {
			for {
				msgs, err := v.be.Queue.Receive(ctx, name, queue.MaxBatch, time.Hour, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(msgs) == 0 {
					break
				}
				for _, m := range msgs {
					ran++
					if name == v.e.Queues().Slice() {
						if err := v.e.Control(ctx, m.Body, m.ReceiveCount); err != nil {
							t.Fatalf("control %s: %v", m.Body, err)
						}
						if err := v.be.Queue.Delete(ctx, name, m.Receipt); err != nil {
							t.Fatal(err)
						}
						continue
					}
					verdict := v.e.ProcessChunk(ctx, m.Body, engine.Delivery{MessageID: m.ID, ReceiveCount: m.ReceiveCount})
					if verdict.Ack {
						if err := v.be.Queue.Delete(ctx, name, m.Receipt); err != nil {
							t.Fatal(err)
						}
						continue
					}
					if err := v.be.Queue.ChangeVisibility(ctx, name, queue.VisibilityChange{Receipt: m.Receipt, Timeout: verdict.RetryAfter}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		j, err := v.be.Store.GetJob(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State.Terminal() {
			return
		}
		if ran == 0 {
			// Only hidden retries are left: let their back-off pass.
			v.clk.Advance(time.Minute)
		}
	}
	t.Fatalf("job %s did not finish", id)
}

// chunkPage fetches GET path and decodes the chunk page.
func (v *env) chunkPage(t *testing.T, path string) job.ChunkPage {
	t.Helper()
	r := v.get(t, path)
	if r.status != http.StatusOK {
		t.Fatalf("GET %s: status %d; body %s", path, r.status, r.body)
	}
	r.wantJSON(t)
	var raw map[string]json.RawMessage
	decodeStrict(t, r.body, &raw)
	if c := string(raw["chunks"]); c == "" || c == "null" {
		t.Errorf("GET %s: chunks is %q, want a list", path, c)
	}
	var p job.ChunkPage
	decodeStrict(t, r.body, &p)
	return p
}

func indexes(cs []*job.Chunk) []int64 {
	out := []int64{}
	for _, c := range cs {
		out = append(out, c.Index)
	}
	return out
}

func TestChunks(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	// Four chunks of 10,000 ids: chunk 1 is busy on its first attempt and
	// chunk 2 fails for good; a quarter may fail, so the job succeeds.
	j := v.mustSubmit(t, `{"kind":"recompute","args":{"flaky_every":3,"flaky_attempts":1,"poison_chunk":2},
		"input":{"type":"ids","start":0,"end":40000},"tolerate_failed_pct":25}`)

	// Before any attempt there is no chunk record.
	if p := v.chunkPage(t, "/jobs/"+j.ID+"/chunks"); len(p.Chunks) != 0 {
		t.Errorf("chunks %v before processing", indexes(p.Chunks))
	}

	v.driveToEnd(t, j.ID)

	r := v.get(t, "/jobs/"+j.ID)
	if r.status != http.StatusOK {
		t.Fatalf("GET job: %d %s", r.status, r.body)
	}
	got := r.view(t)
	wantProgress := engine.Progress{ChunksTotal: 4, ChunksDone: 3, ChunksFailed: 1, ItemsTotal: 40000, ItemsDone: 30000, ItemsFailed: 10000,
		Retries: 1, Sliced: true, Percent: 100, Elapsed: got.Progress.Elapsed, ItemsPerSec: got.Progress.ItemsPerSec}
	if got.State != job.StateSucceeded || got.Progress != wantProgress {
		t.Errorf("job state %s progress %+v, want succeeded with %+v", got.State, got.Progress, wantProgress)
	}

	all := v.chunkPage(t, "/jobs/"+j.ID+"/chunks")
	if !slices.Equal(indexes(all.Chunks), []int64{0, 1, 2, 3}) || all.Next != "" {
		t.Fatalf("chunks %v next %q, want 0..3 on one page", indexes(all.Chunks), all.Next)
	}
	for _, c := range all.Chunks {
		if c.JobID != j.ID {
			t.Errorf("chunk %d of job %q", c.Index, c.JobID)
		}
	}
	flaky, poison := all.Chunks[1], all.Chunks[2]
	if flaky.State != job.ChunkSucceeded || len(flaky.Attempts) != 2 ||
		flaky.Attempts[0].N != 1 || flaky.Attempts[0].Outcome != job.OutcomeRetry || !strings.Contains(flaky.Attempts[0].Error, "database busy (attempt 1)") ||
		flaky.Attempts[1].N != 2 || flaky.Attempts[1].Outcome != job.OutcomeSucceeded || flaky.Attempts[1].Error != "" {
		t.Errorf("flaky chunk %+v, want a busy retry then success", *flaky)
	}
	if poison.State != job.ChunkFailed || len(poison.Attempts) != 1 || poison.Attempts[0].N != 1 ||
		poison.Attempts[0].Outcome != job.OutcomeFailed || poison.Attempts[0].Worker != "api-test" ||
		!strings.Contains(poison.Attempts[0].Error, "chunk 2: ids 20000..30000 reference a deleted table") {
		t.Errorf("poison chunk %+v, want one permanent failure with its error", *poison)
	}

	t.Run("state filter", func(t *testing.T) {
		for _, tc := range []struct {
			state string
			want  []int64
		}{
			{"failed", []int64{2}},
			{"succeeded", []int64{0, 1, 3}},
			{"retrying", []int64{}},
		} {
			p := v.chunkPage(t, "/jobs/"+j.ID+"/chunks?state="+tc.state)
			if !slices.Equal(indexes(p.Chunks), tc.want) {
				t.Errorf("state=%s: chunks %v, want %v", tc.state, indexes(p.Chunks), tc.want)
			}
			for _, c := range p.Chunks {
				if string(c.State) != tc.state {
					t.Errorf("state=%s listed chunk %d in state %s", tc.state, c.Index, c.State)
				}
			}
		}
		p := v.chunkPage(t, "/jobs/"+j.ID+"/chunks?state=failed")
		if len(p.Chunks) == 1 && (len(p.Chunks[0].Attempts) != 1 || p.Chunks[0].Attempts[0].Error != poison.Attempts[0].Error) {
			t.Errorf("filtered failed chunk %+v lacks its attempt history", *p.Chunks[0])
		}
	})

	t.Run("pages", func(t *testing.T) {
		var seen []int64
		path := "/jobs/" + j.ID + "/chunks?limit=3"
		for range 5 {
			p := v.chunkPage(t, path)
			seen = append(seen, indexes(p.Chunks)...)
			if p.Next == "" {
				break
			}
			path = "/jobs/" + j.ID + "/chunks?limit=3&cursor=" + url.QueryEscape(p.Next)
		}
		if !slices.Equal(seen, []int64{0, 1, 2, 3}) {
			t.Errorf("paged chunks %v, want 0..3 once each", seen)
		}
	})

	t.Run("bad queries", func(t *testing.T) {
		for _, q := range []string{"state=bogus", "state=pending", "state=FAILED", "limit=0", "limit=1001", "limit=x", "sort=index"} {
			v.get(t, "/jobs/"+j.ID+"/chunks?"+q).wantErr(t, http.StatusBadRequest, "invalid_argument", "")
		}
	})

	t.Run("unknown job", func(t *testing.T) {
		v.get(t, "/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/chunks").wantErr(t, http.StatusNotFound, "not_found", "")
		v.get(t, "/jobs/nope/chunks?state=failed").wantErr(t, http.StatusNotFound, "not_found", "")
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	j := v.mustSubmit(t, `{"kind":"recompute","input":{"type":"ids","end":100}}`)
	v.clk.Advance(time.Second)

	r := v.do(t, http.MethodPost, "/jobs/"+j.ID+"/cancel", "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("cancel: status %d; body %s", r.status, r.body)
	}
	c := r.view(t)
	if c.ID != j.ID || c.State != job.StateCancelled || c.Error != "cancelled" || c.FinishedAt == nil || !c.FinishedAt.Equal(t0.Add(time.Second)) {
		t.Errorf("cancelled job %+v", *c.Job)
	}
	if g := v.get(t, "/jobs/"+j.ID).view(t); g.State != job.StateCancelled {
		t.Errorf("GET after cancel: state %s", g.State)
	}

	again := v.do(t, http.MethodPost, "/jobs/"+j.ID+"/cancel", "", nil)
	e := again.wantErr(t, http.StatusConflict, "conflict", "")
	if e.Job == nil || e.Job.ID != j.ID || e.Job.State != job.StateCancelled {
		t.Errorf("conflict body job %+v, want the cancelled job", e.Job)
	}

	v.do(t, http.MethodPost, "/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel", "", nil).wantErr(t, http.StatusNotFound, "not_found", "")

	// The cancelled job's slice task finds nothing to do.
	v.driveToEnd(t, j.ID)
	if g := v.get(t, "/jobs/"+j.ID).view(t); g.State != job.StateCancelled || g.StartedAt != nil {
		t.Errorf("after its slice task ran: %+v", *g.Job)
	}
}

func TestCancelFinishedJob(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	j := v.mustSubmit(t, `{"kind":"recompute","input":{"type":"ids","end":100}}`)
	v.driveToEnd(t, j.ID)
	e := v.do(t, http.MethodPost, "/jobs/"+j.ID+"/cancel", "", nil).wantErr(t, http.StatusConflict, "conflict", "")
	if e.Job == nil || e.Job.ID != j.ID || e.Job.State != job.StateSucceeded {
		t.Errorf("conflict body job %+v, want the succeeded job", e.Job)
	}
	if g := v.get(t, "/jobs/"+j.ID).view(t); g.State != job.StateSucceeded {
		t.Errorf("state %s after a refused cancel", g.State)
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	v := newEnv(t)
	tests := []struct {
		method, path string
		status       int
		code         string
		allow        string
	}{
		{method: "GET", path: "/", status: 404, code: "not_found"},
		{method: "GET", path: "/nope", status: 404, code: "not_found"},
		{method: "GET", path: "/jobs/", status: 404, code: "not_found"},
		{method: "GET", path: "/jobs/x/y/z", status: 404, code: "not_found"},
		{method: "POST", path: "/kinds/x", status: 404, code: "not_found"},
		{method: "DELETE", path: "/jobs", status: 405, code: "method_not_allowed", allow: "GET, HEAD, POST"},
		{method: "PUT", path: "/jobs", status: 405, code: "method_not_allowed", allow: "GET, HEAD, POST"},
		{method: "DELETE", path: "/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", status: 405, code: "method_not_allowed", allow: "GET, HEAD"},
		{method: "POST", path: "/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", status: 405, code: "method_not_allowed", allow: "GET, HEAD"},
		{method: "GET", path: "/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel", status: 405, code: "method_not_allowed", allow: "POST"},
		{method: "POST", path: "/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/chunks", status: 405, code: "method_not_allowed", allow: "GET, HEAD"},
		{method: "POST", path: "/healthz", status: 405, code: "method_not_allowed", allow: "GET, HEAD"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := v.do(t, tc.method, tc.path, "", nil)
			e := r.wantErr(t, tc.status, tc.code, "")
			if tc.method != "GET" && tc.status == 404 && !strings.Contains(e.Message, tc.method) {
				t.Errorf("message %q", e.Message)
			}
			if got := r.header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
		})
	}

	t.Run("healthz", func(t *testing.T) {
		r := v.get(t, "/healthz")
		r.wantJSON(t)
		if r.status != 200 || strings.Join(strings.Fields(string(r.body)), "") != `{"status":"ok"}` {
			t.Errorf("healthz: %d %s", r.status, r.body)
		}
	})
	t.Run("kinds", func(t *testing.T) {
		r := v.get(t, "/kinds")
		r.wantJSON(t)
		var got struct {
			Kinds    []string `json:"kinds"`
			Channels []string `json:"channels"`
		}
		decodeStrict(t, r.body, &got)
		if r.status != 200 || !slices.Equal(got.Kinds, []string{"keycount", "recompute"}) || !slices.Equal(got.Channels, []string{"default"}) {
			t.Errorf("kinds: %d %s", r.status, r.body)
		}
	})
	// No route wrote anything.
	v.assertNothingWritten(t)
}
