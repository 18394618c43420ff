package s3blob_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/awsmetrics"
	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/blob/blobtest"
	"github.com/slicework/slicework/shared/blob/s3blob"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/faults"
	"github.com/slicework/slicework/shared/job"
)

func TestMain(m *testing.M) { os.Exit(emulator.Run(m)) }

var bucketSeq atomic.Int64

// newStore returns a Store on a fresh bucket of emulator k, and the counter
// of the requests its client makes.
func newStore(t *testing.T, k emulator.Kind) (*s3blob.Store, *awsmetrics.Counter) {
	t.Helper()
	s, _, counter := newStoreClient(t, k)
	return s, counter
}

// newStoreClient is newStore that also returns the S3 client.
func newStoreClient(t *testing.T, k emulator.Kind) (*s3blob.Store, *s3.Client, *awsmetrics.Counter) {
	t.Helper()
	cfg := emulator.Config(t, k, nil)
	// A pass-through faults.Transport sends in-memory request bodies, which
	// keeps the SDK from the rare spurious retry that makes exact counts flaky
	// (see faults.Transport).
	cfg.HTTPClient = &http.Client{Transport: &faults.Transport{}}
	counter := awsmetrics.New()
	counter.Attach(&cfg)
	bucket := fmt.Sprintf("s3blob-%d-%d", time.Now().UnixNano(), bucketSeq.Add(1))
	client := awsconfig.S3(cfg)
	s := s3blob.New(client, bucket)
	if err := s.CreateBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	return s, client, counter
}

func TestConformance(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			blobtest.Run(t, func(t *testing.T) blob.Store {
				s, _ := newStore(t, k)
				return s
			})
		})
	}
}

// pattern returns n bytes in which every 8-byte word differs, so a range
// read from a wrong offset cannot match.
func pattern(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// onlyReader hides every method but Read, so Put cannot seek or size it.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func readAll(t *testing.T, rc io.ReadCloser, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return b
}

// Objects up to PartSize go up in one PutObject, larger ones as a multipart
// upload of PartSize parts; both read back byte for byte, and ranges across
// a part boundary are exact.
func TestPutSizes(t *testing.T) {
	t.Parallel()
	const part = s3blob.PartSize
	data := pattern(2*part + 1<<20) // 17 MiB
	for _, k := range emulator.Kinds {
		for _, tc := range []struct {
			name  string
			size  int
			calls map[string]int64
		}{
			{"empty", 0, map[string]int64{"PutObject": 1}},
			{"small", 1000, map[string]int64{"PutObject": 1}},
			{"exactly one part", part, map[string]int64{"PutObject": 1}},
			{"one part and a byte", part + 1, map[string]int64{"CreateMultipartUpload": 1, "UploadPart": 2, "CompleteMultipartUpload": 1}},
			{"17 MiB", len(data), map[string]int64{"CreateMultipartUpload": 1, "UploadPart": 3, "CompleteMultipartUpload": 1}},
		} {
			t.Run(string(k)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s, counter := newStore(t, k)
				want := data[:tc.size]
				if err := s.Put(ctx, "big/obj", onlyReader{bytes.NewReader(want)}); err != nil {
					t.Fatal(err)
				}
				rep := counter.Snapshot()
				for _, row := range rep.Rows {
					if row.Calls != tc.calls[row.Operation] {
						t.Errorf("%s calls = %d, want %d", row.Operation, row.Calls, tc.calls[row.Operation])
					}
				}
				for op, n := range tc.calls {
					if got := rep.Get("S3", op).Calls; got != n {
						t.Errorf("%s calls = %d, want %d", op, got, n)
					}
				}
				rc, err := s.Get(ctx, "big/obj")
				got := readAll(t, rc, err)
				if !bytes.Equal(got, want) {
					t.Fatalf("Get: %d bytes, want %d, equal prefix %d", len(got), len(want), commonPrefix(got, want))
				}
				info, err := s.Head(ctx, "big/obj")
				if err != nil || info.Size != int64(tc.size) {
					t.Fatalf("Head = %+v, %v; want size %d", info, err, tc.size)
				}
				if tc.size < part+1 {
					return
				}
				for _, r := range []struct{ off, n int64 }{
					{part - 10, 20},             // across the first part boundary
					{part - 1, 2},               // the last byte of part 1, the first of part 2
					{int64(tc.size) - 5, 100},   // cut at the end
					{0, int64(tc.size) + 1},     // the whole object and more
					{int64(tc.size), 10},        // at the end
					{int64(tc.size) + 1000, 10}, // past the end
				} {
					rc, err := s.GetRange(ctx, "big/obj", r.off, r.n)
					got := readAll(t, rc, err)
					lo, hi := min(r.off, int64(tc.size)), min(r.off+r.n, int64(tc.size))
					if !bytes.Equal(got, want[lo:hi]) {
						t.Errorf("GetRange(%d, %d): %d bytes, want %d, equal prefix %d", r.off, r.n, len(got), hi-lo, commonPrefix(got, want[lo:hi]))
					}
				}
			})
		}
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// failingReader yields n bytes of data and then fails.
type failingReader struct {
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	k := min(len(p), f.n)
	for i := range p[:k] {
		p[i] = 'x'
	}
	f.n -= k
	return k, nil
}

// A multipart upload that fails part-way (reader error or cancelled context)
// is aborted: no object appears and no upload is left behind.
func TestPutMultipartAborts(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	for _, k := range emulator.Kinds {
		for _, tc := range []struct {
			name   string
			reader func(cancel context.CancelFunc) io.Reader
			want   error
		}{
			{"reader fails", func(context.CancelFunc) io.Reader {
				return &failingReader{n: s3blob.PartSize + 100, err: boom}
			}, boom},
			{"context cancelled", func(cancel context.CancelFunc) io.Reader {
				return io.MultiReader(bytes.NewReader(make([]byte, s3blob.PartSize+100)), cancelReader{cancel}, strings.NewReader("more"))
			}, context.Canceled},
		} {
			t.Run(string(k)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s, client, counter := newStoreClient(t, k)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				err := s.Put(ctx, "fail/obj", tc.reader(cancel))
				if !errors.Is(err, tc.want) {
					t.Fatalf("Put = %v, want %v", err, tc.want)
				}
				rep := counter.Snapshot()
				if got := rep.Get("S3", "AbortMultipartUpload"); got.Calls != 1 || got.Errors != 0 {
					t.Errorf("AbortMultipartUpload = %+v, want 1 successful call", got)
				}
				if n := rep.Get("S3", "CompleteMultipartUpload").Calls; n != 0 {
					t.Errorf("CompleteMultipartUpload calls = %d", n)
				}
				if _, err := s.Head(context.Background(), "fail/obj"); !errors.Is(err, job.ErrNotFound) {
					t.Errorf("Head after failed Put: %v, want ErrNotFound", err)
				}
				ups, err := client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(s.Bucket())})
				if err != nil || len(ups.Uploads) != 0 {
					t.Errorf("uploads left after failed Put: %d, %v", len(ups.Uploads), err)
				}
			})
		}
	}
}

