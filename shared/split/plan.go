// Package split cuts a job's data space into chunk ranges and reads the data
// of one chunk back: plans of id or byte ranges (uniform, inverse-log and
// weighted buckets), line-oriented objects split by byte ranges with
// Hadoop's rule, and explicit item lists stored as NDJSON data blocks.
//
// Plans give random access to the i-th range, so a slicer can emit any
// index interval [i, j) of a plan with flat memory and several slicer
// invocations can share one plan by index ranges.
package split

import (
	"fmt"
	"math"

	"github.com/slicework/slicework/shared/job"
)

// Range is the half-open interval [Start, End) of ids or byte offsets.
type Range struct {
	Start, End int64
}

// Len returns the number of ids (or bytes) in r, End-Start.
func (r Range) Len() int64 { return r.End - r.Start }

// Plan is a sequence of contiguous, non-empty ranges that together cover
// one interval exactly, in increasing order.
type Plan interface {
	// Len returns the number of ranges in the plan (0 for an empty interval).
	Len() int64
	// At returns the i-th range. It panics unless 0 <= i < Len().
	At(i int64) Range
}

// MaxBuckets is the largest bucket count InverseLog and Weighted accept.
const MaxBuckets = 100_000

// InverseLogRatio is the ratio of the first to the last bucket size that
// InverseLog aims for when the interval is large enough.
const InverseLogRatio = 1000

// weightCells is the number of ids above which Weighted samples the weight
// per cell instead of per id, and the most cells it uses.
const weightCells = 1_000_000

// span returns end-start, or an ErrInvalid error if end < start or the
// difference does not fit an int64.
func span(what string, start, end int64) (int64, error) {
	if end < start {
		return 0, fmt.Errorf("split: %s range [%d, %d): end before start: %w", what, start, end, job.ErrInvalid)
	}
	n := end - start
	if n < 0 { // overflow
		return 0, fmt.Errorf("split: %s range [%d, %d): longer than %d: %w", what, start, end, int64(math.MaxInt64), job.ErrInvalid)
	}
	return n, nil
}

type uniform struct {
	start, end, step, n int64
}

// Uniform returns the plan of consecutive ranges of step ids starting at
// start, the last one cut at end: [start, start+step), [start+step,
// start+2*step), ... It computes ranges on demand and allocates nothing per
// range. An empty interval (start == end) gives a plan of length 0. A step
// below 1, end < start, or an interval longer than math.MaxInt64 is an
// error wrapping job.ErrInvalid.
func Uniform(start, end, step int64) (Plan, error) {
	if step < 1 {
		return nil, fmt.Errorf("split: chunk size %d: %w", step, job.ErrInvalid)
	}
	n, err := span("uniform", start, end)
	if err != nil {
		return nil, err
	}
	count := n / step
	if n%step != 0 {
		count++
	}
	return uniform{start: start, end: end, step: step, n: count}, nil
}

func (u uniform) Len() int64 { return u.n }

func (u uniform) At(i int64) Range {
	if i < 0 || i >= u.n {
		panic(fmt.Sprintf("split: range index %d out of [0, %d)", i, u.n))
	}
	s := u.start + i*u.step // i*step < end-start, so no overflow
	if u.end-s <= u.step {
		return Range{s, u.end}
	}
	return Range{s, s + u.step}
}

// bounds is a plan given by its boundaries: range i is [b[i], b[i+1]).
type bounds []int64

func (b bounds) Len() int64 { return int64(len(b) - 1) }

func (b bounds) At(i int64) Range {
	if i < 0 || i >= b.Len() {
		panic(fmt.Sprintf("split: range index %d out of [0, %d)", i, b.Len()))
	}
	return Range{b[i], b[i+1]}
}

// bucketCount validates count and clamps it to the interval length n.
func bucketCount(what string, count int, n int64) (int, error) {
	if count < 1 || count > MaxBuckets {
		return 0, fmt.Errorf("split: %s bucket count %d not in [1, %d]: %w", what, count, MaxBuckets, job.ErrInvalid)
	}
	if int64(count) > n {
		count = int(n)
	}
	return count, nil
}

