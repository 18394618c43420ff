// Package sqlitestore is the embedded store.Store adapter: jobs, unique keys
// and chunk records in one SQLite file.
//
// Every method that writes does so in one transaction (BEGIN IMMEDIATE), so a
// process killed at any point leaves either the whole write or none of it.
// Several *Store values, in one process or in several, may share a file.
//
// Job counters are real columns of the jobs row, moved in the same
// transaction as the chunk outcome that causes them; a chunk that already has
// a terminal outcome is never counted again.
//
// Times are stored in UTC as microseconds since the Unix epoch and come back
// in UTC truncated to the microsecond. Durations are kept to the nanosecond.
package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/sqlitedb"
	"github.com/slicework/slicework/shared/store"
)

// schema: times are microseconds since the Unix epoch (UTC). jobs.spec holds
// the fields of a job that never change after CreateJob (args, input, tags,
// chunk size, max attempts, tolerated failures) as JSON; everything that is
// filtered on or changes is a column. unique_key is NULL when the job has
// none. chunks.attempts is the JSON attempt history; retry_at and task are
// set only while a retry is parked.
const schema = `
CREATE TABLE IF NOT EXISTS jobs (
	id            TEXT PRIMARY KEY,
	kind          TEXT NOT NULL,
	state         TEXT NOT NULL,
	unique_key    TEXT UNIQUE,
	channel       TEXT NOT NULL,
	parent        TEXT NOT NULL,
	spec          TEXT NOT NULL,
	error         TEXT NOT NULL,
	result        TEXT NOT NULL,
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL,
	run_at        INTEGER,
	started_at    INTEGER,
	sliced_at     INTEGER,
	finished_at   INTEGER,
	sliced        INTEGER NOT NULL,
	chunks_total  INTEGER NOT NULL,
	items_total   INTEGER NOT NULL,
	chunks_done   INTEGER NOT NULL,
	chunks_failed INTEGER NOT NULL,
	items_done    INTEGER NOT NULL,
	items_failed  INTEGER NOT NULL,
	retries       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_kind ON jobs(kind, id);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, id);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs(created_at);
CREATE INDEX IF NOT EXISTS jobs_run_at ON jobs(run_at) WHERE run_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_state_updated ON jobs(state, updated_at);
CREATE INDEX IF NOT EXISTS jobs_parent ON jobs(parent, id);
CREATE TABLE IF NOT EXISTS job_tags (
	tag    TEXT NOT NULL,
	job_id TEXT NOT NULL REFERENCES jobs(id),
	PRIMARY KEY (tag, job_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS chunks (
	job_id     TEXT NOT NULL REFERENCES jobs(id),
	idx        INTEGER NOT NULL,
	state      TEXT NOT NULL,
	items      INTEGER NOT NULL,
	attempts   TEXT NOT NULL,
	retry_at   INTEGER,
	task       TEXT,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (job_id, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS chunks_state ON chunks(job_id, state, idx);
CREATE INDEX IF NOT EXISTS chunks_retry_at ON chunks(retry_at, job_id, idx) WHERE retry_at IS NOT NULL;
`

// Store is a job store in one SQLite file. It implements store.Store and is
// safe for concurrent use, also by other processes opening the same file.
type Store struct {
	db    *sql.DB
	clock clock.Clock
}

var _ store.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read c for every time it sets itself: a job's
// UpdatedAt and SlicedAt and a chunk's UpdatedAt. The default is clock.System.
func WithClock(c clock.Clock) Option {
	return func(s *Store) { s.clock = c }
}

// Open opens (creating if needed) the store in the SQLite file at path.
func Open(path string, opts ...Option) (*Store, error) {
	s := &Store{clock: clock.System{}}
	for _, o := range opts {
		o(s)
	}
	var err error
	s.db, err = sqlitedb.Open(path, schema+flowSchema)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: %w", err)
	}
	return s, nil
}

// Close closes the database. Calls after Close fail.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("sqlitestore: close: %w", err)
	}
	return nil
}

