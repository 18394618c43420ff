package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// Get returns job id, or an error wrapping job.ErrNotFound.
func (e *Engine) Get(ctx context.Context, id string) (*job.Job, error) {
	j, err := e.store.GetJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("engine: get job %s: %w", id, err)
	}
	return j, nil
}

// List returns one page of jobs matching q, newest first. q is checked
// with ValidateQuery first; a malformed cursor yields job.ErrInvalid.
func (e *Engine) List(ctx context.Context, q job.Query) (job.Page, error) {
	if err := ValidateQuery(q); err != nil {
		return job.Page{}, fmt.Errorf("engine: list jobs: %w", err)
	}
	p, err := e.store.ListJobs(ctx, q)
	if err != nil {
		return job.Page{}, fmt.Errorf("engine: list jobs: %w", err)
	}
	return p, nil
}

// Chunks returns one page of job id's chunk records, with every attempt.
func (e *Engine) Chunks(ctx context.Context, id string, q job.ChunkQuery) (job.ChunkPage, error) {
	if _, err := e.store.GetJob(ctx, id); err != nil {
		return job.ChunkPage{}, fmt.Errorf("engine: chunks of job %s: %w", id, err)
	}
	p, err := e.store.ListChunks(ctx, id, q)
	if err != nil {
		return job.ChunkPage{}, fmt.Errorf("engine: chunks of job %s: %w", id, err)
	}
	return p, nil
}

// Cancel moves job id to cancelled. Chunks already queued are skipped when
// delivered. Cancelling a job in a terminal state fails with an error
// wrapping job.ErrConflict and returns the job.
func (e *Engine) Cancel(ctx context.Context, id string) (*job.Job, error) {
	now := e.clock.Now().UTC()
	reason := "cancelled"
	j, err := e.store.Transition(ctx, id, []job.State{job.StateScheduled, job.StateWaiting, job.StateQueued, job.StateRunning, job.StateFinishing},
		job.StateCancelled, store.Patch{Error: &reason, FinishedAt: &now})
	if err != nil {
		return j, fmt.Errorf("engine: cancel job %s: %w", id, err)
	}
	e.terminal(j)
	return j, nil
}

// Progress is a job's progress, derived from its counters.
type Progress struct {
	ChunksTotal  int64   `json:"chunks_total"`
	ChunksDone   int64   `json:"chunks_done"`
	ChunksFailed int64   `json:"chunks_failed"`
	ItemsTotal   int64   `json:"items_total,omitempty"`
	ItemsDone    int64   `json:"items_done"`
	ItemsFailed  int64   `json:"items_failed"`
	Retries      int64   `json:"retries"`
	Sliced       bool    `json:"sliced"`
	Percent      float64 `json:"percent"`
	// ItemsPerSec is items done per second since the job started.
	ItemsPerSec float64 `json:"items_per_sec"`
	// Elapsed since the job started (to its end, for finished jobs).
	Elapsed time.Duration `json:"elapsed_ns"`
	// ETA is the estimated time left; 0 when unknown or finished.
	ETA time.Duration `json:"eta_ns,omitempty"`
}

// ProgressOf derives j's progress at now. Percent counts accounted chunks;
// before slicing ends the total is provisional.
func ProgressOf(j *job.Job, now time.Time) Progress {
	c := j.Counters
	p := Progress{
		ChunksTotal: c.ChunksTotal, ChunksDone: c.ChunksDone, ChunksFailed: c.ChunksFailed,
		ItemsTotal: c.ItemsTotal, ItemsDone: c.ItemsDone, ItemsFailed: c.ItemsFailed,
		Retries: c.Retries, Sliced: c.Sliced,
	}
	accounted := c.ChunksDone + c.ChunksFailed
	if c.ChunksTotal > 0 {
		p.Percent = 100 * float64(accounted) / float64(c.ChunksTotal)
	}
	if j.StartedAt != nil {
		end := now
		if j.FinishedAt != nil {
			end = *j.FinishedAt
		}
		p.Elapsed = end.Sub(*j.StartedAt)
		if s := p.Elapsed.Seconds(); s > 0 {
			p.ItemsPerSec = float64(c.ItemsDone) / s
		}
		if !j.State.Terminal() && c.Sliced && accounted > 0 && accounted < c.ChunksTotal {
			per := p.Elapsed / time.Duration(accounted)
			p.ETA = per * time.Duration(c.ChunksTotal-accounted)
		}
	}
	return p
}

// IsNotFound reports whether err means a missing job, chunk or object.
func IsNotFound(err error) bool { return errors.Is(err, job.ErrNotFound) }
