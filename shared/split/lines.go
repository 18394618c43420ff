package split

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/job"
)

// Window is the size of the continuation reads Lines makes past the end of
// its range to finish the last line, and of the reads HeaderEnd makes.
const Window = 64 << 10

// DefaultHeaderLimit is a sensible limit for HeaderEnd: 1 MiB.
const DefaultHeaderLimit = 1 << 20

// RangeOpener opens length bytes of one object from offset off. Like
// blob.Store.GetRange, a range running past the end of the object is cut at
// the end. The caller closes the reader.
type RangeOpener func(ctx context.Context, off, length int64) (io.ReadCloser, error)

// Opener binds s.GetRange to key.
func Opener(s blob.Store, key string) RangeOpener {
	return func(ctx context.Context, off, length int64) (io.ReadCloser, error) {
		return s.GetRange(ctx, key, off, length)
	}
}

// Lines calls fn for every line of a line-oriented object of size bytes
// whose first byte lies in r, in order, and returns how many lines it
// delivered (fn returned nil).
//
// The object's lines are its content split on '\n'; a final '\n' does not
// start an extra empty line, and empty lines are lines (fn gets an empty
// slice). The slice passed to fn excludes the '\n' and one trailing '\r',
// and is valid only during the call. Running Lines over every range of a
// plan that covers [0, size) therefore delivers every line exactly once.
//
// This is Hadoop's rule, and needs neither a scan nor a copy of the object:
// if r.Start > 0, Lines reads from r.Start−1 and discards everything through
// the first '\n' (so a line starting exactly at r.Start is delivered), then
// delivers lines while their first byte is before r.End, reading past r.End
// only to finish the last one. It reads [r.Start−1, r.End) in one request
// and then, while the last line is unfinished, further requests of Window
// bytes; it never reads the rest of the object. A line is held in memory
// whole. Quoted CSV fields that contain newlines are not supported: such a
// record is seen as several lines, as in Hadoop's TextInputFormat.
//
// r must lie within [0, size), else the error wraps job.ErrInvalid. An
// error from open or from reading is returned with context; an object
// shorter than size gives an error wrapping io.ErrUnexpectedEOF. An error
// from fn stops Lines and is returned wrapped, with the count of lines
// delivered before it.
func Lines(ctx context.Context, open RangeOpener, size int64, r Range, fn func(line []byte) error) (int64, error) {
	return lines(ctx, open, size, r, Window, fn)
}

func lines(ctx context.Context, open RangeOpener, size int64, r Range, window int, fn func(line []byte) error) (int64, error) {
	switch {
	case open == nil || fn == nil:
		return 0, fmt.Errorf("split: lines: nil opener or callback: %w", job.ErrInvalid)
	case size < 0 || r.Start < 0 || r.End < r.Start || r.End > size:
		return 0, fmt.Errorf("split: lines: range [%d, %d) of a %d-byte object: %w", r.Start, r.End, size, job.ErrInvalid)
	case r.Start == r.End:
		return 0, nil
	}
	pos := r.Start // offset of the next byte to read
	skip := false  // discarding the line that started before r.Start
	if pos > 0 {
		pos--
		skip = true
	}
	lineStart := r.Start // offset of the current line, once skip is false
	reqEnd := r.End      // end of the current request
	first := true
	var (
		n       int64
		pending []byte // the current line's bytes from earlier reads
	)
	buf := make([]byte, window)
	deliver := func(line []byte) error {
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("split: line at offset %d: %w", lineStart, err)
		}
		n++
		return nil
	}
	for {
		rc, err := open(ctx, pos, reqEnd-pos)
		if err != nil {
			return n, fmt.Errorf("split: lines: open [%d, %d): %w", pos, reqEnd, err)
		}
		done, err := func() (bool, error) {
			defer rc.Close()
			for pos < reqEnd {
				if err := ctx.Err(); err != nil {
					return false, fmt.Errorf("split: lines: %w", err)
				}
				m, rerr := rc.Read(buf[:min(int64(len(buf)), reqEnd-pos)])
				chunk := buf[:m]
				for len(chunk) > 0 {
					i := bytes.IndexByte(chunk, '\n')
					if i < 0 {
						if !skip {
							pending = append(pending, chunk...)
						}
						pos += int64(len(chunk))
						break
					}
					if skip {
						skip = false
					} else {
						line := chunk[:i]
						if len(pending) > 0 {
							pending = append(pending, line...)
							line = pending
						}
						if err := deliver(line); err != nil {
							return false, err
						}
						pending = pending[:0]
					}
					pos += int64(i) + 1
					chunk = chunk[i+1:]
					lineStart = pos
					if lineStart >= r.End {
						return true, nil
					}
				}
				if rerr == io.EOF {
					break
				}
				if rerr != nil {
					return false, fmt.Errorf("split: lines: read at offset %d: %w", pos, rerr)
				}
			}
			if pos < reqEnd {
				return false, fmt.Errorf("split: lines: object ended at offset %d, expected %d bytes: %w", pos, size, io.ErrUnexpectedEOF)
			}
			return false, nil
		}()
		if err != nil || done {
			return n, err
		}
		if first && skip {
			// No '\n' in [r.Start-1, r.End-1]: no line starts in r.
			return 0, nil
		}
		first = false
		if pos >= size {
			// The object ends without a '\n'; the last line is ours and,
			// because lineStart < r.End <= size, not empty.
			if err := deliver(pending); err != nil {
				return n, err
			}
			return n, nil
		}
		reqEnd = pos + min(int64(window), size-pos)
	}
}

