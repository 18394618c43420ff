package split

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/slicework/slicework/shared/blob/fsblob"
	"github.com/slicework/slicework/shared/job"
	"pgregory.net/rapid"
)

// refLines is the reference definition of an object's lines: split on
// '\n', no extra empty line after a final '\n', one trailing '\r' dropped.
func refLines(content []byte) []string {
	if len(content) == 0 {
		return []string{}
	}
	parts := strings.Split(string(content), "\n")
	if parts[len(parts)-1] == "" {
		parts = parts[:len(parts)-1]
	}
	for i, p := range parts {
		parts[i] = strings.TrimSuffix(p, "\r")
	}
	return parts
}

// bytesOpener serves ranges of content like blob.Store.GetRange.
func bytesOpener(content []byte) RangeOpener {
	r := bytes.NewReader(content)
	return func(_ context.Context, off, length int64) (io.ReadCloser, error) {
		if off < 0 || length < 0 {
			return nil, fmt.Errorf("range %d+%d: %w", off, length, job.ErrInvalid)
		}
		return io.NopCloser(io.NewSectionReader(r, off, length)), nil
	}
}

// countingOpener counts the bytes requested and read through open.
type countingOpener struct {
	open      RangeOpener
	size      int64
	read      atomic.Int64
	requested atomic.Int64 // sum of the request lengths, cut at size
}

func (c *countingOpener) Open(ctx context.Context, off, length int64) (io.ReadCloser, error) {
	c.requested.Add(max(0, min(length, c.size-off)))
	rc, err := c.open(ctx, off, length)
	if err != nil {
		return nil, err
	}
	return struct {
		io.Reader
		io.Closer
	}{countingReader{rc, &c.read}, rc}, nil
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// readAll runs lines over every range of plan and returns the lines in order.
func readAll(t interface {
	Helper()
	Fatalf(string, ...any)
}, open RangeOpener, size int64, plan Plan, window int) []string {
	t.Helper()
	got := []string{}
	var total int64
	for i := int64(0); i < plan.Len(); i++ {
		n, err := lines(context.Background(), open, size, plan.At(i), window, func(line []byte) error {
			got = append(got, string(line))
			return nil
		})
		if err != nil {
			t.Fatalf("range %v: %v", plan.At(i), err)
		}
		total += n
	}
	if total != int64(len(got)) {
		t.Fatalf("returned counts sum to %d, delivered %d lines", total, len(got))
	}
	return got
}

// genContent draws an object of random lines: empty, short, or long enough
// to span several chunks and windows; "\n" or "\r\n" endings; with or
// without a final newline.
func genContent(t *rapid.T, maxLong int) []byte {
	line := rapid.OneOf(
		rapid.Just(""),
		rapid.StringOfN(rapid.SampledFrom([]rune("ab,\r x")), 1, 8, -1),
		rapid.Custom(func(t *rapid.T) string {
			return strings.Repeat(rapid.SampledFrom([]string{"x", "y\r"}).Draw(t, "fill"), rapid.IntRange(1, maxLong).Draw(t, "len"))
		}),
	)
	ls := rapid.SliceOfN(line, 0, 30).Draw(t, "lines")
	var b bytes.Buffer
	for i, l := range ls {
		b.WriteString(l)
		if i < len(ls)-1 || rapid.Bool().Draw(t, "final newline") {
			b.WriteString(rapid.SampledFrom([]string{"\n", "\r\n"}).Draw(t, "eol"))
		}
	}
	return b.Bytes()
}

func TestLinesProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		content := genContent(t, 60)
		size := int64(len(content))
		chunk := rapid.Int64Range(1, size+3).Draw(t, "chunk")
		window := rapid.IntRange(1, 20).Draw(t, "window")
		plan, err := Uniform(0, size, chunk)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, bytesOpener(content), size, plan, window)
		if want := refLines(content); !reflect.DeepEqual(got, want) {
			t.Fatalf("content %q chunk %d window %d:\n got %q\nwant %q", content, chunk, window, got, want)
		}
	})
}

func TestLinesCSVProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		header := rapid.StringOfN(rapid.SampledFrom([]rune("abc,\r")), 0, 12, -1).Draw(t, "header")
		eol := rapid.SampledFrom([]string{"\n", "\r\n"}).Draw(t, "header eol")
		content := append([]byte(header+eol), genContent(t, 40)...)
		if rapid.Bool().Draw(t, "header only, no newline") {
			content = []byte(header)
		}
		size := int64(len(content))
		window := rapid.IntRange(1, 20).Draw(t, "window")
		open := bytesOpener(content)
		ctx := context.Background()

		headerEnd, err := HeaderEnd(ctx, open, size, DefaultHeaderLimit)
		if err != nil {
			t.Fatal(err)
		}
		wantEnd := size
		if i := bytes.IndexByte(content, '\n'); i >= 0 {
			wantEnd = int64(i) + 1
		}
		if headerEnd != wantEnd {
			t.Fatalf("HeaderEnd = %d, want %d", headerEnd, wantEnd)
		}
		ref := refLines(content)
		gotHeader, err := Header(ctx, open, headerEnd)
		if err != nil {
			t.Fatal(err)
		}
		wantHeader, wantData := "", []string{}
		if len(ref) > 0 {
			wantHeader, wantData = ref[0], ref[1:]
		}
		if string(gotHeader) != wantHeader {
			t.Fatalf("Header = %q, want %q", gotHeader, wantHeader)
		}

		chunk := rapid.Int64Range(1, size-headerEnd+3).Draw(t, "chunk")
		plan, err := Uniform(headerEnd, size, chunk)
		if err != nil {
			t.Fatal(err)
		}
		got := readAll(t, open, size, plan, window)
		if !reflect.DeepEqual(got, wantData) {
			t.Fatalf("content %q chunk %d:\n got %q\nwant %q", content, chunk, got, wantData)
		}
	})
}

// putObject stores content in a fresh fsblob.Store and returns an opener.
func putObject(t *testing.T, content []byte) RangeOpener {
	t.Helper()
	s, err := fsblob.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Put(context.Background(), "in/data.csv", bytes.NewReader(content)); err != nil {
		t.Fatal(err)
	}
	return Opener(s, "in/data.csv")
}

func TestLinesFSBlob(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("L", 3*Window+17) // crosses several windows
	tests := []struct {
		name    string
		content string
		chunks  []int64
	}{
		{name: "empty object", content: "", chunks: []int64{1, 10}},
		{name: "only newline", content: "\n", chunks: []int64{1, 2}},
		{name: "no final newline", content: "a\nbb\nccc", chunks: []int64{1, 2, 3, 100}},
		{name: "empty lines", content: "\n\na\n\n\nb\n\n", chunks: []int64{1, 2, 5}},
		{name: "crlf", content: "h1,h2\r\n1,2\r\n\r\n3,4\r\n", chunks: []int64{1, 3, 7, 64}},
		{name: "lone cr", content: "a\r\r\nb\rc\n\r", chunks: []int64{1, 2, 4}},
		{name: "long line", content: "a\n" + long + "\nb\n" + long, chunks: []int64{1000, Window, Window + 1, 5 * Window}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			content := []byte(tt.content)
			open := putObject(t, content)
			size := int64(len(content))
			want := refLines(content)
			for _, chunk := range tt.chunks {
				plan, err := Uniform(0, size, chunk)
				if err != nil {
					t.Fatal(err)
				}
				got := []string{}
				for i := int64(0); i < plan.Len(); i++ {
					_, err := Lines(context.Background(), open, size, plan.At(i), func(line []byte) error {
						got = append(got, string(line))
						return nil
					})
					if err != nil {
						t.Fatalf("chunk %d range %v: %v", chunk, plan.At(i), err)
					}
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("chunk %d: got %d lines %.200q, want %d lines %.200q", chunk, len(got), got, len(want), want)
				}
			}
		})
	}
}

