package faults_test

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/slicework/slicework/shared/faults"
)

// fakeBase is a base transport that answers 200 and records what it saw.
type fakeBase struct {
	calls  atomic.Int64
	bodies []*trackedBody // response bodies handed out
	mu     sync.Mutex
	err    error
}

func (f *fakeBase) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	if f.err != nil {
		return nil, f.err
	}
	b := &trackedBody{r: strings.NewReader(`{"ok":true}`)}
	f.mu.Lock()
	f.bodies = append(f.bodies, b)
	f.mu.Unlock()
	return &http.Response{StatusCode: 200, Status: "200 OK", Header: http.Header{}, Body: b, Request: r}, nil
}

// trackedBody records whether it was read to the end and closed.
type trackedBody struct {
	r      io.Reader
	eof    bool
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *trackedBody) Close() error { b.closed = true; return nil }

func request(t *testing.T, service faults.Service, method, target string) (*http.Request, *trackedBody) {
	t.Helper()
	body := &trackedBody{r: strings.NewReader(`{"TableName":"t"}`)}
	url := "http://127.0.0.1:1/"
	if service == faults.S3 {
		url = "http://127.0.0.1:1/bucket/key"
	}
	r, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if target != "" {
		r.Header.Set("X-Amz-Target", target)
	}
	return r, body
}

func TestIdentify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method, url, target string
		service             faults.Service
		op                  string
	}{
		{"POST", "http://h/", "DynamoDB_20120810.PutItem", faults.DynamoDB, "PutItem"},
		{"POST", "http://h/", "DynamoDB_20120810.TransactWriteItems", faults.DynamoDB, "TransactWriteItems"},
		{"POST", "http://h/", "AmazonSQS.SendMessageBatch", faults.SQS, "SendMessageBatch"},
		{"PUT", "http://h/b/k/x.txt?x-id=PutObject", "", faults.S3, "PutObject"},
		{"GET", "http://h/b/k?x-id=GetObject", "", faults.S3, "GetObject"},
		{"HEAD", "http://h/b/k", "", faults.S3, "HeadObject"},
		{"DELETE", "http://h/b/k?x-id=DeleteObject", "", faults.S3, "DeleteObject"},
		{"GET", "http://h/b?list-type=2&prefix=p%2F", "", faults.S3, "ListObjectsV2"},
		{"POST", "http://h/b/k?uploads", "", faults.S3, "CreateMultipartUpload"},
		{"PUT", "http://h/b/k?partNumber=2&uploadId=u&x-id=UploadPart", "", faults.S3, "UploadPart"},
		{"POST", "http://h/b/k?uploadId=u", "", faults.S3, "CompleteMultipartUpload"},
		{"DELETE", "http://h/b/k?uploadId=u&x-id=AbortMultipartUpload", "", faults.S3, "AbortMultipartUpload"},
		{"GET", "http://h/b?location", "", faults.S3, ""},
	} {
		r, err := http.NewRequest(tc.method, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.target != "" {
			r.Header.Set("X-Amz-Target", tc.target)
		}
		if s, op := faults.Identify(r); s != tc.service || op != tc.op {
			t.Errorf("Identify(%s %s %s) = %s %q, want %s %q", tc.method, tc.url, tc.target, s, op, tc.service, tc.op)
		}
	}
}

// outcome is what one request through a Transport produced.
type outcome struct {
	status int
	body   string
}

