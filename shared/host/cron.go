package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/schedule"
)

// cronPoll is the longest the schedule loop sleeps before it reads the
// clock again. Waking once a second costs nothing, and it lets a test's
// fake clock move the schedules.
const cronPoll = time.Second

// cronEntry is one schedule the host fires.
type cronEntry struct {
	def  schedule.Definition
	expr *schedule.Expression
}

// parseSchedules checks defs as the host's schedules: each valid, named
// once, and of a kind the engine has.
func parseSchedules(e *engine.Engine, defs []schedule.Definition) ([]cronEntry, error) {
	var errs []error
	seen := map[string]bool{}
	out := make([]cronEntry, 0, len(defs))
	kinds := e.Registry().Kinds()
	for _, d := range defs {
		if err := d.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[d.Name] {
			errs = append(errs, fmt.Errorf("schedule %q: name used twice", d.Name))
		}
		seen[d.Name] = true
		if !slices.Contains(kinds, d.Kind) {
			errs = append(errs, fmt.Errorf("schedule %q: kind %q is not registered (kinds: %v)", d.Name, d.Kind, kinds))
		}
		x, err := schedule.ParseExpression(d.Expression)
		if err != nil {
			errs = append(errs, fmt.Errorf("schedule %q: %w", d.Name, err))
			continue
		}
		out = append(out, cronEntry{def: d, expr: x})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	return out, nil
}

// cronStart returns the first fire time of each schedule after now, and
// whether it has one.
func (h *Host) cronStart() (next []time.Time, live []bool) {
	now := h.e.Clock().Now()
	next, live = make([]time.Time, len(h.crons)), make([]bool, len(h.crons))
	for i, c := range h.crons {
		next[i], live[i] = c.expr.Next(now)
	}
	return next, live
}

// cron fires the schedules until ctx is done, starting from the fire times
// of cronStart (taken when the host starts), then after each firing at the
// expression's next time after now. A firing the host slept through (a
// suspended laptop) fires once, late, with its own tick; the ticks in
// between are skipped, as EventBridge does not catch up either.
func (h *Host) cron(ctx, work context.Context, next []time.Time, live []bool) {
	if len(h.crons) == 0 {
		return
	}
	clk := h.e.Clock()
	for {
		now := clk.Now()
		wait := cronPoll
		for i, c := range h.crons {
			if !live[i] {
				continue
			}
			if !next[i].After(now) {
				h.fire(work, c.def, next[i])
				next[i], live[i] = c.expr.Next(now)
				if !live[i] {
					continue
				}
			}
			wait = min(wait, next[i].Sub(now))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(wait, time.Millisecond)):
		}
	}
}

// fire invokes the scheduler with the event of d's rule for tick.
func (h *Host) fire(ctx context.Context, d schedule.Definition, tick time.Time) {
	payload, err := d.Event(job.NewID(time.Now()), tick, h.cfg.Account, h.cfg.Region)
	if err != nil {
		h.log.Error("schedule event", "schedule", d.Name, "err", err)
		return
	}
	ictx, cancel := context.WithTimeout(ctx, h.cfg.FunctionTimeout)
	defer cancel()
	_, err = h.cronFn.Invoke(ictx, payload)
	h.count("scheduler", err != nil)
	if err != nil {
		h.log.Error("schedule invocation failed", "schedule", d.Name, "tick", tick, "err", err)
	}
}
