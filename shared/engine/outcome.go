package engine

import (
	"errors"
	"fmt"
	"time"
)

// retryInError asks for the next attempt after a fixed delay.
type retryInError struct {
	after time.Duration
	err   error
}

func (e *retryInError) Error() string {
	return fmt.Sprintf("retry in %s: %v", e.after, e.err)
}
func (e *retryInError) Unwrap() error { return e.err }

// RetryIn returns an error that makes the engine retry the chunk after d,
// instead of the kind's back-off. d may be any length: up to the queue's
// visibility limit (12 h) the message is hidden for d; beyond it the chunk is
// parked in the store and the sweeper re-enqueues it when due. The retry
// still counts as an attempt, so MaxAttempts bounds it.
func RetryIn(d time.Duration, err error) error {
	if d < 0 {
		d = 0
	}
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryInError{after: d, err: err}
}

// permanentError fails a chunk with no retry.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent returns an error that fails the chunk for good, with no retry.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, came from Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// retryDelay returns the delay requested by RetryIn, if any.
func retryDelay(err error) (time.Duration, bool) {
	var r *retryInError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// PanicError is the error recorded when a handler panics; the chunk is
// retried like any temporary failure.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
