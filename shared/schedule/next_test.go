package schedule

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

func at(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestNext(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr  string
		after string
		want  []string // successive fire times; "" for none
	}{
		// rate: multiples of the period from the epoch.
		{"rate(1 minute)", "2026-01-02 03:04", []string{"2026-01-02 03:05", "2026-01-02 03:06"}},
		{"rate(5 minutes)", "2026-01-02 03:04", []string{"2026-01-02 03:05", "2026-01-02 03:10"}},
		{"rate(5 minutes)", "2026-01-02 03:05", []string{"2026-01-02 03:10"}},
		{"rate(1 hour)", "2026-01-02 23:30", []string{"2026-01-03 00:00", "2026-01-03 01:00"}},
		{"rate(6 hours)", "2026-01-02 03:04", []string{"2026-01-02 06:00", "2026-01-02 12:00"}},
		{"rate(1 day)", "2026-01-02 03:04", []string{"2026-01-03 00:00", "2026-01-04 00:00"}},
		{"rate(7 days)", "2026-01-02 03:04", []string{"2026-01-08 00:00", "2026-01-15 00:00"}}, // epoch weeks start on Thursdays
		// plain cron
		{"cron(0 3 * * ? *)", "2026-01-02 03:00", []string{"2026-01-03 03:00", "2026-01-04 03:00"}},
		{"cron(0 3 * * ? *)", "2026-01-02 02:59", []string{"2026-01-02 03:00"}},
		{"cron(0/15 * * * ? *)", "2026-01-02 03:04", []string{"2026-01-02 03:15", "2026-01-02 03:30", "2026-01-02 03:45", "2026-01-02 04:00"}},
		{"cron(5/20 * * * ? *)", "2026-01-02 03:50", []string{"2026-01-02 04:05", "2026-01-02 04:25", "2026-01-02 04:45"}},
		{"cron(0,30 8-9 * * ? *)", "2026-01-02 09:30", []string{"2026-01-03 08:00", "2026-01-03 08:30", "2026-01-03 09:00"}},
		{"cron(0 0-23/8 * * ? *)", "2026-01-02 17:00", []string{"2026-01-03 00:00", "2026-01-03 08:00"}},
		{"cron(0 18 ? * MON-FRI *)", "2026-01-02 18:00", []string{"2026-01-05 18:00", "2026-01-06 18:00"}}, // Fri → Mon
		{"cron(0 9 ? * 1 *)", "2026-01-02 00:00", []string{"2026-01-04 09:00", "2026-01-11 09:00"}},        // 1 = Sunday
		{"cron(0 9 ? * sat,SUN *)", "2026-01-02 00:00", []string{"2026-01-03 09:00", "2026-01-04 09:00", "2026-01-10 09:00"}},
		{"cron(0 8 1 * ? *)", "2026-01-02 00:00", []string{"2026-02-01 08:00", "2026-03-01 08:00"}},
		{"cron(0 0 31 * ? *)", "2026-01-31 00:00", []string{"2026-03-31 00:00", "2026-05-31 00:00"}},
		{"cron(0 0 29 2 ? *)", "2025-01-01 00:00", []string{"2028-02-29 00:00", "2032-02-29 00:00"}},
		{"cron(0 0 1 JAN,jul ? *)", "2026-01-01 00:00", []string{"2026-07-01 00:00", "2027-01-01 00:00"}},
		{"cron(0 0 1 */5 ? *)", "2026-01-01 00:00", []string{"2026-06-01 00:00", "2026-11-01 00:00", "2027-01-01 00:00"}},
		// years
		{"cron(0 0 1 1 ? 2030-2031)", "2026-05-05 00:00", []string{"2030-01-01 00:00", "2031-01-01 00:00", ""}},
		{"cron(0 0 1 1 ? 2025/2)", "2026-05-05 00:00", []string{"2027-01-01 00:00", "2029-01-01 00:00"}},
		{"cron(0 0 1 1 ? 2020)", "2026-05-05 00:00", []string{""}},
		{"cron(59 23 31 12 ? 2199)", "2199-12-31 23:58", []string{"2199-12-31 23:59", ""}},
		// L, W and #
		{"cron(0 0 L * ? *)", "2026-01-31 00:00", []string{"2026-02-28 00:00", "2026-03-31 00:00", "2026-04-30 00:00"}},
		{"cron(0 0 L 2 ? *)", "2027-03-01 00:00", []string{"2028-02-29 00:00"}},
		// 2026-02-15 is a Sunday → Mon 16; 2026-03-15 is a Sunday → 16; 2026-08-15 is a Saturday → Fri 14.
		{"cron(0 0 15W * ? *)", "2026-02-01 00:00", []string{"2026-02-16 00:00", "2026-03-16 00:00", "2026-04-15 00:00"}},
		{"cron(0 0 15W 8 ? *)", "2026-01-01 00:00", []string{"2026-08-14 00:00"}},
		// 1W: 2026-08-01 is a Saturday → Monday the 3rd, not July.
		{"cron(0 0 1W 8 ? *)", "2026-01-01 00:00", []string{"2026-08-03 00:00"}},
		// 31W: 2026-05-31 is a Sunday and the last day → Friday the 29th.
		{"cron(0 0 31W 5 ? *)", "2026-01-01 00:00", []string{"2026-05-29 00:00"}},
		// 31W in a 30-day month does not fire.
		{"cron(0 0 31W 4,5 ? *)", "2026-01-01 00:00", []string{"2026-05-29 00:00", "2027-05-31 00:00"}},
		{"cron(0 0 ? * L *)", "2026-01-02 00:00", []string{"2026-01-03 00:00", "2026-01-10 00:00"}}, // L alone: Saturday
		{"cron(0 0 ? * 6L *)", "2026-01-01 00:00", []string{"2026-01-30 00:00", "2026-02-27 00:00"}},
		{"cron(0 0 ? * FRIL *)", "2026-01-01 00:00", []string{"2026-01-30 00:00", "2026-02-27 00:00"}},
		{"cron(0 9 ? * 2#1 *)", "2026-01-01 00:00", []string{"2026-01-05 09:00", "2026-02-02 09:00", "2026-03-02 09:00"}},
		{"cron(0 9 ? * MON#1 *)", "2026-01-05 09:00", []string{"2026-02-02 09:00"}},
		// The fifth Thursday exists only in some months.
		{"cron(0 0 ? * THU#5 *)", "2026-01-01 00:00", []string{"2026-01-29 00:00", "2026-04-30 00:00", "2026-07-30 00:00"}},
	}
	for _, tc := range tests {
		t.Run(tc.expr+" after "+tc.after, func(t *testing.T) {
			t.Parallel()
			x, err := ParseExpression(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			cur := at(tc.after)
			for i, w := range tc.want {
				got, ok := x.Next(cur)
				if w == "" {
					if ok {
						t.Fatalf("fire %d: %s, want none", i+1, got)
					}
					return
				}
				if !ok || !got.Equal(at(w)) || got.Location() != time.UTC {
					t.Fatalf("fire %d: %s (%v), want %s", i+1, got, ok, w)
				}
				cur = got
			}
		})
	}
}

func TestNextFromOddInstants(t *testing.T) {
	t.Parallel()
	x, err := ParseExpression("cron(0/10 * * * ? *)")
	if err != nil {
		t.Fatal(err)
	}
	cet := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		after time.Time
		want  string
	}{
		{time.Date(2026, 1, 2, 3, 9, 59, 999, time.UTC), "2026-01-02 03:10"},
		{time.Date(2026, 1, 2, 3, 10, 0, 1, time.UTC), "2026-01-02 03:20"},
		{time.Date(2026, 1, 2, 4, 10, 0, 0, cet), "2026-01-02 03:20"},
		{time.Date(1960, 1, 2, 4, 10, 0, 0, time.UTC), "1970-01-01 00:00"},
	} {
		if got, ok := x.Next(tc.after); !ok || !got.Equal(at(tc.want)) {
			t.Errorf("Next(%s) = %s, want %s", tc.after, got, tc.want)
		}
	}
	r, _ := ParseExpression("rate(1 hour)")
	if got, _ := r.Next(time.Date(1969, 12, 31, 22, 30, 0, 0, time.UTC)); !got.Equal(at("1969-12-31 23:00")) {
		t.Errorf("rate before the epoch: %s", got)
	}
}

