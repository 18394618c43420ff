// Package backend is a complete set of adapters — job store, task queue,
// blob store — for one backend. Its subpackages open them: embedded (a
// local data directory, no external process) and awsbackend (DynamoDB,
// SQS, S3). They are separate so that the Lambda functions, which use only
// AWS, carry no SQLite.
package backend

import (
	"errors"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/store"
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

// New returns a backend of the three adapters; closers run, in order, on Close.
func New(name string, st store.Store, q queue.Queue, bl blob.Store, closers ...func() error) *Backend {
	return &Backend{Name: name, Store: st, Queue: q, Blobs: bl, closer: closers}
}
