package split

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/slicework/slicework/shared/job"
	"pgregory.net/rapid"
)

// checkCover fails unless p's ranges are non-empty, contiguous and cover
// [start, end) exactly.
func checkCover(t interface {
	Helper()
	Fatalf(string, ...any)
}, p Plan, start, end int64) {
	t.Helper()
	if start == end {
		if p.Len() != 0 {
			t.Fatalf("empty interval: Len = %d, want 0", p.Len())
		}
		return
	}
	if p.Len() < 1 {
		t.Fatalf("Len = %d for [%d, %d)", p.Len(), start, end)
	}
	next := start
	for i := int64(0); i < p.Len(); i++ {
		r := p.At(i)
		if r.Start != next {
			t.Fatalf("range %d = %v, want start %d", i, r, next)
		}
		if r.Len() < 1 {
			t.Fatalf("range %d = %v is empty", i, r)
		}
		next = r.End
	}
	if next != end {
		t.Fatalf("ranges end at %d, want %d", next, end)
	}
}

func TestUniform(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name             string
		start, end, step int64
		want             []Range
		wantErr          bool
	}{
		{name: "exact", start: 0, end: 6, step: 2, want: []Range{{0, 2}, {2, 4}, {4, 6}}},
		{name: "last cut", start: 0, end: 7, step: 3, want: []Range{{0, 3}, {3, 6}, {6, 7}}},
		{name: "offset", start: 10, end: 15, step: 10, want: []Range{{10, 15}}},
		{name: "negative ids", start: -3, end: 2, step: 2, want: []Range{{-3, -1}, {-1, 1}, {1, 2}}},
		{name: "empty", start: 5, end: 5, step: 1, want: []Range{}},
		{name: "step 0", start: 0, end: 5, step: 0, wantErr: true},
		{name: "negative step", start: 0, end: 5, step: -1, wantErr: true},
		{name: "end before start", start: 5, end: 4, step: 1, wantErr: true},
		{name: "too long", start: math.MinInt64, end: math.MaxInt64, step: 1 << 40, wantErr: true},
		{name: "near max", start: math.MaxInt64 - 5, end: math.MaxInt64, step: 4, want: []Range{{math.MaxInt64 - 5, math.MaxInt64 - 1}, {math.MaxInt64 - 1, math.MaxInt64}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Uniform(tt.start, tt.end, tt.step)
			if tt.wantErr {
				if !errors.Is(err, job.ErrInvalid) {
					t.Fatalf("err = %v, want ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := Collect(p); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ranges = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUniformLargeRandomAccess(t *testing.T) {
	// Not parallel: testing.AllocsPerRun refuses to run in parallel tests.
	const n = 5_000_000_000
	p, err := Uniform(0, n, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != 5_000_000 {
		t.Fatalf("Len = %d", p.Len())
	}
	if r := p.At(3_000_000); r != (Range{3_000_000_000, 3_000_001_000}) {
		t.Fatalf("At(3e6) = %v", r)
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = p.At(4_999_999) }); allocs != 0 {
		t.Fatalf("At allocates %v times", allocs)
	}
}

func TestAtPanicsOutOfRange(t *testing.T) {
	t.Parallel()
	u, _ := Uniform(0, 10, 3)
	b, _ := InverseLog(0, 10, 3)
	for name, p := range map[string]Plan{"uniform": u, "bounds": b} {
		for _, i := range []int64{-1, p.Len()} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s.At(%d) did not panic", name, i)
					}
				}()
				p.At(i)
			}()
		}
	}
}

func TestUniformProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.Int64Range(-1e12, 1e12).Draw(t, "start")
		n := rapid.Int64Range(0, 10_000).Draw(t, "n")
		step := rapid.Int64Range(1, 12_000).Draw(t, "step")
		p, err := Uniform(start, start+n, step)
		if err != nil {
			t.Fatal(err)
		}
		checkCover(t, p, start, start+n)
		for i := int64(0); i+1 < p.Len(); i++ {
			if p.At(i).Len() != step {
				t.Fatalf("range %d = %v, want length %d", i, p.At(i), step)
			}
		}
	})
}

func TestInverseLogErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		start, end int64
		count      int
	}{
		{"zero count", 0, 100, 0},
		{"negative count", 0, 100, -1},
		{"count above max", 0, 1e9, MaxBuckets + 1},
		{"end before start", 10, 0, 5},
		{"too long", math.MinInt64, 1, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := InverseLog(tt.start, tt.end, tt.count); !errors.Is(err, job.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestInverseLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		start, end int64
		count      int
		wantLen    int64
		minRatio   float64 // first/last size at least
	}{
		{name: "empty", start: 7, end: 7, count: 10, wantLen: 0},
		{name: "one bucket", start: 0, end: 1000, count: 1, wantLen: 1, minRatio: 1},
		{name: "clamped", start: 0, end: 5, count: 100, wantLen: 5, minRatio: 1},
		{name: "million ids", start: 0, end: 1_000_000, count: 20, wantLen: 20, minRatio: 500},
		{name: "billions", start: 1e9, end: 5e10, count: 100, wantLen: 100, minRatio: 900},
		{name: "max buckets", start: 0, end: 1e12, count: MaxBuckets, wantLen: MaxBuckets, minRatio: 900},
		{name: "huge interval", start: math.MinInt64 / 2, end: math.MaxInt64 / 2, count: 64, wantLen: 64, minRatio: 900},
		{name: "tight", start: 0, end: 150, count: 100, wantLen: 100, minRatio: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := InverseLog(tt.start, tt.end, tt.count)
			if err != nil {
				t.Fatal(err)
			}
			if p.Len() != tt.wantLen {
				t.Fatalf("Len = %d, want %d", p.Len(), tt.wantLen)
			}
			checkCover(t, p, tt.start, tt.end)
			checkNonIncreasing(t, p)
			if p.Len() > 0 {
				first, last := p.At(0).Len(), p.At(p.Len()-1).Len()
				if ratio := float64(first) / float64(last); ratio < tt.minRatio {
					t.Fatalf("first/last = %d/%d = %.1f, want >= %.1f", first, last, ratio, tt.minRatio)
				}
			}
		})
	}
}

func checkNonIncreasing(t interface {
	Helper()
	Fatalf(string, ...any)
}, p Plan) {
	t.Helper()
	for i := int64(1); i < p.Len(); i++ {
		if p.At(i).Len() > p.At(i-1).Len() {
			t.Fatalf("bucket %d (%v) larger than bucket %d (%v)", i, p.At(i), i-1, p.At(i-1))
		}
	}
}

func TestInverseLogProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.Int64Range(-1e15, 1e15).Draw(t, "start")
		n := rapid.OneOf(rapid.Int64Range(0, 1000), rapid.Int64Range(0, 1e15)).Draw(t, "n")
		count := rapid.IntRange(1, 2000).Draw(t, "count")
		p, err := InverseLog(start, start+n, count)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(int64(count), n); p.Len() != want {
			t.Fatalf("Len = %d, want %d", p.Len(), want)
		}
		checkCover(t, p, start, start+n)
		checkNonIncreasing(t, p)
		if p.Len() > 0 && p.At(0).Len() < p.At(p.Len()-1).Len() {
			t.Fatalf("first %v smaller than last %v", p.At(0), p.At(p.Len()-1))
		}
		// With room for the full ratio, the first bucket is ~InverseLogRatio
		// times the last.
		if p.Len() > 1 && n >= int64(count)*InverseLogRatio*10 {
			first, last := p.At(0).Len(), p.At(p.Len()-1).Len()
			if r := float64(first) / float64(last); r < InverseLogRatio*0.9 || r > InverseLogRatio*1.1 {
				t.Fatalf("first/last = %d/%d = %.1f, want ~%d", first, last, r, InverseLogRatio)
			}
		}
	})
}