// InverseLog returns count buckets over [start, end): large buckets of old
// (low) ids and small buckets of new (high) ids, as Polyvore did for
// activity that concentrates on recent ids.
//
// Bucket sizes fall geometrically. With n = count buckets and
// R = InverseLogRatio, the ideal size of bucket k (0-based) is
//
//	size(k) = c · R^(−k/(n−1))
//
// so each bucket is R^(1/(n−1)) times smaller than the one before it and the
// first is R times the last; c is the largest scale for which the integer
// sizes max(1, ⌊size(k)⌋) sum to at most end−start. The ids left over from
// rounding are then handed out one each to the first buckets (after giving
// every bucket an equal share if there are at least n of them). The sizes
// are therefore non-increasing, every bucket holds at least one id, and the
// buckets cover [start, end) exactly. When the interval is too short for
// the full ratio, the tail buckets hold one id each and the ratio is smaller.
//
// count is clamped to end−start; an empty interval gives a plan of length 0.
// count < 1, count > MaxBuckets, end < start or an interval longer than
// math.MaxInt64 is an error wrapping job.ErrInvalid. The plan keeps count+1
// boundaries.
func InverseLog(start, end int64, count int) (Plan, error) {
	n, err := span("inverse-log", start, end)
	if err != nil {
		return nil, err
	}
	count, err = bucketCount("inverse-log", count, n)
	if err != nil {
		return nil, err
	}
	if count == 0 {
		return bounds{start}, nil
	}
	if count == 1 {
		return bounds{start, end}, nil
	}
	shape := make([]float64, count)
	for k := range shape {
		shape[k] = math.Pow(InverseLogRatio, -float64(k)/float64(count-1))
	}
	sizes := make([]int64, count)
	// fill sets sizes for scale c and reports their sum and whether it is
	// at most n; it stops early once the sum would exceed n.
	fill := func(c float64) (int64, bool) {
		var sum int64
		for k, g := range shape {
			v := math.Floor(c * g)
			s := int64(1)
			switch {
			case v >= float64(n):
				s = n
			case v > 1:
				s = int64(v)
			}
			if s > n-sum {
				return 0, false
			}
			sizes[k] = s
			sum += s
		}
		return sum, true
	}
	// fill(0) fits (count <= n); fill(n) does not, since the first size is
	// n and count > 1. Find the largest c whose sizes fit.
	lo, hi := 0.0, float64(n)
	for range 200 {
		mid := lo + (hi-lo)/2
		if mid <= lo || mid >= hi {
			break
		}
		if _, ok := fill(mid); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	sum, _ := fill(lo)
	left := n - sum
	each, extra := left/int64(count), left%int64(count)
	b := make(bounds, count+1)
	b[0] = start
	for k, s := range sizes {
		s += each
		if int64(k) < extra {
			s++
		}
		b[k+1] = b[k] + s
	}
	b[count] = end // equal by construction; keeps the cover exact regardless
	return b, nil
}

// Weighted returns count buckets over [start, end) chosen so that each holds
// about the same total weight, where weight(id) ≥ 0 is the caller's density
// (for example the expected work per id).
//
// Intervals of at most 1,000,000 ids are weighed id by id. Longer intervals
// are cut into at most 1,000,000 equal cells of ⌈(end−start)/1,000,000⌉ ids
// (the last one shorter); weight is called once per cell, at the cell's
// middle id, and stands for every id of the cell; boundaries inside a cell
// are placed by linear interpolation. So weight is called at most 1,000,000
// times, in increasing id order.
//
// Boundary k lies where the cumulative weight reaches k/count of the total,
// then is moved as little as needed to keep every bucket non-empty. If the
// total weight is 0 the buckets split the ids evenly. count is clamped to
// end−start; an empty interval gives a plan of length 0 without calling
// weight. count < 1, count > MaxBuckets, end < start, an interval longer
// than math.MaxInt64, a nil weight, or a negative, NaN or infinite weight
// (or total) is an error wrapping job.ErrInvalid; weight is not called
// again after a bad value.
func Weighted(start, end int64, count int, weight func(id int64) float64) (Plan, error) {
	if weight == nil {
		return nil, fmt.Errorf("split: weighted: nil weight function: %w", job.ErrInvalid)
	}
	n, err := span("weighted", start, end)
	if err != nil {
		return nil, err
	}
	count, err = bucketCount("weighted", count, n)
	if err != nil {
		return nil, err
	}
	if count == 0 {
		return bounds{start}, nil
	}
	cellLen := int64(1)
	if n > weightCells {
		cellLen = n / weightCells
		if n%weightCells != 0 {
			cellLen++
		}
	}
	cells, err := Uniform(start, end, cellLen)
	if err != nil {
		return nil, err
	}
	w := make([]float64, cells.Len())
	var total float64
	for j := range w {
		c := cells.At(int64(j))
		id := c.Start + (c.Len()-1)/2
		v := weight(id)
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("split: weighted: weight(%d) = %v: %w", id, v, job.ErrInvalid)
		}
		w[j] = v * float64(c.Len())
		total += w[j]
	}
	if math.IsInf(total, 0) {
		return nil, fmt.Errorf("split: weighted: total weight overflows: %w", job.ErrInvalid)
	}
	b := make(bounds, count+1)
	b[0], b[count] = start, end
	j, acc := 0, 0.0 // acc is the weight of cells before j
	for k := 1; k < count; k++ {
		var ideal int64
		if total == 0 {
			q, r := n/int64(count), n%int64(count)
			ideal = start + q*int64(k) + r*int64(k)/int64(count)
		} else {
			target := total * float64(k) / float64(count)
			for j < len(w)-1 && acc+w[j] < target {
				acc += w[j]
				j++
			}
			c := cells.At(int64(j))
			f := 0.0
			if w[j] > 0 {
				f = min(max((target-acc)/w[j], 0), 1)
			}
			ideal = c.Start + int64(math.Round(f*float64(c.Len())))
		}
		b[k] = min(max(ideal, b[k-1]+1), end-int64(count-k))
	}
	return b, nil
}

// Collect returns every range of p in order. It allocates Len() ranges, so
// it is meant for tests and small plans; slicers should use At.
func Collect(p Plan) []Range {
	out := make([]Range, p.Len())
	for i := range out {
		out[i] = p.At(int64(i))
	}
	return out
}