func run(t *testing.T, tr *faults.Transport, n int, service faults.Service, target string) []outcome {
	t.Helper()
	var out []outcome
	for range n {
		r, _ := request(t, service, "POST", target)
		resp, err := tr.RoundTrip(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out = append(out, outcome{resp.StatusCode, string(b)})
	}
	return out
}

// The same seed gives the same faults; another seed gives others; Rate
// governs the fraction.
func TestDeterministicAndRate(t *testing.T) {
	t.Parallel()
	const n = 2000
	target := "DynamoDB_20120810.PutItem"
	a := run(t, &faults.Transport{Base: &fakeBase{}, Rate: 0.3, Seed: 42}, n, faults.DynamoDB, target)
	b := run(t, &faults.Transport{Base: &fakeBase{}, Rate: 0.3, Seed: 42}, n, faults.DynamoDB, target)
	c := run(t, &faults.Transport{Base: &fakeBase{}, Rate: 0.3, Seed: 43}, n, faults.DynamoDB, target)
	if !slices.Equal(a, b) {
		t.Error("two transports with the same seed injected different faults")
	}
	if slices.Equal(a, c) {
		t.Error("two seeds injected the same faults")
	}
	for _, tc := range []struct {
		rate   float64
		lo, hi int
	}{{0, 0, 0}, {0.3, 540, 660}, {1, n, n}} {
		base := &fakeBase{}
		tr := &faults.Transport{Base: base, Rate: tc.rate, Seed: 1}
		run(t, tr, n, faults.DynamoDB, target)
		if got := tr.Total(); got < tc.lo || got > tc.hi {
			t.Errorf("rate %.1f: %d of %d faulted, want %d..%d", tc.rate, got, n, tc.lo, tc.hi)
		}
		if got := base.calls.Load(); got != int64(n-tr.Total()) {
			t.Errorf("rate %.1f: base saw %d requests, want %d", tc.rate, got, n-tr.Total())
		}
		if tr.Seen() != n {
			t.Errorf("rate %.1f: Seen = %d, want %d", tc.rate, tr.Seen(), n)
		}
	}
}

// Each service's faults have its wire format, and together they cover the
// catalogue Codes lists, in both classes.
func TestResponseShapes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		service faults.Service
		target  string
		method  string
	}{
		{faults.DynamoDB, "DynamoDB_20120810.GetItem", "POST"},
		{faults.SQS, "AmazonSQS.ReceiveMessage", "POST"},
		{faults.S3, "", "PUT"},
		{faults.S3, "", "HEAD"},
	} {
		t.Run(string(tc.service)+"/"+tc.method, func(t *testing.T) {
			t.Parallel()
			tr := &faults.Transport{Base: &fakeBase{}, Rate: 1, Seed: 3}
			seen := map[string]int{}
			for range 200 {
				r, _ := request(t, tc.service, tc.method, tc.target)
				resp, err := tr.RoundTrip(r)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.ContentLength != int64(len(b)) || resp.Header.Get("Content-Length") != fmt.Sprint(len(b)) {
					t.Fatalf("Content-Length %d / %q for a %d-byte body", resp.ContentLength, resp.Header.Get("Content-Length"), len(b))
				}
				var code string
				switch {
				case tc.method == "HEAD":
					if len(b) != 0 {
						t.Fatalf("HEAD answer has a body: %q", b)
					}
					code = fmt.Sprint(resp.StatusCode)
				case tc.service == faults.S3:
					var e struct{ Code, Message string }
					if err := xml.Unmarshal(b, &e); err != nil || e.Message == "" || resp.Header.Get("Content-Type") != "application/xml" {
						t.Fatalf("S3 error body %q: %v", b, err)
					}
					code = e.Code
				default:
					var e struct {
						Type    string `json:"__type"`
						Message string `json:"message"`
					}
					if err := json.Unmarshal(b, &e); err != nil || e.Message == "" || resp.Header.Get("Content-Type") != "application/x-amz-json-1.0" {
						t.Fatalf("JSON error body %q: %v", b, err)
					}
					_, code, _ = strings.Cut(e.Type, "#")
					if tc.service == faults.SQS {
						if q := resp.Header.Get("X-Amzn-Query-Error"); !strings.HasPrefix(q, code+";") {
							t.Fatalf("x-amzn-query-error %q for %s", q, code)
						}
					}
				}
				if want := wantStatus(code); tc.method != "HEAD" && resp.StatusCode != want {
					t.Fatalf("%s answered with status %d, want %d", code, resp.StatusCode, want)
				}
				seen[code]++
			}
			want := (&faults.Transport{}).Codes(tc.service)
			if tc.method == "HEAD" {
				want = []string{"500", "503"}
			}
			var got []string
			for c := range seen {
				got = append(got, c)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("codes %v, want %v", got, want)
			}
		})
	}
}

func wantStatus(code string) int {
	switch code {
	case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestThrottled":
		return 400
	case "InternalError", "InternalServerError", "InternalFailure":
		return 500
	}
	return 503 // SlowDown, ServiceUnavailable
}