// spec is the JSON document of a job's immutable fields.
type spec struct {
	Args              json.RawMessage `json:"args,omitempty"`
	Input             job.Input       `json:"input"`
	Tags              []string        `json:"tags,omitempty"`
	ChunkSize         int64           `json:"chunk_size"`
	MaxAttempts       int             `json:"max_attempts"`
	TolerateFailedPct float64         `json:"tolerate_failed_pct,omitempty"`
}

const jobCols = `id, kind, state, COALESCE(unique_key, ''), channel, parent, spec, error, result,
	created_at, updated_at, run_at, started_at, sliced_at, finished_at,
	sliced, chunks_total, items_total, chunks_done, chunks_failed, items_done, items_failed, retries` + flowCols

const chunkCols = `job_id, idx, state, items, attempts, retry_at, task, updated_at`

// querier is satisfied by *sql.DB and *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// scanner is satisfied by *sql.Row and *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// CreateJob inserts j as given, in one transaction: every field is stored,
// times in UTC at microsecond precision; a zero UpdatedAt becomes CreatedAt.
// An empty UniqueKey means no key. j needs an ID, a Kind, a valid State and
// a CreatedAt, else job.ErrInvalid. If another job holds j.UniqueKey, that
// job is returned with an error wrapping job.ErrDuplicate; if j.ID exists,
// job.ErrConflict. Nothing is written in either case.
func (s *Store) CreateJob(ctx context.Context, j *job.Job) (*job.Job, error) {
	var out *job.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = insertJob(ctx, tx, j)
		return err
	})
	return out, err
}

// insertJob validates and writes j within tx, as CreateJob describes, and
// returns the stored job; if another job holds j.UniqueKey, that job is
// returned with an error wrapping job.ErrDuplicate. ReplaceChunk creates
// its jobs through it too.
func insertJob(ctx context.Context, tx *sql.Tx, j *job.Job) (*job.Job, error) {
	if j == nil {
		return nil, fmt.Errorf("sqlitestore: create job: nil job: %w", job.ErrInvalid)
	}
	if j.ID == "" || j.Kind == "" || !j.State.Valid() || j.CreatedAt.IsZero() {
		return nil, fmt.Errorf("sqlitestore: create job %q: id, kind, valid state and created_at are required: %w", j.ID, job.ErrInvalid)
	}
	if err := store.CheckDependsOn(j); err != nil {
		return nil, fmt.Errorf("sqlitestore: create: %w", err)
	}
	sp, err := json.Marshal(spec{
		Args: j.Args, Input: j.Input, Tags: j.Tags,
		ChunkSize: j.ChunkSize, MaxAttempts: j.MaxAttempts, TolerateFailedPct: j.TolerateFailedPct,
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: create job %s: encode: %v: %w", j.ID, err, job.ErrInvalid)
	}
	updated := j.UpdatedAt
	if updated.IsZero() {
		updated = j.CreatedAt
	}
	if j.UniqueKey != "" {
		existing, err := scanJob(tx.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE unique_key = ?`, j.UniqueKey))
		if err == nil {
			return existing, fmt.Errorf("sqlitestore: create job %s: unique key %q held by job %s: %w", j.ID, j.UniqueKey, existing.ID, job.ErrDuplicate)
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, fmt.Errorf("sqlitestore: create job %s: look up unique key: %w", j.ID, err)
		}
	}
	var one int
	switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM jobs WHERE id = ?`, j.ID).Scan(&one); {
	case err == nil:
		return nil, fmt.Errorf("sqlitestore: create job %s: id exists: %w", j.ID, job.ErrConflict)
	case !errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("sqlitestore: create job %s: look up id: %w", j.ID, err)
	}
	c := j.Counters
	_, err = tx.ExecContext(ctx, `INSERT INTO jobs (id, kind, state, unique_key, channel, parent, spec, error, result,
		created_at, updated_at, run_at, started_at, sliced_at, finished_at,
		sliced, chunks_total, items_total, chunks_done, chunks_failed, items_done, items_failed, retries)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		j.ID, j.Kind, string(j.State), nullString(j.UniqueKey), j.Channel, j.Parent, string(sp), j.Error, j.Result,
		micros(j.CreatedAt), micros(updated), nullMicros(j.RunAt), nullMicros(j.StartedAt), nullMicros(j.SlicedAt), nullMicros(j.FinishedAt),
		c.Sliced, c.ChunksTotal, c.ItemsTotal, c.ChunksDone, c.ChunksFailed, c.ItemsDone, c.ItemsFailed, c.Retries)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: create job %s: insert: %w", j.ID, err)
	}
	for _, tag := range j.Tags {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO job_tags (tag, job_id) VALUES (?, ?)`, tag, j.ID); err != nil {
			return nil, fmt.Errorf("sqlitestore: create job %s: insert tag: %w", j.ID, err)
		}
	}
	if err := insertFlow(ctx, tx, j); err != nil {
		return nil, err
	}
	return getJob(ctx, tx, j.ID)
}

// GetJob returns the job with its current counters, or an error wrapping
// job.ErrNotFound.
func (s *Store) GetJob(ctx context.Context, id string) (*job.Job, error) {
	return getJob(ctx, s.db, id)
}

func getJob(ctx context.Context, q querier, id string) (*job.Job, error) {
	j, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlitestore: get job %s: %w", id, job.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: get job %s: %w", id, err)
	}
	return j, nil
}