func TestWeightedErrors(t *testing.T) {
	t.Parallel()
	one := func(int64) float64 { return 1 }
	tests := []struct {
		name       string
		start, end int64
		count      int
		weight     func(int64) float64
	}{
		{"nil weight", 0, 10, 2, nil},
		{"zero count", 0, 10, 0, one},
		{"count above max", 0, 1e9, MaxBuckets + 1, one},
		{"end before start", 10, 0, 2, one},
		{"negative", 0, 100, 4, func(id int64) float64 {
			if id == 50 {
				return -1
			}
			return 1
		}},
		{"NaN", 0, 100, 4, func(id int64) float64 {
			if id == 99 {
				return math.NaN()
			}
			return 1
		}},
		{"infinite", 0, 100, 4, func(int64) float64 { return math.Inf(1) }},
		{"total overflows", 0, 100, 4, func(int64) float64 { return math.MaxFloat64 }},
		{"negative coarse", 0, 1e10, 4, func(id int64) float64 {
			if id > 9e9 {
				return -0.5
			}
			return 1
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := Weighted(tt.start, tt.end, tt.count, tt.weight); !errors.Is(err, job.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestWeightedStopsAtBadWeight(t *testing.T) {
	t.Parallel()
	calls := 0
	_, err := Weighted(0, 1000, 4, func(id int64) float64 {
		calls++
		if id == 10 {
			return math.NaN()
		}
		return 1
	})
	if !errors.Is(err, job.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	if calls != 11 {
		t.Fatalf("weight called %d times, want 11 (stop at the bad id)", calls)
	}
}

func TestWeighted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		start, end int64
		count      int
		weight     func(int64) float64
		want       []Range
	}{
		{name: "uniform weight", start: 0, end: 100, count: 4, weight: func(int64) float64 { return 2 },
			want: []Range{{0, 25}, {25, 50}, {50, 75}, {75, 100}}},
		{name: "zero weight splits evenly", start: 0, end: 10, count: 3, weight: func(int64) float64 { return 0 },
			want: []Range{{0, 3}, {3, 6}, {6, 10}}},
		{name: "step weight", start: 0, end: 100, count: 4, weight: func(id int64) float64 {
			if id >= 50 {
				return 3
			}
			return 1
		}, want: []Range{{0, 50}, {50, 67}, {67, 83}, {83, 100}}},
		{name: "all weight on one id", start: 0, end: 10, count: 3, weight: func(id int64) float64 {
			if id == 9 {
				return 1
			}
			return 0
		}, want: []Range{{0, 8}, {8, 9}, {9, 10}}},
		{name: "clamped", start: 5, end: 8, count: 10, weight: func(int64) float64 { return 1 },
			want: []Range{{5, 6}, {6, 7}, {7, 8}}},
		{name: "empty", start: 5, end: 5, count: 10, weight: func(int64) float64 { panic("called") },
			want: []Range{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := Weighted(tt.start, tt.end, tt.count, tt.weight)
			if err != nil {
				t.Fatal(err)
			}
			if got := Collect(p); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ranges = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWeightedCoarseSampling(t *testing.T) {
	t.Parallel()
	const n = 1e12
	calls := 0
	p, err := Weighted(0, n, 10, func(id int64) float64 {
		calls++
		return float64(id) // density grows linearly
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls > weightCells {
		t.Fatalf("weight called %d times, want at most %d", calls, weightCells)
	}
	checkCover(t, p, 0, n)
	// Cumulative weight is proportional to id², so boundary k is near
	// n·sqrt(k/10).
	for k := int64(1); k < p.Len(); k++ {
		want := n * math.Sqrt(float64(k)/10)
		if got := float64(p.At(k).Start); math.Abs(got-want) > n/1e5 {
			t.Fatalf("boundary %d = %.0f, want ~%.0f", k, got, want)
		}
	}
}

func TestWeightedProperty(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.Int64Range(-1e12, 1e12).Draw(t, "start")
		n := rapid.OneOf(rapid.Int64Range(0, 2000), rapid.Int64Range(1e6, 1e13)).Draw(t, "n")
		count := rapid.IntRange(1, 200).Draw(t, "count")
		hot := rapid.Float64Range(0, 1).Draw(t, "hot") // weight is 1 below, 1000 from start+hot·n on
		split := start + int64(hot*float64(n))
		weight := func(id int64) float64 {
			if id >= split {
				return 1000
			}
			return 1
		}
		p, err := Weighted(start, start+n, count, weight)
		if err != nil {
			t.Fatal(err)
		}
		if want := min(int64(count), n); p.Len() != want {
			t.Fatalf("Len = %d, want %d", p.Len(), want)
		}
		checkCover(t, p, start, start+n)
	})
}

func TestWeightedSmallerBucketsWhereHeavy(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(1000, 1e12).Draw(t, "n")
		count := rapid.IntRange(4, 100).Draw(t, "count")
		// Weight concentrated near the end: density grows like id^4.
		p, err := Weighted(0, n, count, func(id int64) float64 {
			x := float64(id) / float64(n)
			return x * x * x * x
		})
		if err != nil {
			t.Fatal(err)
		}
		checkCover(t, p, 0, n)
		first, last := p.At(0).Len(), p.At(p.Len()-1).Len()
		if last >= first {
			t.Fatalf("last bucket %v not smaller than first %v", p.At(p.Len()-1), p.At(0))
		}
	})
}
