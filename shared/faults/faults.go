// Package faults is an http.RoundTripper for tests that makes a fraction of
// AWS calls fail the way AWS fails them: throttling and 5xx answers in each
// service's wire format, so that the SDK parses, classifies and retries them
// as it would real ones.
//
// Put a *Transport in the HTTP client of an aws.Config, after loading it:
// cfg.HTTPClient = &http.Client{Transport: tr}. (Passed to the loader, a
// plain *http.Client is refused when AWS_CA_BUNDLE is set.) In mode Before a
// faulted request never reaches the server; in mode After it is executed and
// its answer is then replaced by a 5xx, the lost-response case in which the
// SDK retries a request that already took effect. With Rate 0 a Transport
// only passes requests on (see Transport for why that helps exact tests).
package faults

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Mode says when a faulted request fails.
type Mode int

const (
	// Before answers a faulted request without sending it: the server never
	// sees it. Faults are throttling or 5xx answers.
	Before Mode = iota
	// After sends a faulted request, discards the server's answer and
	// answers with a 5xx instead: the request took effect, the caller does
	// not know it.
	After
)

// String returns "before" or "after".
func (m Mode) String() string {
	switch m {
	case Before:
		return "before"
	case After:
		return "after"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Class is a family of faults.
type Class int

const (
	// Throttle is the service's throttling error (HTTP 400 for DynamoDB and
	// SQS, 503 SlowDown for S3). It is only injected in mode Before: a
	// throttled request is never executed.
	Throttle Class = 1 << iota
	// ServerError is HTTP 500 (the service's internal error) or 503
	// ServiceUnavailable.
	ServerError
)

// Service is an AWS service as recognised from a request.
type Service string

// The services Identify recognises.
const (
	S3       Service = "s3"
	SQS      Service = "sqs"
	DynamoDB Service = "dynamodb"
)

// Key names what was injected: the service and the error code sent.
type Key struct {
	Service Service
	Code    string
}

// String returns "service/code".
func (k Key) String() string { return string(k.Service) + "/" + k.Code }

// Transport injects faults into a fraction of the requests it carries and
// passes the others to Base. Set the fields before the first request and do
// not change them afterwards; a Transport must not be copied after first use.
// It is safe for concurrent use.
//
// Given Seed, the sequence of decisions (fault or not, which fault) is fixed:
// sequential requests are faulted identically from run to run. Concurrent
// requests draw from the sequence in the order they arrive.
//
// A request passed on to Base carries an in-memory copy of its body, so that
// the only failures a test sees are the injected ones. (With the SDK's own
// request body, net/http occasionally closes the connection under a 200
// answer from a local emulator, about once in a thousand calls: "use of
// closed network connection", aws-sdk-go-v2 issue 2737. The SDK retries it,
// though the call took effect.)
type Transport struct {
	// Base carries the requests that reach a server; nil means
	// http.DefaultTransport.
	Base http.RoundTripper
	// Rate is the probability in [0, 1] that a matching request is faulted.
	Rate float64
	// Seed seeds the random sequence.
	Seed uint64
	// Mode is Before (the default) or After.
	Mode Mode
	// Classes limits the faults to a set of classes (Throttle|ServerError);
	// zero means every class the Mode allows. In mode After only
	// ServerError is possible.
	Classes Class
	// Match, if set, limits faults to the requests for which it returns true;
	// the operation is "" where Identify cannot tell it. It may be called
	// concurrently. Requests it rejects draw no random number.
	Match func(service Service, operation string) bool

	mu       sync.Mutex
	rng      *rand.Rand
	seen     int
	injected map[Key]int
}

// Injected returns how many faults were injected, by service and error code.
// The map is a copy.
func (t *Transport) Injected() map[Key]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[Key]int, len(t.injected))
	for k, n := range t.injected {
		out[k] = n
	}
	return out
}

// Total returns how many faults were injected in all.
func (t *Transport) Total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.injected {
		n += c
	}
	return n
}

// Seen returns how many requests the Transport has carried, faulted or not.
func (t *Transport) Seen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seen
}