// ListJobs returns the jobs matching q, newest (highest id) first, at most
// q.Limit per page (DefaultPageSize if 0, capped at MaxPageSize). Next is
// the cursor of the following page, empty on the last. A malformed cursor
// or a negative limit yields job.ErrInvalid.
func (s *Store) ListJobs(ctx context.Context, q job.Query) (job.Page, error) {
	limit, err := job.PageSize(q.Limit)
	if err != nil {
		return job.Page{}, fmt.Errorf("sqlitestore: list jobs: %w", err)
	}
	var (
		conds []string
		args  []any
	)
	add := func(cond string, arg any) {
		conds = append(conds, cond)
		args = append(args, arg)
	}
	if q.Cursor != "" {
		after, err := decodeJobCursor(q.Cursor)
		if err != nil {
			return job.Page{}, fmt.Errorf("sqlitestore: list jobs: %w", err)
		}
		add("id < ?", after)
	}
	if q.Kind != "" {
		add("kind = ?", q.Kind)
	}
	if q.State != "" {
		add("state = ?", string(q.State))
	}
	if q.Tag != "" {
		add("EXISTS (SELECT 1 FROM job_tags t WHERE t.tag = ? AND t.job_id = jobs.id)", q.Tag)
	}
	if q.Parent != "" {
		add("parent = ?", q.Parent)
	}
	if !q.CreatedAfter.IsZero() {
		add("created_at >= ?", micros(q.CreatedAfter))
	}
	if !q.CreatedBefore.IsZero() {
		add("created_at < ?", micros(q.CreatedBefore))
	}
	if !q.RunAtBefore.IsZero() {
		add("run_at <= ?", micros(q.RunAtBefore))
	}
	if !q.UpdatedBefore.IsZero() {
		add("updated_at < ?", micros(q.UpdatedBefore))
	}
	query := `SELECT ` + jobCols + ` FROM jobs`
	if len(conds) > 0 {
		query += ` WHERE ` + strings.Join(conds, ` AND `)
	}
	query += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return job.Page{}, fmt.Errorf("sqlitestore: list jobs: %w", err)
	}
	defer rows.Close()
	var page job.Page
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return job.Page{}, fmt.Errorf("sqlitestore: list jobs: %w", err)
		}
		page.Jobs = append(page.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return job.Page{}, fmt.Errorf("sqlitestore: list jobs: %w", err)
	}
	if len(page.Jobs) > limit {
		page.Jobs = page.Jobs[:limit]
		page.Next = encodeJobCursor(page.Jobs[limit-1].ID)
	}
	return page, nil
}

