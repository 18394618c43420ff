package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/slicework/slicework/shared/events"
	"github.com/slicework/slicework/shared/job"
)

// Follow-up work is what the engine owes a job after a state change,
// recorded durably as the job's FollowUp token in the same write as the
// change (see store.Flow):
//
//   - a job created waiting: resolve its dependencies that are terminal
//     already, and release it if that was the last;
//   - a terminal job: count it in its dependants and release those it was
//     the last dependency of, publish its completion event, POST its
//     callback.
//
// The process that made the change runs the work at once and then clears
// the token; if it dies first, the sweeper finds the token (after
// StaleAfter) and runs the work again. Every step is idempotent but the
// last two, which are therefore at least once: a completion event carries
// a stable ID (events.EventID), and a callback repeats it in its body.

// CallbackOptions configures the POST of a job's completion event to its
// callback URL. The zero value uses the defaults.
type CallbackOptions struct {
	// Client sends the requests (default: an http.Client with a 5 s
	// timeout).
	Client *http.Client
	// Attempts bounds the tries per callback (default 4).
	Attempts int
	// Backoff is the wait after the first failed try, doubled after each
	// further one and capped at 30 s (default 500 ms).
	Backoff time.Duration
}

func (o CallbackOptions) withDefaults() CallbackOptions {
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 5 * time.Second}
	}
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = 500 * time.Millisecond
	}
	return o
}

// Header names of a callback request.
const (
	// HeaderEventID carries the event's stable ID, for receivers that drop
	// repeats.
	HeaderEventID = "Slicework-Event-Id"
	// HeaderAttempt carries the 1-based try number of this delivery.
	HeaderAttempt = "Slicework-Attempt"
)

// followUpNow runs j's follow-up work right after this process made the
// change that owes it; a failure is left to the sweeper.
func (e *Engine) followUpNow(ctx context.Context, j *job.Job) {
	if err := e.followUp(ctx, j); err != nil {
		e.log.Warn("follow-up failed; the sweeper will retry", "job", j.ID, "state", j.State, "err", err)
	}
}

// followUp runs the work that j's FollowUp token stands for (nothing if it
// has none) and clears the token. A token that changed meanwhile (newer
// work) is left for its own run.
func (e *Engine) followUp(ctx context.Context, j *job.Job) error {
	token := j.FollowUp
	if token == "" {
		return nil
	}
	switch {
	case j.State.Terminal():
		if err := e.resolveDependants(ctx, j); err != nil {
			return err
		}
		if e.events != nil {
			if err := e.events.Publish(ctx, events.Finished(j)); err != nil {
				return fmt.Errorf("engine: job %s: publish completion event: %w", j.ID, err)
			}
		}
		e.callback(ctx, j)
	case j.State == job.StateWaiting:
		if err := e.checkDependencies(ctx, j); err != nil {
			return err
		}
	}
	if err := e.store.ClearFollowUp(ctx, j.ID, token); err != nil && !errors.Is(err, job.ErrConflict) {
		return fmt.Errorf("engine: job %s: clear follow-up: %w", j.ID, err)
	}
	return nil
}

// sweepFollowUps runs the follow-ups whose token is older than stale: the
// work of processes that died before they finished it.
func (e *Engine) sweepFollowUps(ctx context.Context, stale time.Time) (int, error) {
	jobs, err := e.store.FollowUps(ctx, stale, sweepPage)
	if err != nil {
		return 0, fmt.Errorf("sweeper: follow-ups: %w", err)
	}
	n := 0
	for _, j := range jobs {
		if err := e.followUp(ctx, j); err != nil {
			e.log.Warn("sweeper: follow-up failed; next sweep retries", "job", j.ID, "err", err)
			continue
		}
		n++
	}
	return n, nil
}

// callback POSTs j's completion event to its callback URL, trying up to
// Attempts times with exponential back-off on a transport error or a
// status other than 2xx. It never fails the follow-up: a callback that
// keeps failing is logged and dropped.
func (e *Engine) callback(ctx context.Context, j *job.Job) {
	if j.CallbackURL == "" {
		return
	}
	ev := events.Finished(j)
	body, err := json.Marshal(ev)
	if err != nil {
		e.log.Error("callback: encode event", "job", j.ID, "err", err)
		return
	}
	o := e.callbacks
	wait := o.Backoff
	for attempt := 1; ; attempt++ {
		err := e.post(ctx, j.CallbackURL, body, ev.ID, attempt)
		if err == nil {
			e.log.Debug("callback delivered", "job", j.ID, "attempt", attempt)
			return
		}
		if attempt >= o.Attempts {
			e.log.Warn("callback failed; giving up", "job", j.ID, "url", j.CallbackURL, "attempts", attempt, "err", err)
			return
		}
		e.log.Info("callback failed; retrying", "job", j.ID, "attempt", attempt, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			e.log.Warn("callback abandoned", "job", j.ID, "err", ctx.Err())
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// post makes one callback request.
func (e *Engine) post(ctx context.Context, url string, body []byte, id string, attempt int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "slicework-callback")
	req.Header.Set(HeaderEventID, id)
	req.Header.Set(HeaderAttempt, fmt.Sprint(attempt))
	resp, err := e.callbacks.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return nil
}

// newFollowUpToken returns a fresh follow-up token.
func newFollowUpToken() string { return rand.Text() }