func TestCSVFSBlob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		content    string
		wantHeader string
		wantData   []string
	}{
		{name: "lf", content: "id,name\n1,a\n2,b\n", wantHeader: "id,name", wantData: []string{"1,a", "2,b"}},
		{name: "crlf no final newline", content: "id,name\r\n1,a\r\n2,b", wantHeader: "id,name", wantData: []string{"1,a", "2,b"}},
		{name: "header only", content: "id,name\n", wantHeader: "id,name", wantData: []string{}},
		{name: "header without newline", content: "id,name", wantHeader: "id,name", wantData: []string{}},
		{name: "empty header", content: "\nx\n", wantHeader: "", wantData: []string{"x"}},
		{name: "empty object", content: "", wantHeader: "", wantData: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			open := putObject(t, []byte(tt.content))
			size := int64(len(tt.content))
			headerEnd, err := HeaderEnd(ctx, open, size, DefaultHeaderLimit)
			if err != nil {
				t.Fatal(err)
			}
			header, err := Header(ctx, open, headerEnd)
			if err != nil {
				t.Fatal(err)
			}
			if string(header) != tt.wantHeader {
				t.Fatalf("header = %q, want %q", header, tt.wantHeader)
			}
			for chunk := int64(1); chunk <= size+1; chunk++ {
				plan, err := Uniform(headerEnd, size, chunk)
				if err != nil {
					t.Fatal(err)
				}
				got := []string{}
				for i := int64(0); i < plan.Len(); i++ {
					if _, err := Lines(ctx, open, size, plan.At(i), func(line []byte) error {
						got = append(got, string(line))
						return nil
					}); err != nil {
						t.Fatal(err)
					}
				}
				if !reflect.DeepEqual(got, tt.wantData) {
					t.Fatalf("chunk %d: data = %q, want %q", chunk, got, tt.wantData)
				}
			}
		})
	}
}

func TestHeaderEndLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		content string
		limit   int64
		want    int64
		wantErr error
	}{
		{name: "fits exactly", content: "abc\nx\n", limit: 4, want: 4},
		{name: "newline past limit", content: "abc\nx\n", limit: 3, wantErr: job.ErrInvalid},
		{name: "one line fits", content: "abc", limit: 3, want: 3},
		{name: "one line too long", content: "abcd", limit: 3, wantErr: job.ErrInvalid},
		{name: "long header across windows", content: strings.Repeat("h", 2*Window+5) + "\nx", limit: DefaultHeaderLimit, want: 2*Window + 6},
		{name: "long header over limit", content: strings.Repeat("h", 2*Window), limit: Window, wantErr: job.ErrInvalid},
		{name: "zero limit", content: "a\n", limit: 0, wantErr: job.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := HeaderEnd(ctx, bytesOpener([]byte(tt.content)), int64(len(tt.content)), tt.limit)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("HeaderEnd = %d, %v, want %d", got, err, tt.want)
			}
		})
	}
}

func TestLinesErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	content := []byte("aa\nbb\ncc\n")
	open := bytesOpener(content)
	size := int64(len(content))
	boom := errors.New("boom")
	noop := func([]byte) error { return nil }
	tests := []struct {
		name      string
		open      RangeOpener
		size      int64
		r         Range
		fn        func([]byte) error
		wantErr   error
		wantCount int64
	}{
		{name: "negative start", open: open, size: size, r: Range{-1, 2}, fn: noop, wantErr: job.ErrInvalid},
		{name: "end before start", open: open, size: size, r: Range{3, 2}, fn: noop, wantErr: job.ErrInvalid},
		{name: "end past size", open: open, size: size, r: Range{0, size + 1}, fn: noop, wantErr: job.ErrInvalid},
		{name: "nil callback", open: open, size: size, r: Range{0, 1}, wantErr: job.ErrInvalid},
		{name: "nil opener", size: size, r: Range{0, 1}, fn: noop, wantErr: job.ErrInvalid},
		{name: "callback error", open: open, size: size, r: Range{0, size}, wantErr: boom, wantCount: 1,
			fn: func(line []byte) error {
				if string(line) == "bb" {
					return boom
				}
				return nil
			}},
		{name: "open error", open: func(context.Context, int64, int64) (io.ReadCloser, error) { return nil, boom },
			size: size, r: Range{0, 1}, fn: noop, wantErr: boom},
		{name: "object shorter than size", open: open, size: size + 5, r: Range{4, size + 2}, fn: noop,
			wantErr: io.ErrUnexpectedEOF, wantCount: 1},
		{name: "empty range", open: open, size: size, r: Range{2, 2}, fn: func([]byte) error { return boom }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := Lines(ctx, tt.open, tt.size, tt.r, tt.fn)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if n != tt.wantCount {
				t.Fatalf("count = %d, want %d", n, tt.wantCount)
			}
		})
	}
}

func TestLinesCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	content := []byte("a\nb\n")
	_, err := Lines(ctx, bytesOpener(content), int64(len(content)), Range{0, 4}, func([]byte) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// bigObject returns about size bytes of lines with random lengths up to
// maxLine, plus the length of its longest line.
func bigObject(seed uint64, size, maxLine int) ([]byte, int64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b bytes.Buffer
	longest := 0
	for b.Len() < size {
		n := rng.IntN(maxLine)
		longest = max(longest, n)
		for range n {
			b.WriteByte('a' + byte(rng.IntN(26)))
		}
		b.WriteByte('\n')
	}
	return b.Bytes(), int64(longest + 1)
}

func TestLinesReadsOnlyItsRange(t *testing.T) {
	t.Parallel()
	base, _ := bigObject(7, 8<<20, 200)
	// A line longer than a window that starts just before the end of the
	// middle range, so Lines must read past r.End to finish it.
	mid := int64(len(base) / 2)
	r := Range{mid - 256<<10, mid}
	longLine := bytes.Repeat([]byte("Z"), 3*Window)
	cut := int64(bytes.LastIndexByte(base[:r.End-10], '\n') + 1)
	content := append(append(append([]byte{}, base[:cut]...), append(longLine, '\n')...), base[cut:]...)
	size := int64(len(content))
	longest := int64(len(longLine) + 1)

	tests := []struct {
		name string
		r    Range
	}{
		{name: "middle range ending in a long line", r: r},
		{name: "middle range of short lines", r: Range{size / 4, size/4 + 100_000}},
		{name: "range inside the long line", r: Range{cut + 10, cut + 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &countingOpener{open: bytesOpener(content), size: size}
			var got []string
			if _, err := Lines(context.Background(), c.Open, size, tt.r, func(line []byte) error {
				got = append(got, string(line))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			bound := tt.r.Len() + 1 + Window + longest
			if read := c.read.Load(); read > bound {
				t.Fatalf("read %d bytes for a %d-byte range, want at most %d", read, tt.r.Len(), bound)
			}
			if req := c.requested.Load(); req > bound {
				t.Fatalf("requested %d bytes for a %d-byte range, want at most %d", req, tt.r.Len(), bound)
			}
			// And the lines are right: those starting in the range.
			var want []string
			var off int64
			for _, l := range refLines(content) {
				if off >= tt.r.Start && off < tt.r.End {
					want = append(want, l)
				}
				off += int64(len(l)) + 1
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %d lines, want %d", len(got), len(want))
			}
		})
	}
}

func BenchmarkLines(b *testing.B) {
	content, _ := bigObject(1, 16<<20, 160)
	size := int64(len(content))
	open := bytesOpener(content)
	plan, err := Uniform(0, size, 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		for i := int64(0); i < plan.Len(); i++ {
			if _, err := Lines(context.Background(), open, size, plan.At(i), func([]byte) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
	}
}