// Transition moves job id to state to if its state is one of from, applying
// p and setting UpdatedAt to the clock's now, in one transaction. If the
// state is not in from, nothing is written and the current job is returned
// with an error wrapping job.ErrConflict. A missing job yields
// job.ErrNotFound; an empty from or an unknown state, job.ErrInvalid.
func (s *Store) Transition(ctx context.Context, id string, from []job.State, to job.State, p store.Patch) (*job.Job, error) {
	if len(from) == 0 || !to.Valid() {
		return nil, fmt.Errorf("sqlitestore: transition job %s to %q: need a valid target and source states: %w", id, to, job.ErrInvalid)
	}
	for _, f := range from {
		if !f.Valid() {
			return nil, fmt.Errorf("sqlitestore: transition job %s: unknown source state %q: %w", id, f, job.ErrInvalid)
		}
	}
	var out *job.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		cur, err := getJob(ctx, tx, id)
		if err != nil {
			return err
		}
		allowed := false
		for _, f := range from {
			allowed = allowed || cur.State == f
		}
		if !allowed {
			out = cur
			return fmt.Errorf("sqlitestore: transition job %s from %s to %s: not in %v: %w", id, cur.State, to, from, job.ErrConflict)
		}
		j := *cur
		if p.Error != nil {
			j.Error = *p.Error
		}
		if p.Result != nil {
			j.Result = *p.Result
		}
		if p.RunAt != nil {
			j.RunAt = p.RunAt
		}
		if p.StartedAt != nil {
			j.StartedAt = p.StartedAt
		}
		if p.FinishedAt != nil {
			j.FinishedAt = p.FinishedAt
		}
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET state = ?, error = ?, result = ?, run_at = ?, started_at = ?, finished_at = ?, updated_at = ? WHERE id = ?`,
			string(to), j.Error, j.Result, nullMicros(j.RunAt), nullMicros(j.StartedAt), nullMicros(j.FinishedAt), micros(s.clock.Now()), id)
		if err != nil {
			return fmt.Errorf("sqlitestore: transition job %s: %w", id, err)
		}
		if to.Terminal() {
			if err := s.setFollowUp(ctx, tx, id); err != nil {
				return err
			}
		}
		out, err = getJob(ctx, tx, id)
		return err
	})
	return out, err
}

// Touch sets the job's UpdatedAt to the clock's now and changes nothing
// else. A missing job yields job.ErrNotFound.
func (s *Store) Touch(ctx context.Context, id string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE jobs SET updated_at = ? WHERE id = ?`, micros(s.clock.Now()), id)
	if err != nil {
		return fmt.Errorf("sqlitestore: touch job %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("sqlitestore: touch job %s: %w", id, err)
	} else if n == 0 {
		return fmt.Errorf("sqlitestore: touch job %s: %w", id, job.ErrNotFound)
	}
	return nil
}