// fault is one injectable answer.
type fault struct {
	class  Class
	status int
	code   string
	// typ is the JSON __type for the JSON protocols (the code with its
	// namespace); query is SQS's x-amzn-query-error header.
	typ, query string
	msg        string
}

var catalog = map[Service][]fault{
	DynamoDB: {
		{class: Throttle, status: 400, code: "ThrottlingException", typ: "com.amazon.coral.availability#ThrottlingException",
			msg: "Rate of requests exceeds the allowed throughput."},
		{class: Throttle, status: 400, code: "ProvisionedThroughputExceededException", typ: "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
			msg: "The level of configured provisioned throughput for the table was exceeded."},
		{class: ServerError, status: 500, code: "InternalServerError", typ: "com.amazonaws.dynamodb.v20120810#InternalServerError",
			msg: "Internal server error"},
		{class: ServerError, status: 503, code: "ServiceUnavailable", typ: "com.amazonaws.dynamodb.v20120810#ServiceUnavailable",
			msg: "The service is unavailable."},
	},
	SQS: {
		{class: Throttle, status: 400, code: "ThrottlingException", typ: "com.amazon.coral.availability#ThrottlingException",
			query: "ThrottlingException;Sender", msg: "Rate exceeded"},
		{class: Throttle, status: 400, code: "RequestThrottled", typ: "com.amazonaws.sqs#RequestThrottled",
			query: "RequestThrottled;Sender", msg: "Request is throttled."},
		{class: ServerError, status: 500, code: "InternalFailure", typ: "com.amazon.coral.service#InternalFailure",
			query: "InternalFailure;Receiver", msg: "The request processing has failed because of an unknown error."},
		{class: ServerError, status: 503, code: "ServiceUnavailable", typ: "com.amazon.coral.availability#ServiceUnavailable",
			query: "ServiceUnavailable;Receiver", msg: "The service is unavailable."},
	},
	S3: {
		{class: Throttle, status: 503, code: "SlowDown", msg: "Please reduce your request rate."},
		{class: ServerError, status: 500, code: "InternalError", msg: "We encountered an internal error. Please try again."},
		{class: ServerError, status: 503, code: "ServiceUnavailable", msg: "Service is unable to handle request."},
	},
}

// Codes returns the error codes t may inject into requests of service, given
// its Mode and Classes, in a fixed order; nil if none. S3 HEAD answers carry
// no body, so for them the SDK reports the status text instead
// ("ServiceUnavailable", "InternalServerError").
func (t *Transport) Codes(service Service) []string {
	var out []string
	for _, f := range choices(service, t.Mode, t.Classes) {
		out = append(out, f.code)
	}
	return out
}

func choices(service Service, m Mode, classes Class) []fault {
	if classes == 0 {
		classes = Throttle | ServerError
	}
	if m == After {
		classes &= ServerError
	}
	var out []fault
	for _, f := range catalog[service] {
		if f.class&classes != 0 {
			out = append(out, f)
		}
	}
	return out
}

// Identify tells the service of an AWS request, and its operation where that
// is cheap: exact for DynamoDB and SQS (the X-Amz-Target header), a guess
// from the method and query for S3 (PutObject, GetObject, HeadObject,
// DeleteObject, ListObjectsV2, CreateMultipartUpload, UploadPart,
// CompleteMultipartUpload, AbortMultipartUpload; bucket-level calls other
// than listing are reported as "" when they cannot be told apart).
// Requests that are neither DynamoDB nor SQS count as S3.
func Identify(r *http.Request) (Service, string) {
	target := r.Header.Get("X-Amz-Target")
	if op, ok := strings.CutPrefix(target, "DynamoDB_20120810."); ok {
		return DynamoDB, op
	}
	if op, ok := strings.CutPrefix(target, "AmazonSQS."); ok {
		return SQS, op
	}
	return S3, s3Operation(r)
}

