package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/queue"
	"github.com/slicework/slicework/shared/store"
)

// Limits on the workflow fields of a submission.
const (
	// MaxDependsOn is the most dependencies one job may have (see
	// store.MaxDependsOn).
	MaxDependsOn = store.MaxDependsOn
	// MaxCallbackURL is the longest callback URL accepted, in bytes.
	MaxCallbackURL = 2048
)

// validateFlow checks the workflow fields of req (dependencies, run
// anyway, callback URL) and sets them on j. Every dependency must exist:
// it is read, consistently, from the store.
func (e *Engine) validateFlow(ctx context.Context, req Request, j *job.Job) error {
	if len(req.DependsOn) > MaxDependsOn {
		return invalid("depends_on", "%d dependencies, at most %d", len(req.DependsOn), MaxDependsOn)
	}
	seen := make(map[string]bool, len(req.DependsOn))
	for _, id := range req.DependsOn {
		switch {
		case id == "":
			return invalid("depends_on", "empty job id")
		case seen[id]:
			return invalid("depends_on", "job %s listed twice", id)
		}
		seen[id] = true
		if _, err := e.store.GetJob(ctx, id); err != nil {
			if errors.Is(err, job.ErrNotFound) {
				return invalid("depends_on", "job %s not found", id)
			}
			return fmt.Errorf("dependency %s: %w", id, err)
		}
	}
	if req.RunAnyway && len(req.DependsOn) == 0 {
		return invalid("run_anyway", "needs depends_on")
	}
	if req.CallbackURL != "" {
		if len(req.CallbackURL) > MaxCallbackURL {
			return invalid("callback_url", "longer than %d bytes", MaxCallbackURL)
		}
		u, err := url.Parse(req.CallbackURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || strings.ContainsAny(req.CallbackURL, " \t\r\n") {
			return invalid("callback_url", "%q is not an http or https URL with a host (and no user info)", req.CallbackURL)
		}
	}
	j.DependsOn, j.RunAnyway, j.CallbackURL = req.DependsOn, req.RunAnyway, req.CallbackURL
	return nil
}

// Dependants returns the ids of the jobs that depend on job id, in id
// order, or an error wrapping job.ErrNotFound if the job does not exist.
func (e *Engine) Dependants(ctx context.Context, id string) ([]string, error) {
	if _, err := e.store.GetJob(ctx, id); err != nil {
		return nil, fmt.Errorf("engine: dependants of job %s: %w", id, err)
	}
	edges, err := e.store.Dependants(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("engine: dependants of job %s: %w", id, err)
	}
	out := make([]string, len(edges))
	for i, ed := range edges {
		out[i] = ed.Dependant
	}
	return out, nil
}

// dependencyFailure is what a dependant records when dep ends other than
// succeeded: "dependency <id> failed: <its error>" (or cancelled), and ""
// for a dependency that succeeded.
func dependencyFailure(dep *job.Job) string {
	if dep.State == job.StateSucceeded {
		return ""
	}
	return fmt.Sprintf("dependency %s %s: %s", dep.ID, dep.State, dep.Error)
}

// resolveDependants counts terminal job j in every job that depends on it
// and releases those whose last dependency it was. Each edge counts once
// (the store's conditional write); a dependant found ready is released
// whether or not this call resolved its edge, so a repeat after a crash
// finishes what the first run left.
func (e *Engine) resolveDependants(ctx context.Context, j *job.Job) error {
	edges, err := e.store.Dependants(ctx, j.ID)
	if err != nil {
		return fmt.Errorf("engine: job %s: dependants: %w", j.ID, err)
	}
	failure := dependencyFailure(j)
	for _, ed := range edges {
		var dep *job.Job
		if !ed.Resolved {
			r, err := e.store.ResolveDependency(ctx, ed.Dependant, j.ID, failure)
			if err != nil {
				return fmt.Errorf("engine: job %s: resolve dependant %s: %w", j.ID, ed.Dependant, err)
			}
			dep = r.Job
		} else if dep, err = e.store.GetJob(ctx, ed.Dependant); err != nil {
			return fmt.Errorf("engine: job %s: dependant %s: %w", j.ID, ed.Dependant, err)
		}
		if err := e.releaseIfReady(ctx, dep); err != nil {
			return err
		}
	}
	return nil
}

// checkDependencies resolves the dependencies of waiting job j that are
// terminal already: those that finished before j existed, or while it was
// being created, whose own follow-up may have listed its dependants before
// j's edge was written. Then it releases j if it is ready.
func (e *Engine) checkDependencies(ctx context.Context, j *job.Job) error {
	for _, id := range j.DependsOn {
		dep, err := e.store.GetJob(ctx, id)
		failure := ""
		switch {
		case errors.Is(err, job.ErrNotFound):
			failure = fmt.Sprintf("dependency %s: not found", id)
		case err != nil:
			return fmt.Errorf("engine: job %s: dependency %s: %w", j.ID, id, err)
		case !dep.State.Terminal():
			continue
		default:
			failure = dependencyFailure(dep)
		}
		r, err := e.store.ResolveDependency(ctx, j.ID, id, failure)
		if err != nil {
			return fmt.Errorf("engine: job %s: resolve dependency %s: %w", j.ID, id, err)
		}
		j = r.Job
	}
	return e.releaseIfReady(ctx, j)
}

// releaseIfReady moves a waiting job whose dependencies have all finished
// on: to failed with its DepFailure if one failed and it may not run
// anyway, else to queued (enqueuing its slice task, delayed to its RunAt)
// or, for a RunAt beyond the queue's delay, to scheduled. The transition
// is conditional on waiting, so concurrent releases release it once.
func (e *Engine) releaseIfReady(ctx context.Context, j *job.Job) error {
	if j.State != job.StateWaiting || j.DepsPending > 0 {
		return nil
	}
	now := e.clock.Now().UTC()
	if j.DepFailure != "" && !j.RunAnyway {
		reason := j.DepFailure
		done, err := e.store.Transition(ctx, j.ID, []job.State{job.StateWaiting}, job.StateFailed, store.Patch{Error: &reason, FinishedAt: &now})
		if errors.Is(err, job.ErrConflict) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("engine: job %s: fail after its dependency: %w", j.ID, err)
		}
		e.terminal(done)
		return nil
	}
	delay := time.Duration(0)
	if j.RunAt != nil {
		delay = max(j.RunAt.Sub(now), 0)
	}
	to := job.StateQueued
	if delay > queue.MaxDelay {
		to = job.StateScheduled
	}
	if _, err := e.store.Transition(ctx, j.ID, []job.State{job.StateWaiting}, to, store.Patch{}); err != nil {
		if errors.Is(err, job.ErrConflict) {
			return nil
		}
		return fmt.Errorf("engine: job %s: release: %w", j.ID, err)
	}
	e.log.Debug("job released by its dependencies", "job", j.ID, "state", to)
	if to == job.StateQueued {
		if err := e.sendControl(ctx, job.OpSlice, j.ID, delay); err != nil {
			// The job is queued; the sweeper re-drives queued jobs whose
			// slice task went missing.
			e.log.Warn("enqueue slice task failed; the sweeper will retry", "job", j.ID, "err", err)
		}
	}
	return nil
}