// SetSliced sets the job's ChunksTotal and ItemsTotal, turns Counters.Sliced
// true and sets SlicedAt and UpdatedAt to the clock's now, in one
// transaction. If the job is already sliced with the same totals nothing is
// written; with different totals the current job is returned with an error
// wrapping job.ErrConflict. Negative totals yield job.ErrInvalid, a missing
// job job.ErrNotFound. Returns the job after the call.
func (s *Store) SetSliced(ctx context.Context, id string, chunks, items int64) (*job.Job, error) {
	if chunks < 0 || items < 0 {
		return nil, fmt.Errorf("sqlitestore: set sliced %s: negative totals %d, %d: %w", id, chunks, items, job.ErrInvalid)
	}
	var out *job.Job
	err := s.tx(ctx, func(tx *sql.Tx) error {
		cur, err := getJob(ctx, tx, id)
		if err != nil {
			return err
		}
		if c := cur.Counters; c.Sliced {
			out = cur
			if c.ChunksTotal != chunks || c.ItemsTotal != items {
				return fmt.Errorf("sqlitestore: set sliced %s: already sliced with %d chunks, %d items, not %d, %d: %w",
					id, c.ChunksTotal, c.ItemsTotal, chunks, items, job.ErrConflict)
			}
			return nil
		}
		now := micros(s.clock.Now())
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET sliced = 1, chunks_total = ?, items_total = ?, sliced_at = ?, updated_at = ? WHERE id = ?`,
			chunks, items, now, now, id)
		if err != nil {
			return fmt.Errorf("sqlitestore: set sliced %s: %w", id, err)
		}
		out, err = getJob(ctx, tx, id)
		return err
	})
	return out, err
}

// RecordAttempt records one attempt of chunk index of job jobID in one
// transaction, assigning a.N (1-based, no gaps) and setting the chunk's
// UpdatedAt to the clock's now.
//
// If the chunk already has a terminal outcome, nothing is written and the
// result has Applied false, whatever a's outcome. Otherwise the attempt is
// appended and:
//   - OutcomeSucceeded: the chunk becomes succeeded with a.Items; the job's
//     ChunksDone grows by 1 and ItemsDone by a.Items.
//   - OutcomeFailed: the chunk becomes failed with a.Items; the job's
//     ChunksFailed grows by 1 and ItemsFailed by a.Items.
//   - OutcomeRetry: the chunk becomes retrying and the job's Retries grows
//     by 1.
//
// The chunk's parking is replaced by (retryAt, task), which may only be
// non-nil for OutcomeRetry, where a non-nil retryAt needs a task; any other
// applied attempt therefore clears it. The job's UpdatedAt is not changed.
// A missing job yields job.ErrNotFound; a negative index, an unknown
// outcome or inconsistent parking arguments, job.ErrInvalid.
func (s *Store) RecordAttempt(ctx context.Context, jobID string, index int64, a job.Attempt, retryAt *time.Time, task *job.ChunkTask) (store.Recorded, error) {
	var state job.ChunkState
	switch a.Outcome {
	case job.OutcomeSucceeded:
		state = job.ChunkSucceeded
	case job.OutcomeFailed:
		state = job.ChunkFailed
	case job.OutcomeRetry:
		state = job.ChunkRetrying
	default:
		return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: unknown outcome %q: %w", jobID, index, a.Outcome, job.ErrInvalid)
	}
	switch {
	case index < 0:
		return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: negative index: %w", jobID, index, job.ErrInvalid)
	case (retryAt != nil || task != nil) && a.Outcome != job.OutcomeRetry:
		return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: retry time or task given for outcome %s: %w", jobID, index, a.Outcome, job.ErrInvalid)
	case retryAt != nil && task == nil:
		return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: parked retry without a task: %w", jobID, index, job.ErrInvalid)
	}
	var taskJSON sql.NullString
	if retryAt != nil {
		b, err := json.Marshal(task)
		if err != nil {
			return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: encode task: %v: %w", jobID, index, err, job.ErrInvalid)
		}
		taskJSON = sql.NullString{String: string(b), Valid: true}
	}
	a.Started = norm(a.Started)

	var out store.Recorded
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var err error
		out, err = s.recordTx(ctx, tx, jobID, index, a, state, retryAt, taskJSON)
		return err
	})
	if err != nil {
		return store.Recorded{}, err
	}
	return out, nil
}

// recordTx records attempt a (whose chunk state is state, parked until
// retryAt with the encoded task taskJSON) of chunk index of job jobID
// within tx, as RecordAttempt describes. ReplaceChunk records its chunk
// through it too.
func (s *Store) recordTx(ctx context.Context, tx *sql.Tx, jobID string, index int64, a job.Attempt, state job.ChunkState, retryAt *time.Time, taskJSON sql.NullString) (store.Recorded, error) {
	// A chunk row implies its job (foreign key); a terminal one is final.
	cur, err := getChunk(ctx, tx, jobID, index)
	switch {
	case errors.Is(err, job.ErrNotFound):
		cur = &job.Chunk{JobID: jobID, Index: index, State: job.ChunkPending}
	case err != nil:
		return store.Recorded{}, err
	case cur.State.Terminal():
		return store.Recorded{Applied: false, Chunk: cur}, nil
	}
	var res sql.Result
	switch a.Outcome {
	case job.OutcomeSucceeded:
		res, err = tx.ExecContext(ctx, `UPDATE jobs SET chunks_done = chunks_done + 1, items_done = items_done + ? WHERE id = ?`, a.Items, jobID)
	case job.OutcomeFailed:
		res, err = tx.ExecContext(ctx, `UPDATE jobs SET chunks_failed = chunks_failed + 1, items_failed = items_failed + ? WHERE id = ?`, a.Items, jobID)
	default:
		res, err = tx.ExecContext(ctx, `UPDATE jobs SET retries = retries + 1 WHERE id = ?`, jobID)
	}
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: count: %w", jobID, index, err)
	}
	if n == 0 {
		return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: job: %w", jobID, index, job.ErrNotFound)
	}

	c := *cur
	a.N = len(c.Attempts) + 1
	c.Attempts = append(c.Attempts, a)
	c.State = state
	if state.Terminal() {
		c.Items = a.Items
	}
	c.RetryAt, c.Task = nil, nil
	if retryAt != nil {
		t := norm(*retryAt)
		c.RetryAt = &t
		c.Task = new(job.ChunkTask)
		if err := json.Unmarshal([]byte(taskJSON.String), c.Task); err != nil {
			return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: decode task: %w", jobID, index, err)
		}
	}
	c.UpdatedAt = norm(s.clock.Now())
	attempts, err := json.Marshal(c.Attempts)
	if err != nil {
		return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: encode attempts: %v: %w", jobID, index, err, job.ErrInvalid)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO chunks (`+chunkCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (job_id, idx) DO UPDATE SET state = excluded.state, items = excluded.items, attempts = excluded.attempts,
			retry_at = excluded.retry_at, task = excluded.task, updated_at = excluded.updated_at`,
		jobID, index, string(c.State), c.Items, string(attempts), nullMicros(c.RetryAt), taskJSON, micros(c.UpdatedAt))
	if err != nil {
		return store.Recorded{}, fmt.Errorf("sqlitestore: record attempt %s/%d: write chunk: %w", jobID, index, err)
	}
	return store.Recorded{Applied: true, Chunk: &c}, nil
}

// GetChunk returns the record of chunk index of job jobID, or an error
// wrapping job.ErrNotFound if the job does not exist or no attempt of the
// chunk has been recorded.
func (s *Store) GetChunk(ctx context.Context, jobID string, index int64) (*job.Chunk, error) {
	return getChunk(ctx, s.db, jobID, index)
}

func getChunk(ctx context.Context, q querier, jobID string, index int64) (*job.Chunk, error) {
	c, err := scanChunk(q.QueryRowContext(ctx, `SELECT `+chunkCols+` FROM chunks WHERE job_id = ? AND idx = ?`, jobID, index))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlitestore: get chunk %s/%d: %w", jobID, index, job.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: get chunk %s/%d: %w", jobID, index, err)
	}
	return c, nil
}

// ListChunks lists the recorded chunks of job jobID in index order, only
// those in q.State if it is set, at most q.Limit per page (DefaultPageSize
// if 0, capped at MaxPageSize). A missing job yields job.ErrNotFound; a
// malformed cursor, a negative limit or an unknown state, job.ErrInvalid.
func (s *Store) ListChunks(ctx context.Context, jobID string, q job.ChunkQuery) (job.ChunkPage, error) {
	limit, err := job.PageSize(q.Limit)
	if err != nil {
		return job.ChunkPage{}, fmt.Errorf("sqlitestore: list chunks %s: %w", jobID, err)
	}
	after := int64(-1)
	if q.Cursor != "" {
		if after, err = decodeChunkCursor(q.Cursor); err != nil {
			return job.ChunkPage{}, fmt.Errorf("sqlitestore: list chunks %s: %w", jobID, err)
		}
	}
	switch q.State {
	case "", job.ChunkPending, job.ChunkRetrying, job.ChunkSucceeded, job.ChunkFailed:
	default:
		return job.ChunkPage{}, fmt.Errorf("sqlitestore: list chunks %s: unknown state %q: %w", jobID, q.State, job.ErrInvalid)
	}
	// Jobs are never deleted, so checking existence apart from the listing
	// is race-free.
	var one int
	switch err := s.db.QueryRowContext(ctx, `SELECT 1 FROM jobs WHERE id = ?`, jobID).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return job.ChunkPage{}, fmt.Errorf("sqlitestore: list chunks %s: %w", jobID, job.ErrNotFound)
	case err != nil:
		return job.ChunkPage{}, fmt.Errorf("sqlitestore: list chunks %s: %w", jobID, err)
	}
	query := `SELECT ` + chunkCols + ` FROM chunks WHERE job_id = ? AND idx > ?`
	args := []any{jobID, after}
	if q.State != "" {
		query += ` AND state = ?`
		args = append(args, string(q.State))
	}
	query += ` ORDER BY idx LIMIT ?`
	args = append(args, limit+1)
	var page job.ChunkPage
	if page.Chunks, err = queryChunks(ctx, s.db, query, args...); err != nil {
		return job.ChunkPage{}, fmt.Errorf("sqlitestore: list chunks %s: %w", jobID, err)
	}
	if len(page.Chunks) > limit {
		page.Chunks = page.Chunks[:limit]
		page.Next = encodeChunkCursor(page.Chunks[limit-1].Index)
	}
	return page, nil
}

// DueRetries returns up to limit parked chunks whose RetryAt is at or before
// now, oldest RetryAt first (limit 0 means DefaultPageSize; it is capped at
// MaxPageSize). A negative limit yields job.ErrInvalid.
func (s *Store) DueRetries(ctx context.Context, now time.Time, limit int) ([]*job.Chunk, error) {
	n, err := job.PageSize(limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: due retries: %w", err)
	}
	chunks, err := queryChunks(ctx, s.db, `SELECT `+chunkCols+` FROM chunks
		WHERE retry_at IS NOT NULL AND retry_at <= ? ORDER BY retry_at, job_id, idx LIMIT ?`, micros(now), n)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: due retries: %w", err)
	}
	return chunks, nil
}

// ReleaseRetry clears the parked chunk's RetryAt and Task and sets its
// UpdatedAt, in one transaction. A chunk that is recorded but not parked
// yields job.ErrConflict; one that is not recorded, job.ErrNotFound.
func (s *Store) ReleaseRetry(ctx context.Context, jobID string, index int64) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE chunks SET retry_at = NULL, task = NULL, updated_at = ?
			WHERE job_id = ? AND idx = ? AND retry_at IS NOT NULL`, micros(s.clock.Now()), jobID, index)
		if err != nil {
			return fmt.Errorf("sqlitestore: release retry %s/%d: %w", jobID, index, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("sqlitestore: release retry %s/%d: %w", jobID, index, err)
		}
		if n == 1 {
			return nil
		}
		if _, err := getChunk(ctx, tx, jobID, index); err != nil {
			return fmt.Errorf("sqlitestore: release retry: %w", err)
		}
		return fmt.Errorf("sqlitestore: release retry %s/%d: not parked: %w", jobID, index, job.ErrConflict)
	})
}