// HeaderEnd returns the offset just past the first line's '\n' of an object
// of size bytes, that is the byte length of a CSV header line with its
// newline; size if the whole object is one line without a '\n'; 0 for an
// empty object. The header line, newline included, must lie within the
// first limit bytes, else the error wraps job.ErrInvalid (DefaultHeaderLimit
// is a sensible limit). It reads Window bytes at a time and stops at the
// first '\n'.
//
// Plan the data of a CSV object with Uniform(headerEnd, size, chunk) and
// read each range with Lines; the header is never delivered as data.
func HeaderEnd(ctx context.Context, open RangeOpener, size int64, limit int64) (int64, error) {
	switch {
	case open == nil:
		return 0, fmt.Errorf("split: header: nil opener: %w", job.ErrInvalid)
	case size < 0 || limit < 1:
		return 0, fmt.Errorf("split: header: size %d, limit %d: %w", size, limit, job.ErrInvalid)
	}
	var pos int64
	for pos < size && pos < limit {
		length := min(Window, size-pos, limit-pos)
		data, err := readRange(ctx, open, pos, length)
		if err != nil {
			return 0, fmt.Errorf("split: header: %w", err)
		}
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return pos + int64(i) + 1, nil
		}
		pos += length
	}
	if pos >= size {
		return size, nil
	}
	return 0, fmt.Errorf("split: header: first line longer than %d bytes: %w", limit, job.ErrInvalid)
}

// Header returns the first headerEnd bytes of the object (as found by
// HeaderEnd) without the trailing '\n' and one '\r' before it. headerEnd 0
// gives an empty header; a negative one is an error wrapping job.ErrInvalid.
func Header(ctx context.Context, open RangeOpener, headerEnd int64) ([]byte, error) {
	switch {
	case open == nil:
		return nil, fmt.Errorf("split: header: nil opener: %w", job.ErrInvalid)
	case headerEnd < 0:
		return nil, fmt.Errorf("split: header end %d: %w", headerEnd, job.ErrInvalid)
	case headerEnd == 0:
		return []byte{}, nil
	}
	data, err := readRange(ctx, open, 0, headerEnd)
	if err != nil {
		return nil, fmt.Errorf("split: header: %w", err)
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	return bytes.TrimSuffix(data, []byte("\r")), nil
}

// readRange reads exactly length bytes from off.
func readRange(ctx context.Context, open RangeOpener, off, length int64) ([]byte, error) {
	rc, err := open(ctx, off, length)
	if err != nil {
		return nil, fmt.Errorf("open [%d, %d): %w", off, off+length, err)
	}
	defer rc.Close()
	data := make([]byte, length)
	if _, err := io.ReadFull(rc, data); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("read [%d, %d): %w", off, off+length, err)
	}
	return data, nil
}
