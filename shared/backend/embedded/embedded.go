// Package embedded opens the embedded backend: the job store and the task
// queue in SQLite files, blobs in a directory. It is durable and needs no
// external process; it is the default for local runs, not a test fake.
package embedded

import (
	"fmt"
	"path/filepath"

	"github.com/slicework/slicework/shared/backend"
	"github.com/slicework/slicework/shared/blob/fsblob"
	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/queue/sqlitequeue"
	"github.com/slicework/slicework/shared/store/sqlitestore"
)

// Open opens the embedded backend in dir: dir/store.db (jobs and
// chunks), dir/queue.db (queues) and dir/blobs (objects). Several processes
// may open the same dir. clk may be nil for the system clock.
func Open(dir string, clk clock.Clock) (*backend.Backend, error) {
	if clk == nil {
		clk = clock.System{}
	}
	st, err := sqlitestore.Open(filepath.Join(dir, "store.db"), sqlitestore.WithClock(clk))
	if err != nil {
		return nil, fmt.Errorf("embedded: store: %w", err)
	}
	q, err := sqlitequeue.Open(filepath.Join(dir, "queue.db"), sqlitequeue.WithClock(clk))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("embedded: queue: %w", err)
	}
	bl, err := fsblob.New(filepath.Join(dir, "blobs"))
	if err != nil {
		st.Close()
		q.Close()
		return nil, fmt.Errorf("embedded: blobs: %w", err)
	}
	return backend.New("embedded", st, q, bl, q.Close, st.Close), nil
}
