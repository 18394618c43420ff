// Package sqlitequeue is the embedded queue.Queue adapter: named queues with
// SQS semantics stored in one SQLite file.
//
// Every call that changes state commits before it returns, so queues survive
// the process being killed; a message leased by a process that died becomes
// visible again when its visibility timeout expires. Several processes may
// share the file. All visibility, delay and age decisions use the injected
// clock; only the long-poll wait of Receive is measured in real time, so that
// a waiting Receive ends even under a fake clock.
package sqlitequeue

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/sqlitedb"
)

// DefaultVisibility is the visibility timeout of a queue created with
// Config.Visibility 0, as on SQS.
const DefaultVisibility = 30 * time.Second

// MaxReceivesLimit is the largest Config.MaxReceives, as on SQS.
const MaxReceivesLimit = 1000

// pollInterval is how often a waiting Receive looks for messages that
// became visible by the passage of time or were sent by another process.
// Sends in this process wake waiters at once.
const pollInterval = 50 * time.Millisecond

// maxNameLen is the longest queue name, as on SQS.
const maxNameLen = 80

// Times are stored as microseconds since the Unix epoch, durations as
// microseconds. messages.seq orders messages by insertion; receipt is the
// receipt of the latest delivery (NULL before the first and after a move to
// the dead-letter queue).
const schema = `
CREATE TABLE IF NOT EXISTS queues (
	name         TEXT PRIMARY KEY,
	visibility   INTEGER NOT NULL,
	max_receives INTEGER NOT NULL DEFAULT 0,
	dead_letter  TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS messages (
	seq               INTEGER PRIMARY KEY AUTOINCREMENT,
	id                TEXT NOT NULL UNIQUE,
	queue             TEXT NOT NULL REFERENCES queues(name),
	body              BLOB NOT NULL,
	sent_at           INTEGER NOT NULL,
	visible_at        INTEGER NOT NULL,
	receive_count     INTEGER NOT NULL DEFAULT 0,
	receipt           TEXT UNIQUE,
	first_received_at INTEGER
);
CREATE INDEX IF NOT EXISTS messages_queue_visible ON messages(queue, visible_at, seq);
`

var errClosed = errors.New("queue closed")

// Queue is a set of named queues in one SQLite file. It implements
// queue.Queue and is safe for concurrent use.
type Queue struct {
	db    *sql.DB
	clock clock.Clock

	mu   sync.Mutex
	wake chan struct{} // closed and replaced when messages may have become visible

	closeOnce sync.Once
	closed    chan struct{}
	closeErr  error
}

var _ queue.Queue = (*Queue)(nil)

// Option configures Open.
type Option func(*Queue)

// WithClock makes the queue take the current time from c instead of the
// system clock. A nil c is ignored.
func WithClock(c clock.Clock) Option {
	return func(q *Queue) {
		if c != nil {
			q.clock = c
		}
	}
}

// Open opens (creating if needed) the queue database at path. The caller
// must Close it.
func Open(path string, opts ...Option) (*Queue, error) {
	db, err := sqlitedb.Open(path, schema)
	if err != nil {
		return nil, fmt.Errorf("sqlitequeue: %w", err)
	}
	q := &Queue{db: db, clock: clock.System{}, wake: make(chan struct{}), closed: make(chan struct{})}
	for _, o := range opts {
		o(q)
	}
	return q, nil
}

// Close closes the database; waiting Receive calls return an error. Calls
// after Close fail; closing again returns the first Close's result.
func (q *Queue) Close() error {
	q.closeOnce.Do(func() {
		close(q.closed)
		if err := q.db.Close(); err != nil {
			q.closeErr = fmt.Errorf("sqlitequeue: close: %w", err)
		}
	})
	return q.closeErr
}

