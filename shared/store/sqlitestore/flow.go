package sqlitestore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// flowSchema holds dependencies and follow-up work (store.Flow), in tables
// of their own so that data directories made before them open unchanged.
//
// dep_edges has one row per dependency edge, keyed by the dependency so
// that a terminal job lists its dependants by primary key; resolved turns
// 1 exactly once. A job's DepsPending is the count of its unresolved edges,
// computed in the same transaction as every change, so it needs no counter.
// job_flow has a row for a job with flow data: spec (JSON of DependsOn,
// RunAnyway and CallbackURL, which never change), dep_failure, and the
// follow-up token with the time it was set (NULL when none), indexed
// (partially) for FollowUps.
const flowSchema = `
CREATE TABLE IF NOT EXISTS dep_edges (
	dependency TEXT NOT NULL,
	dependant  TEXT NOT NULL REFERENCES jobs(id),
	resolved   INTEGER NOT NULL,
	PRIMARY KEY (dependency, dependant)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS dep_edges_dependant ON dep_edges(dependant, resolved);
CREATE TABLE IF NOT EXISTS job_flow (
	job_id       TEXT PRIMARY KEY REFERENCES jobs(id),
	spec         TEXT NOT NULL,
	dep_failure  TEXT NOT NULL,
	follow_up    TEXT,
	follow_up_at INTEGER
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_flow_follow_up ON job_flow(follow_up_at, job_id) WHERE follow_up IS NOT NULL;
`

// flowCols are the flow columns of a job, read with jobCols from jobs:
// pending dependencies, the flow spec, dep_failure and the follow-up token.
const flowCols = `,
	(SELECT COUNT(*) FROM dep_edges e WHERE e.dependant = jobs.id AND e.resolved = 0),
	COALESCE((SELECT f.spec FROM job_flow f WHERE f.job_id = jobs.id), ''),
	COALESCE((SELECT f.dep_failure FROM job_flow f WHERE f.job_id = jobs.id), ''),
	COALESCE((SELECT f.follow_up FROM job_flow f WHERE f.job_id = jobs.id), '')`

// flowSpec is the JSON of a job's immutable flow fields.
type flowSpec struct {
	DependsOn   []string `json:"depends_on,omitempty"`
	RunAnyway   bool     `json:"run_anyway,omitempty"`
	CallbackURL string   `json:"callback_url,omitempty"`
}

// flowScan receives the flow columns of one row.
type flowScan struct {
	pending int
	spec    string
	failure string
	token   string
}

func (f *flowScan) targets() []any { return []any{&f.pending, &f.spec, &f.failure, &f.token} }

// apply sets j's flow fields from the scanned columns.
func (f *flowScan) apply(j *job.Job) error {
	j.DepsPending, j.DepFailure, j.FollowUp = f.pending, f.failure, f.token
	if f.spec == "" {
		return nil
	}
	var sp flowSpec
	if err := json.Unmarshal([]byte(f.spec), &sp); err != nil {
		return fmt.Errorf("decode flow of job %s: %w", j.ID, err)
	}
	j.DependsOn, j.RunAnyway, j.CallbackURL = sp.DependsOn, sp.RunAnyway, sp.CallbackURL
	return nil
}

// insertFlow writes j's dependency edges and flow row within tx, after its
// jobs row; j's DependsOn must be valid (store.CheckDependsOn). A FollowUp
// given at creation counts as set at CreatedAt.
func insertFlow(ctx context.Context, tx *sql.Tx, j *job.Job) error {
	for _, dep := range j.DependsOn {
		if _, err := tx.ExecContext(ctx, `INSERT INTO dep_edges (dependency, dependant, resolved) VALUES (?, ?, 0)`, dep, j.ID); err != nil {
			return fmt.Errorf("sqlitestore: create job %s: dependency %s: %w", j.ID, dep, err)
		}
	}
	if len(j.DependsOn) == 0 && !j.RunAnyway && j.CallbackURL == "" && j.DepFailure == "" && j.FollowUp == "" {
		return nil
	}
	sp, err := json.Marshal(flowSpec{DependsOn: j.DependsOn, RunAnyway: j.RunAnyway, CallbackURL: j.CallbackURL})
	if err != nil {
		return fmt.Errorf("sqlitestore: create job %s: encode flow: %v: %w", j.ID, err, job.ErrInvalid)
	}
	var at sql.NullInt64
	if j.FollowUp != "" {
		at = sql.NullInt64{Int64: micros(j.CreatedAt), Valid: true}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO job_flow (job_id, spec, dep_failure, follow_up, follow_up_at) VALUES (?, ?, ?, ?, ?)`,
		j.ID, string(sp), j.DepFailure, nullString(j.FollowUp), at)
	if err != nil {
		return fmt.Errorf("sqlitestore: create job %s: flow: %w", j.ID, err)
	}
	return nil
}

// setFollowUp gives job id a new follow-up token within tx.
func (s *Store) setFollowUp(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO job_flow (job_id, spec, dep_failure, follow_up, follow_up_at) VALUES (?, '', '', ?, ?)
		ON CONFLICT (job_id) DO UPDATE SET follow_up = excluded.follow_up, follow_up_at = excluded.follow_up_at`,
		id, rand.Text(), micros(s.clock.Now()))
	if err != nil {
		return fmt.Errorf("sqlitestore: job %s: set follow-up: %w", id, err)
	}
	return nil
}

