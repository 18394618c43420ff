package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"time"

	"github.com/slicework/slicework/shared/job"
)

// Delays of any length.
//
// A job runs later with Request.RunAt (an instant) or Request.Delay (a
// duration from the submission). Delays up to the queue's 15-minute limit
// (queue.MaxDelay) ride on the slice task's SQS DelaySeconds; longer ones
// wait in the store as scheduled jobs, which the once-a-minute sweeper
// releases when due (so they start up to a minute late).
//
// A chunk retries later with RetryIn(d, err) or the kind's back-off. Delays
// up to the queue's 12-hour visibility limit (queue.MaxVisibility) hide the
// message; longer ones park the chunk in the store until the sweeper
// re-enqueues it. So delays of seconds and delays of weeks use the same API.

// Duration is a time.Duration that reads and writes JSON as a string: Go's
// duration syntax ("90s", "15m", "36h") extended with a leading whole
// number of days ("3d", "2d12h"). A JSON number is read as seconds.
type Duration time.Duration

var daysPattern = regexp.MustCompile(`^(-?)([0-9]+)d(.*)$`)

// ParseDuration parses s as a Duration: Go's time.ParseDuration syntax,
// optionally preceded by a whole number of days ("3d", "1d12h", "-2d").
// Errors name s and wrap job.ErrInvalid.
func ParseDuration(s string) (Duration, error) {
	m := daysPattern.FindStringSubmatch(s)
	if m == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("duration %q: want e.g. \"90s\", \"15m\", \"36h\" or \"3d\": %w", s, job.ErrInvalid)
		}
		return Duration(d), nil
	}
	days, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil || days > math.MaxInt64/int64(24*time.Hour) {
		return 0, fmt.Errorf("duration %q: too long: %w", s, job.ErrInvalid)
	}
	d := time.Duration(days) * 24 * time.Hour
	if m[3] != "" {
		rest, err := time.ParseDuration(m[3])
		if err != nil || m[3][0] == '-' || m[3][0] == '+' {
			return 0, fmt.Errorf("duration %q: want e.g. \"3d\" or \"1d12h\": %w", s, job.ErrInvalid)
		}
		if rest > math.MaxInt64-d {
			return 0, fmt.Errorf("duration %q: too long: %w", s, job.ErrInvalid)
		}
		d += rest
	}
	if m[1] == "-" {
		d = -d
	}
	return Duration(d), nil
}

// String returns the duration in Go's syntax ("72h0m0s").
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string in Go's syntax.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a string (see ParseDuration) or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := ParseDuration(s)
		if err != nil {
			return err
		}
		*d = v
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf(`duration %s: want a string such as "90s" or "3d", or a number of seconds: %w`, b, job.ErrInvalid)
	}
	if math.Abs(secs) >= float64(math.MaxInt64)/float64(time.Second) {
		return fmt.Errorf("duration: %v seconds is too long: %w", secs, job.ErrInvalid)
	}
	*d = Duration(secs * float64(time.Second))
	return nil
}

// applyDelay turns a request's Delay into its RunAt (now + Delay), after
// checking that the two are not both given and that the delay is within
// 0..MaxRunAhead. The field names are the JSON ones.
func applyDelay(req Request, now time.Time) (Request, error) {
	if req.Delay == 0 {
		return req, nil
	}
	d := time.Duration(req.Delay)
	switch {
	case req.RunAt != nil:
		return req, invalid("delay", "give run_at or delay, not both")
	case d < 0:
		return req, invalid("delay", "must not be negative")
	case d > MaxRunAhead:
		return req, invalid("delay", "more than %s", MaxRunAhead)
	}
	at := now.Add(d)
	req.RunAt = &at
	req.Delay = 0
	return req, nil
}

// RetrySchedule is a retry policy given as the delays after the 1st, 2nd,
// ... failed attempt, for handlers that retry on a calendar rather than on
// an exponential curve. Each delay is shortened by a random jitter of up to
// a tenth, so chunks that failed together do not all return at once.
//
// A handler uses it through Retry, which returns RetryIn with the next
// delay, or a Permanent error once the schedule is used up:
//
//	func (k mailer) Process(ctx context.Context, c *engine.Chunk[Mail]) error {
//		if err := deliver(ctx, c); err != nil {
//			return engine.MailRetry.Retry(c.Attempt, err)
//		}
//		return nil
//	}
//
// The kind's MaxAttempts must allow len(schedule)+1 attempts, or the engine
// stops the retries earlier. Delays above 12 hours park the chunk in the
// store until the sweeper releases it.
type RetrySchedule []time.Duration

// MailRetry retries less and less often over about four days, as mail
// servers do for temporary delivery failures (RFC 5321 §4.5.4.1 asks for
// at least 4–5 days): after 15 min, 30 min, 1 h, 2 h, 4 h, 8 h, 12 h, then
// daily, ten retries and about 99¾ hours in all (less the jitter). Register
// the kind with MaxAttempts of at least MailRetryAttempts.
var MailRetry = RetrySchedule{
	15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 24 * time.Hour, 24 * time.Hour,
}

// MailRetryAttempts is the MaxAttempts a kind that uses MailRetry needs:
// the first attempt and one per delay.
const MailRetryAttempts = 11

// Delay returns the delay after the n-th failed attempt (n ≥ 1): the n-th
// entry (the last one for n past the end), less a random jitter of up to a
// tenth of it, rounded to whole seconds. An empty schedule gives 0.
func (s RetrySchedule) Delay(n int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	d := s[min(max(n, 1), len(s))-1]
	if tenth := int64(d / 10); tenth > 0 {
		d -= time.Duration(rand.Int64N(tenth))
	}
	return d.Round(time.Second)
}

// Total returns the sum of the schedule's delays, without jitter: how long
// a chunk keeps being retried before Retry gives up.
func (s RetrySchedule) Total() time.Duration {
	var t time.Duration
	for _, d := range s {
		t += d
	}
	return t
}

// Retry returns the error a handler returns after its attempt-th attempt
// failed with err: RetryIn(Delay(attempt), err) while the schedule lasts,
// then Permanent(err) naming how long the chunk was retried.
func (s RetrySchedule) Retry(attempt int, err error) error {
	if err == nil {
		err = errors.New("temporary failure")
	}
	if attempt > len(s) {
		return Permanent(fmt.Errorf("gave up after %d attempts over %s: %w", attempt, s.Total(), err))
	}
	return RetryIn(s.Delay(attempt), err)
}
