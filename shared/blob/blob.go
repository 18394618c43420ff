// Package blob is the port for object storage: job inputs, data blocks and
// results. Adapters: fsblob (embedded, a directory) and, for AWS, S3.
package blob

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/slicework/slicework/shared/job"
)

// Info describes a stored object.
type Info struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Store is an object store. Keys are slash-separated paths of printable
// characters without "..", leading "/" or NUL; adapters reject others with
// job.ErrInvalid. Missing objects yield job.ErrNotFound. Implementations are
// safe for concurrent use.
type Store interface {
	// Put stores the whole content of r under key, replacing any object.
	// Readers never see a partly written object.
	Put(ctx context.Context, key string, r io.Reader) error
	// Get opens the whole object.
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// GetRange opens length bytes from offset off. A range that runs past
	// the end is cut at the end; an offset at or past the end yields an empty reader.
	GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error)
	// Head returns the object's size and modification time.
	Head(ctx context.Context, key string) (Info, error)
	// List returns the objects whose keys start with prefix, in key order.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes the object; deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
}

// ValidKey reports whether key obeys the key rules of Store: 1 to 1024 bytes,
// slash-separated segments that are neither empty, "." nor "..", no leading
// or trailing "/", and no control character, DEL or backslash. It returns nil
// for a valid key and otherwise an error wrapping job.ErrInvalid that names
// the rule broken. Adapters call it before touching their backend.
func ValidKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("blob key is empty: %w", job.ErrInvalid)
	case len(key) > 1024:
		return fmt.Errorf("blob key longer than 1024 bytes: %w", job.ErrInvalid)
	case strings.HasPrefix(key, "/"), strings.HasSuffix(key, "/"):
		return fmt.Errorf("blob key %q starts or ends with '/': %w", key, job.ErrInvalid)
	}
	for _, part := range strings.Split(key, "/") {
		if part == "" || part == "." || part == ".." {
			return fmt.Errorf("blob key %q has an empty, '.' or '..' segment: %w", key, job.ErrInvalid)
		}
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f || r == '\\' {
			return fmt.Errorf("blob key %q has a control character or backslash: %w", key, job.ErrInvalid)
		}
	}
	return nil
}

// ContextReader returns a reader of r that fails with ctx's error once ctx
// is done, so a long copy from r stops when its caller gives up.
func ContextReader(ctx context.Context, r io.Reader) io.Reader {
	return contextReader{ctx: ctx, r: r}
}

type contextReader struct {
	ctx context.Context
	r   io.Reader
}

func (c contextReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
