package job

import "errors"

// Sentinel errors shared by every adapter. Wrap them with context; test with errors.Is.
var (
	// ErrNotFound: the job, chunk, blob or message does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a conditional write failed because the record is not in the expected state.
	ErrConflict = errors.New("conflict")
	// ErrDuplicate: a job with the same unique key already exists.
	ErrDuplicate = errors.New("duplicate")
	// ErrInvalid: the input is malformed or violates a limit.
	ErrInvalid = errors.New("invalid")
)