// Before: the base never sees a faulted request, whose body is drained and
// closed. After: the base executes it, its answer is drained and closed, and
// a 5xx comes back; a base error passes through uncounted.
func TestModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		mode      faults.Mode
		baseErr   error
		baseCalls int64
		injected  int
		statuses  []int
	}{
		{"before", faults.Before, nil, 0, 1, []int{400, 500, 503}},
		{"after", faults.After, nil, 1, 1, []int{500, 503}},
		{"after, base fails", faults.After, errors.New("connection refused"), 1, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for i := range 20 {
				base := &fakeBase{err: tc.baseErr}
				tr := &faults.Transport{Base: base, Rate: 1, Seed: uint64(i), Mode: tc.mode}
				r, reqBody := request(t, faults.SQS, "POST", "AmazonSQS.SendMessage")
				resp, err := tr.RoundTrip(r)
				if tc.baseErr != nil {
					if !errors.Is(err, tc.baseErr) {
						t.Fatalf("RoundTrip error %v, want %v", err, tc.baseErr)
					}
				} else if err != nil {
					t.Fatal(err)
				} else {
					if !slices.Contains(tc.statuses, resp.StatusCode) {
						t.Fatalf("status %d, want one of %v", resp.StatusCode, tc.statuses)
					}
					if resp.Request != r {
						t.Error("response does not point at its request")
					}
					resp.Body.Close()
				}
				if !reqBody.closed {
					t.Error("request body not closed")
				}
				if !reqBody.eof {
					t.Error("request body not drained")
				}
				if got := base.calls.Load(); got != tc.baseCalls {
					t.Errorf("base saw %d requests, want %d", got, tc.baseCalls)
				}
				for _, b := range base.bodies {
					if !b.eof || !b.closed {
						t.Errorf("the replaced answer was not drained (%v) and closed (%v)", b.eof, b.closed)
					}
				}
				if tr.Total() != tc.injected {
					t.Errorf("Total = %d, want %d", tr.Total(), tc.injected)
				}
			}
		})
	}
}

// Classes limits the faults; After allows only server errors; Match limits
// the requests.
func TestClassesAndMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		tr      *faults.Transport
		service faults.Service
		target  string
		want    []string // codes that may appear, all of which must
	}{
		{"throttle only", &faults.Transport{Classes: faults.Throttle}, faults.DynamoDB, "DynamoDB_20120810.Query",
			[]string{"ProvisionedThroughputExceededException", "ThrottlingException"}},
		{"server errors only", &faults.Transport{Classes: faults.ServerError}, faults.SQS, "AmazonSQS.SendMessage",
			[]string{"InternalFailure", "ServiceUnavailable"}},
		{"after drops throttling", &faults.Transport{Mode: faults.After, Classes: faults.Throttle | faults.ServerError}, faults.S3, "",
			[]string{"InternalError", "ServiceUnavailable"}},
		{"after, throttle only: nothing", &faults.Transport{Mode: faults.After, Classes: faults.Throttle}, faults.S3, "", nil},
		{"match rejects", &faults.Transport{Match: func(s faults.Service, op string) bool { return op == "ReceiveMessage" }}, faults.SQS, "AmazonSQS.SendMessage", nil},
		{"match accepts", &faults.Transport{Classes: faults.Throttle, Match: func(s faults.Service, op string) bool { return s == faults.SQS && op == "SendMessage" }},
			faults.SQS, "AmazonSQS.SendMessage", []string{"RequestThrottled", "ThrottlingException"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.tr.Base, tc.tr.Rate = &fakeBase{}, 1
			run(t, tc.tr, 100, tc.service, tc.target)
			var got []string
			total := 0
			for k, n := range tc.tr.Injected() {
				if k.Service != tc.service {
					t.Errorf("injected %v for a %s request", k, tc.service)
				}
				got = append(got, k.Code)
				total += n
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("codes %v, want %v", got, tc.want)
			}
			if wantTotal := map[bool]int{true: 100, false: 0}[len(tc.want) > 0]; total != wantTotal || tc.tr.Total() != wantTotal {
				t.Errorf("injected %d (Total %d), want %d", total, tc.tr.Total(), wantTotal)
			}
			if want := tc.tr.Codes(tc.service); tc.tr.Match == nil && !slices.Equal(sorted(want), tc.want) {
				t.Errorf("Codes = %v, want %v", want, tc.want)
			}
		})
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	if len(s) == 0 {
		return nil
	}
	return s
}

// Concurrent use is safe and loses no count.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	tr := &faults.Transport{Base: &fakeBase{}, Rate: 0.5, Seed: 9}
	var wg sync.WaitGroup
	var faulted atomic.Int64
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				r, _ := request(t, faults.DynamoDB, "POST", "DynamoDB_20120810.PutItem")
				resp, err := tr.RoundTrip(r)
				if err != nil {
					t.Error(err)
					return
				}
				if resp.StatusCode != 200 {
					faulted.Add(1)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				_ = tr.Injected()
			}
		}()
	}
	wg.Wait()
	if tr.Seen() != 800 || int64(tr.Total()) != faulted.Load() {
		t.Errorf("Seen %d, Total %d, faulted answers %d", tr.Seen(), tr.Total(), faulted.Load())
	}
	if f := float64(faulted.Load()) / 800; math.Abs(f-0.5) > 0.1 {
		t.Errorf("fraction faulted %.2f, want about 0.5", f)
	}
}
