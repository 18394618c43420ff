// Package api is the slicework HTTP API as an http.Handler: submit, inspect,
// list and cancel jobs. The API Lambda and the local host serve the same
// handler. Errors are JSON with meaningful status codes; a request that is
// rejected writes nothing.
package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
)

// MaxBodyBytes is the largest request body accepted (413 above it).
const MaxBodyBytes = 1 << 20

// Error is the JSON body of every error response.
type Error struct {
	// Code is a stable machine-readable name: invalid_json, invalid_argument,
	// unsupported_media_type, too_large, not_found, method_not_allowed,
	// conflict, duplicate, internal.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the offending request field, for invalid_argument.
	Field string `json:"field,omitempty"`
	// Job is the existing job, for duplicate and conflict.
	Job *job.Job `json:"job,omitempty"`
}

// JobView is a job with its derived progress. GET /jobs/{id} also lists
// its dependants: the jobs whose depends_on holds it.
type JobView struct {
	*job.Job
	Progress engine.Progress `json:"progress"`
	// Links are the job's lineage and details: its parent (when it has
	// one), its children (the jobs its Replace submitted, or submitted
	// with it as parent: GET /jobs?parent=<id>) and its chunks.
	Links      Links    `json:"links"`
	Dependants []string `json:"dependants,omitempty"`
}

// New returns the API handler for e.
func New(e *engine.Engine, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	s := &server{e: e, log: log}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /jobs", s.submit)
	mux.HandleFunc("GET /jobs", s.list)
	mux.HandleFunc("GET /jobs/{id}", s.get)
	mux.HandleFunc("GET /jobs/{id}/chunks", s.chunks)
	mux.HandleFunc("POST /jobs/{id}/cancel", s.cancel)
	mux.HandleFunc("GET /kinds", s.kinds)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The catch-all matches every method, so the mux never answers 405
		// itself: a path served under other methods is reported here.
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeErr(w, http.StatusMethodNotAllowed, Error{Code: "method_not_allowed", Message: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))})
			return
		}
		writeErr(w, http.StatusNotFound, Error{Code: "not_found", Message: fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)})
	})
	return mux
}

// allowedMethods lists the methods other than r's that mux routes r's path
// to a handler other than the catch-all.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		if _, pattern := mux.Handler(&http.Request{Method: m, Host: r.Host, URL: r.URL}); pattern != "" && pattern != "/" {
			allow = append(allow, m)
		}
	}
	return allow
}

type server struct {
	e   *engine.Engine
	log *slog.Logger
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeErr(w http.ResponseWriter, status int, e Error) {
	writeJSON(w, status, map[string]Error{"error": e})
}

// fail maps an engine error to a response.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error, j *job.Job) {
	var ve *engine.ValidationError
	switch {
	case errors.As(err, &ve):
		writeErr(w, http.StatusUnprocessableEntity, Error{Code: "invalid_argument", Message: ve.Error(), Field: ve.Field})
	case errors.Is(err, job.ErrInvalid):
		writeErr(w, http.StatusBadRequest, Error{Code: "invalid_argument", Message: err.Error()})
	case errors.Is(err, job.ErrNotFound):
		writeErr(w, http.StatusNotFound, Error{Code: "not_found", Message: err.Error()})
	case errors.Is(err, job.ErrDuplicate):
		writeErr(w, http.StatusConflict, Error{Code: "duplicate", Message: err.Error(), Job: j})
	case errors.Is(err, job.ErrConflict):
		writeErr(w, http.StatusConflict, Error{Code: "conflict", Message: err.Error(), Job: j})
	default:
		s.log.Error("api request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeErr(w, http.StatusInternalServerError, Error{Code: "internal", Message: "internal error; see the server log"})
	}
}

func (s *server) submit(w http.ResponseWriter, r *http.Request) {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		writeErr(w, http.StatusUnsupportedMediaType, Error{Code: "unsupported_media_type", Message: fmt.Sprintf("Content-Type must be application/json, got %q", ct)})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeErr(w, http.StatusRequestEntityTooLarge, Error{Code: "too_large", Message: fmt.Sprintf("request body over %d bytes; put large inputs in the bucket and submit a lines input", MaxBodyBytes)})
		return
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, Error{Code: "invalid_json", Message: "reading body: " + err.Error()})
		return
	}
	var req engine.Request
	if err := decodeStrict(body, &req); err != nil {
		writeErr(w, http.StatusBadRequest, Error{Code: "invalid_json", Message: err.Error()})
		return
	}
	j, err := s.e.SubmitRequest(r.Context(), req)
	if err != nil {
		s.fail(w, r, err, j)
		return
	}
	w.Header().Set("Location", "/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, s.view(j))
}

func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %v", err)
	}
	// dec.More is false before a stray '}' or ']', so look for the end.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("request body: trailing data after the JSON object")
	}
	return nil
}

// Links are the API paths of a job's relatives and details.
type Links struct {
	Self string `json:"self"`
	// Parent is the job that submitted this one, if any.
	Parent string `json:"parent,omitempty"`
	// Children lists the jobs whose parent this job is, newest first,
	// paginated like GET /jobs.
	Children string `json:"children"`
	Chunks   string `json:"chunks"`
}

