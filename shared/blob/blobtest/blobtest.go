// Package blobtest is the conformance suite every blob.Store adapter passes.
package blobtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/job"
)

// Run runs the suite against the store that newStore returns. Each subtest
// gets its own store (which may share a backend: keys are unique per subtest).
func Run(t *testing.T, newStore func(t *testing.T) blob.Store) {
	t.Helper()
	ctx := context.Background()
	read := func(t *testing.T, rc io.ReadCloser, err error) string {
		t.Helper()
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return string(b)
	}

	t.Run("PutGetHead", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if err := s.Put(ctx, "a/b/obj.txt", strings.NewReader("hello world")); err != nil {
			t.Fatal(err)
		}
		rc, err := s.Get(ctx, "a/b/obj.txt")
		if got := read(t, rc, err); got != "hello world" {
			t.Fatalf("Get = %q", got)
		}
		info, err := s.Head(ctx, "a/b/obj.txt")
		if err != nil || info.Size != 11 || info.Key != "a/b/obj.txt" {
			t.Fatalf("Head = %+v, %v", info, err)
		}
		if err := s.Put(ctx, "a/b/obj.txt", strings.NewReader("new")); err != nil {
			t.Fatal(err)
		}
		rc, err = s.Get(ctx, "a/b/obj.txt")
		if got := read(t, rc, err); got != "new" {
			t.Fatalf("Get after overwrite = %q", got)
		}
	})

	t.Run("Ranges", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if err := s.Put(ctx, "r/obj", strings.NewReader("0123456789")); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			off, n int64
			want   string
		}{{0, 3, "012"}, {3, 4, "3456"}, {8, 10, "89"}, {9, 1, "9"}, {10, 5, ""}, {20, 5, ""}, {0, 0, ""}} {
			rc, err := s.GetRange(ctx, "r/obj", tc.off, tc.n)
			if got := read(t, rc, err); got != tc.want {
				t.Errorf("GetRange(%d, %d) = %q, want %q", tc.off, tc.n, got, tc.want)
			}
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if _, err := s.Get(ctx, "missing/x"); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Get missing: %v, want ErrNotFound", err)
		}
		if _, err := s.GetRange(ctx, "missing/x", 0, 1); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("GetRange missing: %v, want ErrNotFound", err)
		}
		if _, err := s.Head(ctx, "missing/x"); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("Head missing: %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, "missing/x"); err != nil {
			t.Errorf("Delete missing: %v", err)
		}
	})

	t.Run("InvalidKeys", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, k := range []string{"", "/abs", "a/../b", "a//b", "trail/", "nul\x00"} {
			if err := s.Put(ctx, k, strings.NewReader("x")); !errors.Is(err, job.ErrInvalid) {
				t.Errorf("Put(%q) = %v, want ErrInvalid", k, err)
			}
		}
	})

	t.Run("ListDelete", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		for _, k := range []string{"l/b", "l/a", "l/c/d", "other/x"} {
			if err := s.Put(ctx, k, strings.NewReader(k)); err != nil {
				t.Fatal(err)
			}
		}
		infos, err := s.List(ctx, "l/")
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, i := range infos {
			keys = append(keys, i.Key)
		}
		if got := strings.Join(keys, ","); got != "l/a,l/b,l/c/d" {
			t.Fatalf("List = %s", got)
		}
		if err := s.Delete(ctx, "l/b"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Head(ctx, "l/b"); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("Head after delete: %v", err)
		}
	})

	t.Run("ConcurrentWritersNeverTear", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				body := bytes.Repeat([]byte(fmt.Sprint(w)), 64<<10)
				if err := s.Put(ctx, "c/obj", bytes.NewReader(body)); err != nil {
					t.Error(err)
				}
			}(w)
		}
		wg.Wait()
		rc, err := s.Get(ctx, "c/obj")
		got := read(t, rc, err)
		if len(got) != 64<<10 || strings.Count(got, got[:1]) != len(got) {
			t.Fatalf("object torn: len %d", len(got))
		}
	})
}