// cancelReader cancels a context when read, then reports end of input.
type cancelReader struct{ cancel context.CancelFunc }

func (c cancelReader) Read([]byte) (int, error) { c.cancel(); return 0, io.EOF }

// Invalid keys and ranges are refused with job.ErrInvalid before any request.
func TestInvalidBeforeAnyCall(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, counter := newStore(t, k)
			for name, call := range map[string]func() error{
				"Put":      func() error { return s.Put(ctx, "a/../b", strings.NewReader("x")) },
				"Get":      func() error { _, err := s.Get(ctx, "/abs"); return err },
				"GetRange": func() error { _, err := s.GetRange(ctx, "a//b", 0, 1); return err },
				"range":    func() error { _, err := s.GetRange(ctx, "ok", -1, 1); return err },
				"Head":     func() error { _, err := s.Head(ctx, ""); return err },
				"Delete":   func() error { return s.Delete(ctx, "trail/") },
			} {
				if err := call(); !errors.Is(err, job.ErrInvalid) {
					t.Errorf("%s = %v, want ErrInvalid", name, err)
				}
			}
			if n := counter.Snapshot().Total().Calls; n != 0 {
				t.Errorf("%d calls made for invalid input", n)
			}
			// A zero-length range makes no call either.
			rc, err := s.GetRange(ctx, "whatever", 5, 0)
			if got := readAll(t, rc, err); len(got) != 0 {
				t.Errorf("GetRange length 0 = %q", got)
			}
			if n := counter.Snapshot().Total().Calls; n != 0 {
				t.Errorf("GetRange length 0 made %d calls", n)
			}
		})
	}
}

// CreateBucket is idempotent, in us-east-1 and in a region that needs a
// location constraint.
func TestCreateBucketIdempotent(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		for _, region := range []string{"us-east-1", "eu-west-1"} {
			t.Run(string(k)+"/"+region, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				cfg := emulator.Config(t, k, nil)
				client := awsconfig.S3(cfg, func(o *s3.Options) { o.Region = region })
				bucket := fmt.Sprintf("s3blob-idem-%d-%d", time.Now().UnixNano(), bucketSeq.Add(1))
				s := s3blob.New(client, bucket)
				for i := range 2 {
					if err := s.CreateBucket(ctx); err != nil {
						t.Fatalf("CreateBucket #%d: %v", i+1, err)
					}
				}
				loc, err := client.GetBucketLocation(ctx, &s3.GetBucketLocationInput{Bucket: aws.String(bucket)})
				if err != nil {
					t.Fatal(err)
				}
				want := region
				if region == "us-east-1" {
					want = "" // S3 reports us-east-1 as an empty constraint
				}
				if got := string(loc.LocationConstraint); got != want {
					t.Errorf("bucket location = %q, want %q", got, want)
				}
				if err := s.Put(ctx, "k", strings.NewReader("v")); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// List pages through more than one ListObjectsV2 page.
func TestListPages(t *testing.T) {
	t.Parallel()
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, counter := newStore(t, k)
			const n = 1005 // S3 pages hold at most 1000 keys
			var want []string
			for i := range n {
				key := fmt.Sprintf("p/%04d", (i*7)%n) // written out of order
				want = append(want, fmt.Sprintf("p/%04d", i))
				if err := s.Put(ctx, key, strings.NewReader("x")); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Put(ctx, "q/outside", strings.NewReader("x")); err != nil {
				t.Fatal(err)
			}
			counter.Reset()
			infos, err := s.List(ctx, "p/")
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) != n {
				t.Fatalf("List returned %d objects, want %d", len(infos), n)
			}
			for i, info := range infos {
				if info.Key != want[i] || info.Size != 1 || info.Modified.IsZero() {
					t.Fatalf("List[%d] = %+v, want key %s size 1", i, info, want[i])
				}
			}
			if pages := counter.Snapshot().Get("S3", "ListObjectsV2").Calls; pages < 2 {
				t.Errorf("ListObjectsV2 calls = %d, want ≥ 2 pages", pages)
			}
		})
	}
}