// tx runs fn in one write transaction (BEGIN IMMEDIATE), committing if fn
// returns nil and rolling back otherwise.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlitestore: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlitestore: commit: %w", err)
	}
	return nil
}

func queryChunks(ctx context.Context, q querier, query string, args ...any) ([]*job.Chunk, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*job.Chunk
	for rows.Next() {
		c, err := scanChunk(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func scanJob(r scanner) (*job.Job, error) {
	var (
		j                                      job.Job
		state, sp                              string
		created, updated                       int64
		runAt, startedAt, slicedAt, finishedAt sql.NullInt64
		c                                      = &j.Counters
		f                                      flowScan
	)
	err := r.Scan(&j.ID, &j.Kind, &state, &j.UniqueKey, &j.Channel, &j.Parent, &sp, &j.Error, &j.Result,
		&created, &updated, &runAt, &startedAt, &slicedAt, &finishedAt,
		&c.Sliced, &c.ChunksTotal, &c.ItemsTotal, &c.ChunksDone, &c.ChunksFailed, &c.ItemsDone, &c.ItemsFailed, &c.Retries,
		&f.pending, &f.spec, &f.failure, &f.token)
	if err != nil {
		return nil, err
	}
	if err := f.apply(&j); err != nil {
		return nil, err
	}
	var d spec
	if err := json.Unmarshal([]byte(sp), &d); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", j.ID, err)
	}
	j.State = job.State(state)
	j.Args, j.Input, j.Tags = d.Args, d.Input, d.Tags
	j.ChunkSize, j.MaxAttempts, j.TolerateFailedPct = d.ChunkSize, d.MaxAttempts, d.TolerateFailedPct
	j.CreatedAt, j.UpdatedAt = fromMicros(created), fromMicros(updated)
	j.RunAt, j.StartedAt, j.SlicedAt, j.FinishedAt = timePtr(runAt), timePtr(startedAt), timePtr(slicedAt), timePtr(finishedAt)
	return &j, nil
}

func scanChunk(r scanner) (*job.Chunk, error) {
	var (
		c        job.Chunk
		state    string
		attempts string
		retryAt  sql.NullInt64
		task     sql.NullString
		updated  int64
	)
	if err := r.Scan(&c.JobID, &c.Index, &state, &c.Items, &attempts, &retryAt, &task, &updated); err != nil {
		return nil, err
	}
	c.State = job.ChunkState(state)
	if err := json.Unmarshal([]byte(attempts), &c.Attempts); err != nil {
		return nil, fmt.Errorf("decode attempts of chunk %s/%d: %w", c.JobID, c.Index, err)
	}
	if task.Valid {
		c.Task = new(job.ChunkTask)
		if err := json.Unmarshal([]byte(task.String), c.Task); err != nil {
			return nil, fmt.Errorf("decode task of chunk %s/%d: %w", c.JobID, c.Index, err)
		}
	}
	c.RetryAt = timePtr(retryAt)
	c.UpdatedAt = fromMicros(updated)
	return &c, nil
}

// Cursors are base64url (unpadded) of a tag and the last key of the page:
// "j1:<id>" for jobs, "c1:<index>" for chunks.
const (
	jobCursorTag   = "j1:"
	chunkCursorTag = "c1:"
)

func encodeJobCursor(id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(jobCursorTag + id))
}

func decodeJobCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	id, ok := strings.CutPrefix(string(b), jobCursorTag)
	if err != nil || !ok || id == "" {
		return "", fmt.Errorf("malformed cursor %q: %w", c, job.ErrInvalid)
	}
	return id, nil
}

func encodeChunkCursor(index int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(chunkCursorTag + strconv.FormatInt(index, 10)))
}

func decodeChunkCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	s, ok := strings.CutPrefix(string(b), chunkCursorTag)
	if err != nil || !ok {
		return 0, fmt.Errorf("malformed cursor %q: %w", c, job.ErrInvalid)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("malformed cursor %q: %w", c, job.ErrInvalid)
	}
	return n, nil
}

// norm is the stored form of a time: UTC, truncated to the microsecond.
func norm(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

func nullMicros(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

func nullString(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}

// Settle implements store.Store. Counters change in the same transaction as
// the chunk outcome, so there is nothing to repair: it returns the job.
func (s *Store) Settle(ctx context.Context, jobID string, index int64) (*job.Job, error) {
	j, err := s.GetJob(ctx, jobID)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: settle: %w", err)
	}
	return j, nil
}
