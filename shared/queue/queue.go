// Package queue is the port for task queues with SQS semantics: at-least-once
// delivery, a visibility timeout as the lease, per-message delays, receive
// counts and a dead-letter queue after a maximum number of receives.
// Adapters: sqlitequeue (embedded) and, for AWS, SQS.
package queue

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/slicework/slicework/shared/job"
)

// Limits that every adapter enforces, so code that runs on the embedded
// backend also runs on SQS.
const (
	// MaxBatch is the most messages one Send, Delete or ChangeVisibility
	// call to the backend takes; Send splits larger slices itself.
	MaxBatch = 10
	// MaxBodyBytes is the largest message body.
	MaxBodyBytes = 1 << 20
	// MaxDelay is the longest per-message delay.
	MaxDelay = 15 * time.Minute
	// MaxVisibility is the longest visibility timeout. SQS counts it from
	// the moment of receipt, so callers must not extend a lease past it.
	MaxVisibility = 12 * time.Hour
)

// Config describes a queue when it is created.
type Config struct {
	// Visibility is the default visibility timeout for received messages.
	Visibility time.Duration
	// MaxReceives moves a message to DeadLetter when it is received more
	// often than this; 0 disables the dead-letter queue.
	MaxReceives int
	// DeadLetter names the dead-letter queue (created by the caller).
	DeadLetter string
}

// Outgoing is a message to send.
type Outgoing struct {
	// Body is the payload: 1 to MaxBodyBytes bytes of valid UTF-8 text in
	// the characters SQS accepts (see Validate). Engine messages are JSON.
	Body []byte
	// Delay before the message is first visible; at most MaxDelay.
	Delay time.Duration
}

// Message is a received message.
type Message struct {
	// ID is stable across deliveries of the same message.
	ID   string
	Body []byte
	// Receipt identifies this delivery; Delete and ChangeVisibility need it.
	// A receipt from an earlier delivery is stale: Delete ignores it and
	// ChangeVisibility rejects it with job.ErrNotFound.
	Receipt string
	// ReceiveCount is 1 on the first delivery.
	ReceiveCount int
	SentAt       time.Time
	// FirstReceivedAt is when the message was first delivered.
	FirstReceivedAt time.Time
}

// Queue is a set of named queues. Unknown queue names yield job.ErrNotFound.
// Implementations are safe for concurrent use.
type Queue interface {
	// Create creates the named queue or updates its config; it is idempotent.
	Create(ctx context.Context, name string, cfg Config) error
	// Send enqueues msgs, in batches of at most MaxBatch. A message that
	// Validate rejects fails the call with job.ErrInvalid before anything is
	// sent.
	Send(ctx context.Context, name string, msgs ...Outgoing) error
	// Receive leases up to max (1..MaxBatch) visible messages for visibility
	// (0 means the queue's default), waiting up to wait for the first one.
	// Messages whose receive count would exceed MaxReceives go to the
	// dead-letter queue instead of being returned.
	Receive(ctx context.Context, name string, max int, visibility, wait time.Duration) ([]Message, error)
	// Delete removes delivered messages by receipt (at most MaxBatch per
	// call); stale receipts are ignored.
	Delete(ctx context.Context, name string, receipts ...string) error
	// ChangeVisibility makes delivered messages visible again after their
	// timeouts (0..MaxVisibility) from now, at most MaxBatch per call. Every
	// valid change is applied; if some receipts are stale, the error wraps
	// job.ErrNotFound and names them.
	ChangeVisibility(ctx context.Context, name string, changes ...VisibilityChange) error
	// Stats reports the queue's depth.
	Stats(ctx context.Context, name string) (Stats, error)
}

// VisibilityChange is one entry of ChangeVisibility.
type VisibilityChange struct {
	Receipt string
	Timeout time.Duration
}

// Stats is a queue's depth.
type Stats struct {
	// Visible messages are ready to receive; InFlight are leased; Delayed wait for their delay.
	Visible, InFlight, Delayed int
	// OldestAge is the age of the oldest message, 0 when empty.
	OldestAge time.Duration
}

// Validate checks an outgoing message against the limits every adapter
// enforces: a body of 1 to MaxBodyBytes bytes of valid UTF-8 holding only
// the characters SQS accepts (#x9, #xA, #xD, #x20–#xD7FF, #xE000–#xFFFD,
// #x10000–#x10FFFF), and a delay of 0 to MaxDelay. Errors wrap job.ErrInvalid.
func Validate(m Outgoing) error {
	if m.Delay < 0 || m.Delay > MaxDelay {
		return fmt.Errorf("delay %v outside 0..%v: %w", m.Delay, MaxDelay, job.ErrInvalid)
	}
	b := m.Body
	if len(b) == 0 {
		return fmt.Errorf("empty body (SQS needs at least one character): %w", job.ErrInvalid)
	}
	if len(b) > MaxBodyBytes {
		return fmt.Errorf("body of %d bytes over %d: %w", len(b), MaxBodyBytes, job.ErrInvalid)
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("body is not valid UTF-8 at byte %d: %w", i, job.ErrInvalid)
		}
		if !allowedRune(r) {
			return fmt.Errorf("body has character %U at byte %d, which SQS rejects: %w", r, i, job.ErrInvalid)
		}
		i += size
	}
	return nil
}

// allowedRune reports whether SQS accepts r in a message body.
func allowedRune(r rune) bool {
	return r == 0x9 || r == 0xA || r == 0xD ||
		r >= 0x20 && r <= 0xD7FF ||
		r >= 0xE000 && r <= 0xFFFD ||
		r >= 0x10000 && r <= 0x10FFFF
}