func s3Operation(r *http.Request) string {
	q := r.URL.Query()
	has := func(k string) bool { _, ok := q[k]; return ok }
	switch {
	case r.Method == http.MethodPost && has("uploads"):
		return "CreateMultipartUpload"
	case r.Method == http.MethodPut && has("partNumber") && has("uploadId"):
		return "UploadPart"
	case r.Method == http.MethodPost && has("uploadId"):
		return "CompleteMultipartUpload"
	case r.Method == http.MethodDelete && has("uploadId"):
		return "AbortMultipartUpload"
	case r.Method == http.MethodGet && q.Get("list-type") == "2":
		return "ListObjectsV2"
	case r.Method == http.MethodPost && has("delete"):
		return "DeleteObjects"
	case len(q) > 0 && !has("x-id"):
		return "" // a sub-resource (acl, tagging, ...) or a bucket-level call
	}
	switch r.Method {
	case http.MethodPut:
		return "PutObject"
	case http.MethodGet:
		return "GetObject"
	case http.MethodHead:
		return "HeadObject"
	case http.MethodDelete:
		return "DeleteObject"
	}
	return ""
}

// RoundTrip implements http.RoundTripper. It always closes the request body.
// A request passed on to Base carries an in-memory copy of its body, read in
// full first (see Transport).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	service, op := Identify(req)
	f, ok := t.decide(service, op)
	if !ok {
		out, err := buffered(req)
		if err != nil {
			return nil, err
		}
		return t.base().RoundTrip(out)
	}
	if t.Mode == After {
		out, err := buffered(req)
		if err != nil {
			t.undo(service, f)
			return nil, err
		}
		resp, err := t.base().RoundTrip(out)
		if err != nil {
			// The request failed on its own; nothing was replaced.
			t.undo(service, f)
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	} else if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return response(req, service, f), nil
}

// buffered returns a copy of req whose body is an in-memory copy of req's,
// which it reads in full and closes.
func buffered(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("faults: read request body: %w", err)
	}
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(b))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return out, nil
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// decide draws whether the request is faulted and with which fault, and
// counts it.
func (t *Transport) decide(service Service, op string) (fault, bool) {
	match := t.Match == nil || t.Match(service, op)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen++
	if !match {
		return fault{}, false
	}
	if t.rng == nil {
		t.rng = rand.New(rand.NewPCG(t.Seed, 0x736c696365776f72)) // "slicewor"
	}
	if t.rng.Float64() >= t.Rate {
		return fault{}, false
	}
	fs := choices(service, t.Mode, t.Classes)
	if len(fs) == 0 {
		return fault{}, false
	}
	f := fs[t.rng.IntN(len(fs))]
	if t.injected == nil {
		t.injected = map[Key]int{}
	}
	t.injected[Key{service, f.code}]++
	return f, true
}

func (t *Transport) undo(service Service, f fault) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.injected[Key{service, f.code}]--
	if t.injected[Key{service, f.code}] == 0 {
		delete(t.injected, Key{service, f.code})
	}
}

// response builds the answer the service would send for fault f.
func response(req *http.Request, service Service, f fault) *http.Response {
	h := http.Header{}
	var body []byte
	switch service {
	case S3:
		h.Set("Content-Type", "application/xml")
		h.Set("X-Amz-Request-Id", "FAULTINJECTED")
		if req.Method != http.MethodHead { // HEAD answers carry no body
			var b bytes.Buffer
			fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
				`<Error><Code>%s</Code><Message>%s</Message><Resource>`, f.code, f.msg)
			_ = xml.EscapeText(&b, []byte(req.URL.Path))
			b.WriteString(`</Resource><RequestId>FAULTINJECTED</RequestId></Error>`)
			body = b.Bytes()
		}
	default:
		h.Set("Content-Type", "application/x-amz-json-1.0")
		h.Set("X-Amzn-Requestid", "FAULTINJECTED")
		if f.query != "" {
			h.Set("X-Amzn-Query-Error", f.query)
		}
		body = fmt.Appendf(nil, `{"__type":%q,"message":%q}`, f.typ, f.msg)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", f.status, http.StatusText(f.status)),
		StatusCode:    f.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}