func (s *server) view(j *job.Job) JobView {
	v := JobView{Job: j, Progress: engine.ProgressOf(j, s.e.Clock().Now())}
	v.Links = Links{Self: "/jobs/" + j.ID, Children: "/jobs?parent=" + url.QueryEscape(j.ID), Chunks: "/jobs/" + j.ID + "/chunks"}
	if j.Parent != "" {
		v.Links.Parent = "/jobs/" + j.Parent
	}
	return v
}

func (s *server) get(w http.ResponseWriter, r *http.Request) {
	j, err := s.e.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err, nil)
		return
	}
	v := s.view(j)
	if v.Dependants, err = s.e.Dependants(r.Context(), j.ID); err != nil {
		s.fail(w, r, err, nil)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *server) cancel(w http.ResponseWriter, r *http.Request) {
	j, err := s.e.Cancel(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err, j)
		return
	}
	writeJSON(w, http.StatusOK, s.view(j))
}

func (s *server) kinds(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string][]string{"kinds": s.e.Registry().Kinds(), "channels": s.e.Registry().Channels()})
}

// ListResponse is the body of GET /jobs.
type ListResponse struct {
	Jobs []JobView `json:"jobs"`
	Next string    `json:"next,omitempty"`
}

func (s *server) list(w http.ResponseWriter, r *http.Request) {
	q, err := parseQuery(r)
	if err != nil {
		e := Error{Code: "invalid_argument", Message: err.Error()}
		var ve *engine.ValidationError
		if errors.As(err, &ve) {
			e.Field = ve.Field
		}
		writeErr(w, http.StatusBadRequest, e)
		return
	}
	page, err := s.e.List(r.Context(), q)
	if err != nil {
		s.fail(w, r, err, nil)
		return
	}
	out := ListResponse{Jobs: []JobView{}, Next: page.Next}
	for _, j := range page.Jobs {
		out.Jobs = append(out.Jobs, s.view(j))
	}
	writeJSON(w, http.StatusOK, out)
}

// parseQuery reads a job search from GET /jobs's query parameters: kind,
// state, tag, parent, created_after (inclusive) and created_before
// (exclusive) as RFC 3339 times, limit and cursor. Unknown or repeated
// parameters and bad values are errors that name the parameter.
func parseQuery(r *http.Request) (job.Query, error) {
	v := r.URL.Query()
	for k, vals := range v {
		switch k {
		case "kind", "state", "tag", "parent", "created_after", "created_before", "limit", "cursor":
		default:
			return job.Query{}, fmt.Errorf("unknown query parameter %q (kind, state, tag, parent, created_after, created_before, limit, cursor)", k)
		}
		if len(vals) > 1 {
			return job.Query{}, fmt.Errorf("query parameter %q given %d times; give it once", k, len(vals))
		}
	}
	q := job.Query{Kind: v.Get("kind"), Tag: v.Get("tag"), Parent: v.Get("parent"), Cursor: v.Get("cursor")}
	if st := v.Get("state"); st != "" {
		q.State = job.State(st)
		if !q.State.Valid() {
			return q, fmt.Errorf("state %q is not one of %v", st, job.AllStates)
		}
	}
	for name, dst := range map[string]*time.Time{"created_after": &q.CreatedAfter, "created_before": &q.CreatedBefore} {
		if s := v.Get(name); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				return q, fmt.Errorf("%s: want RFC 3339 time, got %q", name, s)
			}
			*dst = t
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > job.MaxPageSize {
			return q, fmt.Errorf("limit: want 1..%d, got %q", job.MaxPageSize, s)
		}
		q.Limit = n
	}
	if err := engine.ValidateQuery(q); err != nil {
		return q, err
	}
	return q, nil
}

func (s *server) chunks(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	q := job.ChunkQuery{Cursor: v.Get("cursor")}
	for k := range v {
		if k != "state" && k != "limit" && k != "cursor" {
			writeErr(w, http.StatusBadRequest, Error{Code: "invalid_argument", Message: fmt.Sprintf("unknown query parameter %q", k)})
			return
		}
	}
	if st := v.Get("state"); st != "" {
		q.State = job.ChunkState(st)
		switch q.State {
		case job.ChunkRetrying, job.ChunkSucceeded, job.ChunkFailed:
		default:
			writeErr(w, http.StatusBadRequest, Error{Code: "invalid_argument", Message: fmt.Sprintf("state %q is not one of retrying, succeeded, failed", st)})
			return
		}
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > job.MaxPageSize {
			writeErr(w, http.StatusBadRequest, Error{Code: "invalid_argument", Message: fmt.Sprintf("limit: want 1..%d, got %q", job.MaxPageSize, s)})
			return
		}
		q.Limit = n
	}
	page, err := s.e.Chunks(r.Context(), r.PathValue("id"), q)
	if err != nil {
		s.fail(w, r, err, nil)
		return
	}
	if page.Chunks == nil {
		page.Chunks = []*job.Chunk{}
	}
	writeJSON(w, http.StatusOK, page)
}
