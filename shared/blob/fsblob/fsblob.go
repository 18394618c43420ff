// Package fsblob is the embedded blob.Store: one file per object under a
// root directory, written atomically (temporary file, fsync, rename).
package fsblob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/job"
)

// Store keeps objects as files below Root.
type Store struct {
	root string
}

var _ blob.Store = (*Store)(nil)

// New returns a Store rooted at dir, creating it if needed.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fsblob: create %s: %w", dir, err)
	}
	return &Store{root: dir}, nil
}

// Root returns the directory that holds the objects.
func (s *Store) Root() string { return s.root }

// Path returns the file path of key, for reports that point a user at a result.
func (s *Store) Path(key string) (string, error) {
	if err := blob.ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.root, filepath.FromSlash(key)), nil
}

// ValidKey checks the key rules of blob.Store. It is blob.ValidKey, kept for
// existing callers (engine, split); new code calls blob.ValidKey.
func ValidKey(key string) error { return blob.ValidKey(key) }

// Put implements blob.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := s.Path(key)
	if err != nil {
		return fmt.Errorf("fsblob: put: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("fsblob: put %s: %w", key, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return fmt.Errorf("fsblob: put %s: %w", key, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, blob.ContextReader(ctx, r)); err != nil {
		tmp.Close()
		return fmt.Errorf("fsblob: put %s: %w", key, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("fsblob: put %s: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("fsblob: put %s: sync: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("fsblob: put %s: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("fsblob: put %s: %w", key, err)
	}
	return nil
}

func (s *Store) open(key string) (*os.File, error) {
	p, err := s.Path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("object %s: %w", key, job.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("object %s: %w", key, job.ErrNotFound)
	}
	return f, nil
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	f, err := s.open(key)
	if err != nil {
		return nil, fmt.Errorf("fsblob: get: %w", err)
	}
	return f, nil
}

// GetRange implements blob.Store.
func (s *Store) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if off < 0 || length < 0 {
		return nil, fmt.Errorf("fsblob: get %s: range %d+%d: %w", key, off, length, job.ErrInvalid)
	}
	f, err := s.open(key)
	if err != nil {
		return nil, fmt.Errorf("fsblob: get range: %w", err)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, length), f}, nil
}

// Head implements blob.Store.
func (s *Store) Head(ctx context.Context, key string) (blob.Info, error) {
	f, err := s.open(key)
	if err != nil {
		return blob.Info{}, fmt.Errorf("fsblob: head: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return blob.Info{}, fmt.Errorf("fsblob: head %s: %w", key, err)
	}
	return blob.Info{Key: key, Size: st.Size(), Modified: st.ModTime()}, nil
}

// List implements blob.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	var out []blob.Info
	err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || strings.HasPrefix(d.Name(), ".tmp-") {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, blob.Info{Key: key, Size: info.Size(), Modified: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fsblob: list %q: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements blob.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	p, err := s.Path(key)
	if err != nil {
		return fmt.Errorf("fsblob: delete: %w", err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fsblob: delete %s: %w", key, err)
	}
	return nil
}