func TestTick(t *testing.T) {
	t.Parallel()
	cet := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		in   time.Time
		want string
	}{
		{time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC), "2026-01-02 03:00"},
		{time.Date(2026, 1, 2, 3, 0, 59, 999999999, time.UTC), "2026-01-02 03:00"},
		{time.Date(2026, 1, 2, 4, 0, 7, 0, cet), "2026-01-02 03:00"},
	} {
		if got := Tick(tc.in); !got.Equal(at(tc.want)) || got.Location() != time.UTC {
			t.Errorf("Tick(%s) = %s, want %s UTC", tc.in, got, tc.want)
		}
	}
}

func TestParseExpressionRejects(t *testing.T) {
	t.Parallel()
	for _, expr := range []string{"", "rate(0 minutes)", "cron(0 3 * * * *)", "cron(0 3 ? * 8 *)"} {
		if _, err := ParseExpression(expr); err == nil || err.Error() != ValidateExpression(expr).Error() {
			t.Errorf("ParseExpression(%q) = %v, want ValidateExpression's error", expr, err)
		}
	}
}

// randomCron draws an EventBridge cron expression within what robfig/cron
// also understands (no L, W, # or year), and returns it in both syntaxes.
func randomCron(rng *rand.Rand) (eventBridge, robfig string) {
	field := func(lo, hi int) string {
		switch rng.IntN(6) {
		case 0:
			return "*"
		case 1:
			return fmt.Sprint(lo + rng.IntN(hi-lo+1))
		case 2:
			a := lo + rng.IntN(hi-lo+1)
			return fmt.Sprintf("%d-%d", a, a+rng.IntN(hi-a+1))
		case 3:
			return fmt.Sprintf("*/%d", 1+rng.IntN(hi-lo))
		case 4:
			a := lo + rng.IntN(hi-lo+1)
			return fmt.Sprintf("%d/%d", a, 1+rng.IntN(hi-lo))
		}
		var items []string
		for range 1 + rng.IntN(3) {
			items = append(items, fmt.Sprint(lo+rng.IntN(hi-lo+1)))
		}
		return strings.Join(items, ",")
	}
	min, hour, month := field(0, 59), field(0, 23), field(1, 12)
	days := []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
	if rng.IntN(2) == 0 {
		dom := field(1, 31)
		return fmt.Sprintf("cron(%s %s %s %s ? *)", min, hour, dom, month), fmt.Sprintf("%s %s %s %s ?", min, hour, dom, month)
	}
	var dow string
	switch rng.IntN(3) {
	case 0:
		dow = "*"
	case 1:
		a := rng.IntN(7)
		dow = days[a] + "-" + days[a+rng.IntN(7-a)]
	default:
		dow = days[rng.IntN(7)] + "," + days[rng.IntN(7)]
	}
	return fmt.Sprintf("cron(%s %s ? %s %s *)", min, hour, month, dow), fmt.Sprintf("%s %s * %s %s", min, hour, month, dow)
}

// Next agrees with robfig/cron on the expressions both understand.
func TestNextAgreesWithRobfigCron(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	parser := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	checked := 0
	for range 2000 {
		eb, rc := randomCron(rng)
		x, err := ParseExpression(eb)
		if err != nil {
			t.Fatalf("%s: %v", eb, err)
		}
		oracle, err := parser.Parse(rc)
		if err != nil {
			t.Fatalf("robfig %q: %v", rc, err)
		}
		cur := time.Date(2000+rng.IntN(100), time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), 0, time.UTC)
		for range 5 {
			want := oracle.Next(cur)
			if want.IsZero() {
				break // robfig gives up after five years (e.g. only 31 February)
			}
			got, ok := x.Next(cur)
			if !ok || !got.Equal(want) {
				t.Fatalf("%s after %s: got %s (%v), robfig/cron %q says %s", eb, cur, got, ok, rc, want)
			}
			cur = got
			checked++
		}
	}
	if checked < 5000 {
		t.Fatalf("only %d fire times compared", checked)
	}
}