// ResolveDependency implements store.Flow in one transaction: the edge's
// resolved flag turns 1 only if it was 0 (which drops the dependant's
// DepsPending, a count of its unresolved edges), and DepFailure is set in
// the same transaction.
func (s *Store) ResolveDependency(ctx context.Context, dependant, dep, failure string) (store.Resolution, error) {
	var out store.Resolution
	err := s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE dep_edges SET resolved = 1 WHERE dependency = ? AND dependant = ? AND resolved = 0`, dep, dependant)
		if err != nil {
			return fmt.Errorf("sqlitestore: resolve dependency %s of %s: %w", dep, dependant, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("sqlitestore: resolve dependency %s of %s: %w", dep, dependant, err)
		}
		if n == 0 {
			var one int
			switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM dep_edges WHERE dependency = ? AND dependant = ?`, dep, dependant).Scan(&one); {
			case errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("sqlitestore: resolve dependency %s of %s: no such edge: %w", dep, dependant, job.ErrNotFound)
			case err != nil:
				return fmt.Errorf("sqlitestore: resolve dependency %s of %s: %w", dep, dependant, err)
			}
			out.Job, err = getJob(ctx, tx, dependant)
			return err
		}
		out.Applied = true
		if failure != "" {
			_, err := tx.ExecContext(ctx, `INSERT INTO job_flow (job_id, spec, dep_failure) VALUES (?, '', ?)
				ON CONFLICT (job_id) DO UPDATE SET dep_failure = CASE WHEN dep_failure = '' THEN excluded.dep_failure ELSE dep_failure END`,
				dependant, failure)
			if err != nil {
				return fmt.Errorf("sqlitestore: resolve dependency %s of %s: record failure: %w", dep, dependant, err)
			}
		}
		out.Job, err = getJob(ctx, tx, dependant)
		return err
	})
	if err != nil {
		return store.Resolution{}, err
	}
	return out, nil
}

// Dependants implements store.Flow.
func (s *Store) Dependants(ctx context.Context, id string) ([]store.Edge, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT dependant, resolved FROM dep_edges WHERE dependency = ? ORDER BY dependant`, id)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: dependants of %s: %w", id, err)
	}
	defer rows.Close()
	out := []store.Edge{}
	for rows.Next() {
		var e store.Edge
		if err := rows.Scan(&e.Dependant, &e.Resolved); err != nil {
			return nil, fmt.Errorf("sqlitestore: dependants of %s: %w", id, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: dependants of %s: %w", id, err)
	}
	return out, nil
}

// FollowUps implements store.Flow, reading the partial follow-up index.
func (s *Store) FollowUps(ctx context.Context, before time.Time, limit int) ([]*job.Job, error) {
	n, err := job.PageSize(limit)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: follow-ups: %w", err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE id IN (
		SELECT job_id FROM job_flow WHERE follow_up IS NOT NULL AND follow_up_at <= ? ORDER BY follow_up_at, job_id LIMIT ?)
		ORDER BY (SELECT follow_up_at FROM job_flow f WHERE f.job_id = jobs.id), id`, micros(before), n)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: follow-ups: %w", err)
	}
	defer rows.Close()
	var out []*job.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: follow-ups: %w", err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: follow-ups: %w", err)
	}
	return out, nil
}

// ClearFollowUp implements store.Flow in one conditional UPDATE.
func (s *Store) ClearFollowUp(ctx context.Context, id, token string) error {
	return s.tx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE job_flow SET follow_up = NULL, follow_up_at = NULL WHERE job_id = ? AND follow_up = ?`, id, token)
		if err != nil {
			return fmt.Errorf("sqlitestore: clear follow-up of %s: %w", id, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("sqlitestore: clear follow-up of %s: %w", id, err)
		}
		if n == 1 {
			return nil
		}
		if _, err := getJob(ctx, tx, id); err != nil {
			return fmt.Errorf("sqlitestore: clear follow-up: %w", err)
		}
		return fmt.Errorf("sqlitestore: clear follow-up of %s: token %q is not the job's: %w", id, token, job.ErrConflict)
	})
}
