// Package backend opens a complete set of adapters — job store, task queue,
// blob store — for one backend. The embedded backend keeps everything in a
// local data directory and needs no external process.
package backend

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/blob/fsblob"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/queue/sqlitequeue"
	"github.com/slicework/slicework/shared/store"
	"github.com/slicework/slicework/shared/store/sqlitestore"
)

// Backend is the three ports of one backend.
type Backend struct {
	Name   string
	Store  store.Store
	Queue  queue.Queue
	Blobs  blob.Store
	closer []func() error
}

// Close releases the adapters.
func (b *Backend) Close() error {
	var errs []error
	for _, c := range b.closer {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// Embedded opens the embedded backend in dir: dir/store.db (jobs and
// chunks), dir/queue.db (queues) and dir/blobs (objects). Several processes
// may open the same dir. clk may be nil for the system clock.
func Embedded(dir string, clk clock.Clock) (*Backend, error) {
	if clk == nil {
		clk = clock.System{}
	}
	st, err := sqlitestore.Open(filepath.Join(dir, "store.db"), sqlitestore.WithClock(clk))
	if err != nil {
		return nil, fmt.Errorf("backend: embedded store: %w", err)
	}
	q, err := sqlitequeue.Open(filepath.Join(dir, "queue.db"), sqlitequeue.WithClock(clk))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("backend: embedded queue: %w", err)
	}
	bl, err := fsblob.New(filepath.Join(dir, "blobs"))
	if err != nil {
		st.Close()
		q.Close()
		return nil, fmt.Errorf("backend: embedded blobs: %w", err)
	}
	return &Backend{Name: "embedded", Store: st, Queue: q, Blobs: bl, closer: []func() error{q.Close, st.Close}}, nil
}
