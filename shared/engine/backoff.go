package engine

import (
	"math/rand/v2"
	"time"
)

// Backoff is exponential back-off with full jitter: the delay before attempt
// n+1 is uniform in [0, min(Max, Base·2^(n-1))). With full jitter, retries of
// many chunks that failed together spread out instead of returning in a herd.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultBackoff starts at 1 s and stops growing at 15 min.
var DefaultBackoff = Backoff{Base: time.Second, Max: 15 * time.Minute}

// Ceiling returns the upper bound of the delay after the n-th failed attempt (n ≥ 1).
func (b Backoff) Ceiling(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := b.Base
	for i := 1; i < n && d < b.Max; i++ {
		d *= 2
	}
	if d > b.Max {
		d = b.Max
	}
	return d
}

// Delay returns a random delay in [0, Ceiling(n)), rounded up to whole
// seconds because queue visibility has one-second granularity.
func (b Backoff) Delay(n int) time.Duration {
	c := b.Ceiling(n)
	if c <= 0 {
		return 0
	}
	d := time.Duration(rand.Int64N(int64(c)))
	return d.Round(time.Second)
}