// A server may ignore the Range header and send the whole object with 200
// (HTTP allows it); GetRange still returns exactly the range.
func TestGetRangeIgnoredByServer(t *testing.T) {
	t.Parallel()
	const body = "0123456789"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.Header.Get("Range") == "" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		io.WriteString(w, body)
	}))
	defer srv.Close()
	cfg, err := awsconfig.ForEndpoint(context.Background(), srv.URL, "us-east-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	s := s3blob.New(awsconfig.S3(cfg), "bucket")
	for _, tc := range []struct {
		off, n int64
		want   string
	}{{0, 3, "012"}, {3, 4, "3456"}, {8, 10, "89"}, {10, 5, ""}, {20, 5, ""}} {
		rc, err := s.GetRange(context.Background(), "k", tc.off, tc.n)
		if got := string(readAll(t, rc, err)); got != tc.want {
			t.Errorf("GetRange(%d, %d) = %q, want %q", tc.off, tc.n, got, tc.want)
		}
	}
}

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func noSuchUpload(r *http.Request) *http.Response {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist.</Message></Error>`
	return &http.Response{StatusCode: 404, Status: "404 Not Found", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: r}
}

// A CompleteMultipartUpload whose answer is lost is retried by the SDK. The
// emulators (like S3 for a while) answer the retry with success; S3 may also
// answer NoSuchUpload, and Put then checks the object's ETag. A NoSuchUpload
// for an upload that was never completed still fails.
func TestLostCompleteResponse(t *testing.T) {
	t.Parallel()
	data := pattern(s3blob.PartSize + 1000)
	for _, k := range emulator.Kinds {
		for _, tc := range []struct {
			name string
			// lose makes the first Complete's answer a 5xx after it ran.
			lose bool
			// forget answers the given Complete attempt (1-based) with
			// NoSuchUpload instead of passing it on; 0 never.
			forget  int64
			wantErr bool
		}{
			{"retry answered by the server", true, 0, false},
			{"retry answered NoSuchUpload", true, 2, false},
			{"upload gone", false, 1, true},
		} {
			t.Run(string(k)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s, _, _ := newStoreClient(t, k)
				var completes, lost atomic.Int64
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					if _, op := faults.Identify(r); op == "CompleteMultipartUpload" && completes.Add(1) == tc.forget {
						return noSuchUpload(r), nil
					}
					return http.DefaultTransport.RoundTrip(r)
				})
				tr := &faults.Transport{Base: base, Mode: faults.After, Match: func(_ faults.Service, op string) bool {
					return tc.lose && op == "CompleteMultipartUpload" && lost.Add(1) == 1
				}, Rate: 1}
				cfg := emulator.Config(t, k, nil)
				cfg.HTTPClient = &http.Client{Transport: tr}
				counter := awsmetrics.New()
				counter.Attach(&cfg)
				s = s3blob.New(awsconfig.S3(cfg), s.Bucket())

				err := s.Put(ctx, "lost/obj", bytes.NewReader(data))
				if tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), "NoSuchUpload") {
						t.Fatalf("Put = %v, want a NoSuchUpload error", err)
					}
					if _, err := s.Head(ctx, "lost/obj"); !errors.Is(err, job.ErrNotFound) {
						t.Errorf("Head after failed Put: %v", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if row := counter.Snapshot().Get("S3", "CompleteMultipartUpload"); row.Calls != 1 || row.Attempts != 2 {
					t.Errorf("CompleteMultipartUpload = %+v, want 1 call of 2 attempts", row)
				}
				if tr.Total() != 1 {
					t.Errorf("injected %d faults, want 1", tr.Total())
				}
				rc, err := s.Get(ctx, "lost/obj")
				if got := readAll(t, rc, err); !bytes.Equal(got, data) {
					t.Errorf("Get: %d bytes, want %d", len(got), len(data))
				}
			})
		}
	}
}