// Create creates the named queue or updates its config; it is idempotent
// and keeps the queue's messages. Names are 1 to 80 ASCII letters, digits,
// '-' or '_' (the SQS rule). Visibility must be 0..queue.MaxVisibility (0
// means DefaultVisibility), MaxReceives 0..MaxReceivesLimit; a positive
// MaxReceives needs a DeadLetter. A bad config fails with job.ErrInvalid; a
// DeadLetter queue that does not exist fails with job.ErrNotFound.
func (q *Queue) Create(ctx context.Context, name string, cfg queue.Config) error {
	if err := validName(name); err != nil {
		return fmt.Errorf("sqlitequeue: create %q: %w", name, err)
	}
	switch {
	case cfg.Visibility < 0 || cfg.Visibility > queue.MaxVisibility:
		return fmt.Errorf("sqlitequeue: create %s: visibility %v outside 0..%v: %w", name, cfg.Visibility, queue.MaxVisibility, job.ErrInvalid)
	case cfg.MaxReceives < 0 || cfg.MaxReceives > MaxReceivesLimit:
		return fmt.Errorf("sqlitequeue: create %s: max receives %d outside 0..%d: %w", name, cfg.MaxReceives, MaxReceivesLimit, job.ErrInvalid)
	case cfg.MaxReceives > 0 && cfg.DeadLetter == "":
		return fmt.Errorf("sqlitequeue: create %s: max receives %d without a dead-letter queue: %w", name, cfg.MaxReceives, job.ErrInvalid)
	case cfg.DeadLetter == name:
		return fmt.Errorf("sqlitequeue: create %s: queue is its own dead-letter queue: %w", name, job.ErrInvalid)
	}
	vis := cfg.Visibility
	if vis == 0 {
		vis = DefaultVisibility
	}
	err := q.tx(ctx, func(tx *sql.Tx) error {
		if cfg.DeadLetter != "" {
			if _, err := loadConfig(ctx, tx, cfg.DeadLetter); err != nil {
				return fmt.Errorf("dead-letter queue: %w", err)
			}
		}
		_, err := tx.ExecContext(ctx, `
			INSERT INTO queues (name, visibility, max_receives, dead_letter) VALUES (?, ?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET visibility = excluded.visibility,
				max_receives = excluded.max_receives, dead_letter = excluded.dead_letter`,
			name, vis.Microseconds(), cfg.MaxReceives, cfg.DeadLetter)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitequeue: create %s: %w", name, err)
	}
	return nil
}

// Send enqueues msgs atomically: all of them or, on error, none. A message
// that queue.Validate rejects fails the call with job.ErrInvalid before
// anything is sent. Sending no
// messages to an existing queue does nothing.
func (q *Queue) Send(ctx context.Context, name string, msgs ...queue.Outgoing) error {
	for i, m := range msgs {
		if err := queue.Validate(m); err != nil {
			return fmt.Errorf("sqlitequeue: send %s: message %d: %w", name, i, err)
		}
	}
	err := q.tx(ctx, func(tx *sql.Tx) error {
		if _, err := loadConfig(ctx, tx, name); err != nil {
			return err
		}
		if len(msgs) == 0 {
			return nil
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO messages (id, queue, body, sent_at, visible_at) VALUES (?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		now := q.clock.Now()
		for _, m := range msgs {
			body := m.Body
			if body == nil {
				body = []byte{}
			}
			if _, err := stmt.ExecContext(ctx, newToken(), name, body, micros(now), micros(now.Add(m.Delay))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitequeue: send %s: %w", name, err)
	}
	q.signal()
	return nil
}

// Receive leases up to limit (1..queue.MaxBatch) visible messages, oldest
// visible first, for visibility (0..queue.MaxVisibility; 0 means the
// queue's default), waiting up to wait (real time) for the first one. It
// returns no messages and no error when none arrive in time, and the
// context's error if ctx ends first. A message whose receive count would
// exceed the queue's MaxReceives is moved to its dead-letter queue (with
// its receive count reset) instead of being returned.
func (q *Queue) Receive(ctx context.Context, name string, limit int, visibility, wait time.Duration) ([]queue.Message, error) {
	switch {
	case limit < 1 || limit > queue.MaxBatch:
		return nil, fmt.Errorf("sqlitequeue: receive %s: max %d outside 1..%d: %w", name, limit, queue.MaxBatch, job.ErrInvalid)
	case visibility < 0 || visibility > queue.MaxVisibility:
		return nil, fmt.Errorf("sqlitequeue: receive %s: visibility %v outside 0..%v: %w", name, visibility, queue.MaxVisibility, job.ErrInvalid)
	case wait < 0:
		return nil, fmt.Errorf("sqlitequeue: receive %s: negative wait %v: %w", name, wait, job.ErrInvalid)
	}
	if _, err := loadConfig(ctx, q.db, name); err != nil {
		return nil, fmt.Errorf("sqlitequeue: receive %s: %w", name, err)
	}
	deadline := time.Now().Add(wait)
	for {
		// Take the wake channel before looking, so that a Send between the
		// look and the wait is not missed.
		wake := q.wakeChan()
		msgs, err := q.receiveOnce(ctx, name, limit, visibility)
		if err != nil {
			return nil, fmt.Errorf("sqlitequeue: receive %s: %w", name, err)
		}
		remaining := time.Until(deadline)
		if len(msgs) > 0 || remaining <= 0 {
			return msgs, nil
		}
		timer := time.NewTimer(min(pollInterval, remaining))
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("sqlitequeue: receive %s: %w", name, ctx.Err())
		case <-q.closed:
			timer.Stop()
			return nil, fmt.Errorf("sqlitequeue: receive %s: %w", name, errClosed)
		}
		timer.Stop()
	}
}

// receiveOnce leases what is visible now, without waiting.
func (q *Queue) receiveOnce(ctx context.Context, name string, limit int, visibility time.Duration) ([]queue.Message, error) {
	now := q.clock.Now()
	// Look before taking the write lock, so idle pollers do not contend
	// with writers.
	var ready bool
	if err := q.db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM messages WHERE queue = ? AND visible_at <= ?)`, name, micros(now)).Scan(&ready); err != nil {
		return nil, err
	}
	if !ready {
		return nil, nil
	}
	var (
		out   []queue.Message
		moved bool
	)
	err := q.tx(ctx, func(tx *sql.Tx) error {
		out, moved = nil, false
		cfg, err := loadConfig(ctx, tx, name)
		if err != nil {
			return err
		}
		vis := visibility
		if vis == 0 {
			vis = cfg.Visibility
		}
		// A lease lasts at least the storage's 1 µs resolution, so that a
		// leased message is not selected again by this transaction.
		vis = max(vis, time.Microsecond)
		now := q.clock.Now()
		for len(out) < limit {
			cands, err := candidates(ctx, tx, name, now, limit-len(out))
			if err != nil {
				return err
			}
			if len(cands) == 0 {
				return nil
			}
			for _, c := range cands {
				if cfg.MaxReceives > 0 && cfg.DeadLetter != "" && c.ReceiveCount+1 > cfg.MaxReceives {
					if _, err := tx.ExecContext(ctx, `
						UPDATE messages SET queue = ?, visible_at = ?, receive_count = 0, receipt = NULL, first_received_at = NULL
						WHERE seq = ?`, cfg.DeadLetter, micros(now), c.seq); err != nil {
						return fmt.Errorf("move message %s to dead-letter queue %s: %w", c.ID, cfg.DeadLetter, err)
					}
					moved = true
					continue
				}
				c.ReceiveCount++
				c.Receipt = newToken()
				if c.FirstReceivedAt.IsZero() {
					c.FirstReceivedAt = fromMicros(micros(now))
				}
				if _, err := tx.ExecContext(ctx, `
					UPDATE messages SET receive_count = ?, receipt = ?, visible_at = ?, first_received_at = ?
					WHERE seq = ?`, c.ReceiveCount, c.Receipt, micros(now.Add(vis)), micros(c.FirstReceivedAt), c.seq); err != nil {
					return err
				}
				out = append(out, c.Message)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if moved {
		q.signal()
	}
	return out, nil
}

type candidate struct {
	queue.Message
	seq int64
}

// candidates returns up to n messages of the queue visible at now, in order
// of visibility then insertion.
func candidates(ctx context.Context, tx *sql.Tx, name string, now time.Time, n int) ([]candidate, error) {
	rows, err := tx.QueryContext(ctx, `
		SELECT seq, id, body, sent_at, receive_count, first_received_at FROM messages
		WHERE queue = ? AND visible_at <= ? ORDER BY visible_at, seq LIMIT ?`, name, micros(now), n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var (
			c       candidate
			sentAt  int64
			firstAt sql.NullInt64
		)
		if err := rows.Scan(&c.seq, &c.ID, &c.Body, &sentAt, &c.ReceiveCount, &firstAt); err != nil {
			return nil, err
		}
		c.SentAt = fromMicros(sentAt)
		if firstAt.Valid {
			c.FirstReceivedAt = fromMicros(firstAt.Int64)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Delete removes the messages whose latest delivery has one of receipts, at
// most queue.MaxBatch of them (more fail with job.ErrInvalid). Stale or
// unknown receipts, including those of an earlier delivery of a message that
// was redelivered since, are ignored. A receipt stays current until its
// message is delivered again, even after its visibility expired.
func (q *Queue) Delete(ctx context.Context, name string, receipts ...string) error {
	if len(receipts) > queue.MaxBatch {
		return fmt.Errorf("sqlitequeue: delete %s: %d receipts over %d: %w", name, len(receipts), queue.MaxBatch, job.ErrInvalid)
	}
	err := q.tx(ctx, func(tx *sql.Tx) error {
		if _, err := loadConfig(ctx, tx, name); err != nil {
			return err
		}
		if len(receipts) == 0 {
			return nil
		}
		args := []any{name}
		for _, r := range receipts {
			args = append(args, r)
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM messages WHERE queue = ? AND receipt IN (?`+strings.Repeat(", ?", len(receipts)-1)+`)`, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitequeue: delete %s: %w", name, err)
	}
	return nil
}

// ChangeVisibility makes the message delivered with receipt visible again d
// (0..queue.MaxVisibility, else job.ErrInvalid) from now. A stale or unknown
// receipt fails with job.ErrNotFound. A receipt stays current until its
// message is delivered again, even after its visibility expired.
func (q *Queue) ChangeVisibility(ctx context.Context, name string, changes ...queue.VisibilityChange) error {
	if len(changes) > queue.MaxBatch {
		return fmt.Errorf("sqlitequeue: change visibility %s: %d changes, more than %d: %w", name, len(changes), queue.MaxBatch, job.ErrInvalid)
	}
	wake := false
	for _, c := range changes {
		if c.Timeout < 0 || c.Timeout > queue.MaxVisibility {
			return fmt.Errorf("sqlitequeue: change visibility %s: %v outside 0..%v: %w", name, c.Timeout, queue.MaxVisibility, job.ErrInvalid)
		}
		wake = wake || c.Timeout == 0
	}
	var stale []string
	err := q.tx(ctx, func(tx *sql.Tx) error {
		stale = stale[:0]
		if _, err := loadConfig(ctx, tx, name); err != nil {
			return err
		}
		now := q.clock.Now()
		for _, c := range changes {
			res, err := tx.ExecContext(ctx, `UPDATE messages SET visible_at = ? WHERE queue = ? AND receipt = ?`,
				micros(now.Add(c.Timeout)), name, c.Receipt)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n == 0 {
				stale = append(stale, c.Receipt)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitequeue: change visibility %s: %w", name, err)
	}
	if wake {
		q.signal()
	}
	if len(stale) > 0 {
		return fmt.Errorf("sqlitequeue: change visibility %s: receipts stale or unknown %q: %w", name, stale, job.ErrNotFound)
	}
	return nil
}

// Stats reports the queue's depth now: Visible messages can be received,
// InFlight ones were received and their visibility has not expired, Delayed
// ones were never received and their delay has not passed. OldestAge is the
// time since the earliest SentAt among all of them (a message moved to the
// dead-letter queue keeps its SentAt), 0 when the queue is empty.
func (q *Queue) Stats(ctx context.Context, name string) (queue.Stats, error) {
	if _, err := loadConfig(ctx, q.db, name); err != nil {
		return queue.Stats{}, fmt.Errorf("sqlitequeue: stats %s: %w", name, err)
	}
	now := q.clock.Now()
	var (
		st     queue.Stats
		oldest sql.NullInt64
	)
	err := q.db.QueryRowContext(ctx, `
		SELECT
			COALESCE(SUM(visible_at <= ?1), 0),
			COALESCE(SUM(visible_at > ?1 AND receive_count > 0), 0),
			COALESCE(SUM(visible_at > ?1 AND receive_count = 0), 0),
			MIN(sent_at)
		FROM messages WHERE queue = ?2`, micros(now), name).Scan(&st.Visible, &st.InFlight, &st.Delayed, &oldest)
	if err != nil {
		return queue.Stats{}, fmt.Errorf("sqlitequeue: stats %s: %w", name, err)
	}
	if oldest.Valid {
		st.OldestAge = max(0, now.Sub(fromMicros(oldest.Int64)))
	}
	return st, nil
}

// tx runs fn in an immediate (write-locking) transaction and commits it.
func (q *Queue) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	select {
	case <-q.closed:
		return errClosed
	default:
	}
	tx, err := q.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit()
}

// signal wakes every waiting Receive of this process.
func (q *Queue) signal() {
	q.mu.Lock()
	defer q.mu.Unlock()
	close(q.wake)
	q.wake = make(chan struct{})
}

func (q *Queue) wakeChan() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.wake
}

type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// loadConfig returns the named queue's config, or job.ErrNotFound.
func loadConfig(ctx context.Context, db queryer, name string) (queue.Config, error) {
	var (
		cfg queue.Config
		vis int64
	)
	err := db.QueryRowContext(ctx, `SELECT visibility, max_receives, dead_letter FROM queues WHERE name = ?`, name).
		Scan(&vis, &cfg.MaxReceives, &cfg.DeadLetter)
	if errors.Is(err, sql.ErrNoRows) {
		return cfg, fmt.Errorf("queue %q: %w", name, job.ErrNotFound)
	}
	if err != nil {
		return cfg, err
	}
	cfg.Visibility = time.Duration(vis) * time.Microsecond
	return cfg, nil
}

// validName reports whether name follows the SQS naming rule.
func validName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("name must have 1 to %d characters: %w", maxNameLen, job.ErrInvalid)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("name may only contain ASCII letters, digits, '-' and '_': %w", job.ErrInvalid)
		}
	}
	return nil
}

// newToken returns a random 128-bit hex string, used for message IDs and
// receipts.
func newToken() string {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
