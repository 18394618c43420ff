package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Expression is a parsed schedule expression that can tell when it fires.
// Times are in UTC, as EventBridge evaluates rules, to the minute.
type Expression struct {
	text string
	// rate is the period of a rate(...) expression; 0 for cron.
	rate time.Duration
	cron *cronSpec
}

// ParseExpression validates expr as ValidateExpression does and returns it
// parsed. The errors are ValidateExpression's.
func ParseExpression(expr string) (*Expression, error) {
	if err := ValidateExpression(expr); err != nil {
		return nil, err
	}
	x := &Expression{text: expr}
	if strings.HasPrefix(expr, "rate(") {
		m := ratePattern.FindStringSubmatch(expr)
		n, _ := strconv.ParseInt(m[1], 10, 32) // validated
		unit := map[string]time.Duration{"minute": time.Minute, "hour": time.Hour, "day": 24 * time.Hour}[strings.TrimSuffix(m[2], "s")]
		x.rate = time.Duration(n) * unit
		return x, nil
	}
	c, err := parseCron(expr[len("cron(") : len(expr)-1])
	if err != nil {
		return nil, fmt.Errorf("expression %q: %w", expr, err)
	}
	x.cron = c
	return x, nil
}

// String returns the expression's text.
func (x *Expression) String() string { return x.text }

// Next returns the first time after `after` at which the expression fires,
// in UTC and on a whole minute, and false if it never fires again (a cron
// expression whose years are over).
//
// A rate(N unit) expression fires on the multiples of its period counted
// from the Unix epoch (rate(1 day) at 00:00 UTC, rate(6 hours) at 00:00,
// 06:00, ...). EventBridge starts a rate rule's period when the rule is
// created instead; the local host, which fires rules itself, uses the epoch
// so that its ticks do not depend on when it started.
func (x *Expression) Next(after time.Time) (time.Time, bool) {
	after = after.UTC()
	if x.rate > 0 {
		p := int64(x.rate)
		n := after.UnixNano()
		k := n / p
		if n < 0 && n%p != 0 {
			k-- // floor for instants before the epoch
		}
		return time.Unix(0, (k+1)*p).UTC(), true
	}
	return x.cron.next(after.Truncate(time.Minute).Add(time.Minute))
}

// Tick returns the scheduled fire time that a firing at t stands for: t in
// UTC, truncated to the minute. EventBridge rules fire at minute
// granularity and the event's time lies within the minute of its scheduled
// time, so every delivery of one firing has the same tick, and two firings
// never share one. The tick makes the job's unique key (see UniqueKey).
func Tick(t time.Time) time.Time {
	return t.UTC().Truncate(time.Minute)
}

// Minimum and maximum years of a cron expression (EventBridge's bounds).
const (
	minYear = 1970
	maxYear = 2199
)

// cronSpec is a parsed cron expression: the set of values of each field,
// and the special day forms.
type cronSpec struct {
	minutes [60]bool
	hours   [24]bool
	months  [13]bool // 1..12
	years   [maxYear - minYear + 1]bool

	// Day-of-month, used when domAny is false.
	domAny  bool
	dom     [32]bool // 1..31
	domLast bool     // "L"
	domNear int      // "nW": the weekday nearest day n (0: unused)

	// Day-of-week (1 = SUN ... 7 = SAT), used when domAny is true.
	dow     [8]bool
	dowLast int // "dL": the last day d of the month (0: unused)
	dowNthD int // "d#n": the n-th day d of the month (0: unused)
	dowNthN int
}

func parseCron(body string) (*cronSpec, error) {
	fields := strings.Split(body, " ")
	if len(fields) != len(cronFields) {
		return nil, fmt.Errorf("%d fields: want six", len(fields))
	}
	c := &cronSpec{}
	sets := [][]bool{c.minutes[:], c.hours[:], nil, c.months[:], nil, c.years[:]}
	offsets := []int{0, 0, 0, 0, 0, minYear}
	for i, f := range fields {
		if sets[i] == nil {
			continue
		}
		if err := cronFields[i].expand(f, sets[i], offsets[i]); err != nil {
			return nil, fmt.Errorf("%s %q: %w", cronFields[i].name, f, err)
		}
	}
	dom, dow := fields[fieldDayOfMonth], fields[fieldDayOfWeek]
	switch {
	case dom == "?":
		c.domAny = true
	case dom == "L":
		c.domLast = true
	case strings.HasSuffix(dom, "W"):
		n, err := cronFields[fieldDayOfMonth].value(strings.TrimSuffix(dom, "W"))
		if err != nil {
			return nil, fmt.Errorf("day-of-month %q: %w", dom, err)
		}
		c.domNear = n
	default:
		if err := cronFields[fieldDayOfMonth].expand(dom, c.dom[:], 0); err != nil {
			return nil, fmt.Errorf("day-of-month %q: %w", dom, err)
		}
	}
	if !c.domAny {
		return c, nil
	}
	f := cronFields[fieldDayOfWeek]
	switch {
	case dow == "L": // the last day of the week: Saturday
		c.dow[7] = true
	case strings.HasSuffix(dow, "L"):
		d, err := f.value(strings.TrimSuffix(dow, "L"))
		if err != nil {
			return nil, fmt.Errorf("day-of-week %q: %w", dow, err)
		}
		c.dowLast = d
	case strings.Contains(dow, "#"):
		ds, ns, _ := strings.Cut(dow, "#")
		d, err := f.value(ds)
		if err != nil {
			return nil, fmt.Errorf("day-of-week %q: %w", dow, err)
		}
		n, err := strconv.Atoi(ns)
		if err != nil || n < 1 || n > 5 {
			return nil, fmt.Errorf("day-of-week %q: week %q: want 1-5", dow, ns)
		}
		c.dowNthD, c.dowNthN = d, n
	default:
		if err := f.expand(dow, c.dow[:], 0); err != nil {
			return nil, fmt.Errorf("day-of-week %q: %w", dow, err)
		}
	}
	return c, nil
}

// expand marks in set (indexed by value - offset) the values of a field
// text made of list items: "*", "v", "a-b", each optionally "/step" ("v/step"
// runs from v to the field's maximum).
func (f cronField) expand(s string, set []bool, offset int) error {
	for _, it := range strings.Split(s, ",") {
		base, stepText, hasStep := strings.Cut(it, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 {
				return fmt.Errorf("step %q: want a positive whole number", stepText)
			}
			step = n
		}
		lo, hi := f.min, f.max
		if base != "*" {
			a, b, isRange := strings.Cut(base, "-")
			v, err := f.value(a)
			if err != nil {
				return err
			}
			lo = v
			if isRange {
				if hi, err = f.value(b); err != nil {
					return err
				}
			} else if !hasStep {
				hi = v
			}
		}
		if lo > hi {
			return fmt.Errorf("range %q is descending", base)
		}
		for v := lo; v <= hi; v += step {
			set[v-offset] = true
		}
	}
	return nil
}

// daysIn returns the number of days of month m of year y.
func daysIn(y, m int) int {
	return time.Date(y, time.Month(m)+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// weekday returns the day of the week of y-m-d, 1 = Sunday ... 7 = Saturday.
func weekday(y, m, d int) int {
	return int(time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC).Weekday()) + 1
}

// nearestWeekday returns the weekday (Monday to Friday) nearest to day n of
// month m, staying within the month, as Quartz and EventBridge define "nW":
// a Saturday moves to the Friday before (or to Monday the 3rd for the 1st),
// a Sunday to the Monday after (or to the Friday before for the last day).
// It returns 0 when the month has no day n.
func nearestWeekday(y, m, n, last int) int {
	if n > last {
		return 0
	}
	switch weekday(y, m, n) {
	case 7: // Saturday
		if n == 1 {
			return 3
		}
		return n - 1
	case 1: // Sunday
		if n == last {
			return n - 2
		}
		return n + 1
	}
	return n
}

// dayMatches reports whether day d of month m of year y (a month of last
// days) is one the expression fires on.
func (c *cronSpec) dayMatches(y, m, d, last int) bool {
	if !c.domAny {
		switch {
		case c.domLast:
			return d == last
		case c.domNear > 0:
			return d == nearestWeekday(y, m, c.domNear, last)
		}
		return c.dom[d]
	}
	wd := weekday(y, m, d)
	switch {
	case c.dowLast > 0:
		return wd == c.dowLast && d+7 > last
	case c.dowNthD > 0:
		return wd == c.dowNthD && (d-1)/7+1 == c.dowNthN
	}
	return c.dow[wd]
}

// next returns the first fire time at or after t (UTC, on a whole minute).
func (c *cronSpec) next(t time.Time) (time.Time, bool) {
	y, mo, d := t.Year(), int(t.Month()), t.Day()
	h, mi := t.Hour(), t.Minute()
	if y < minYear {
		y, mo, d, h, mi = minYear, 1, 1, 0, 0
	}
	for ; y <= maxYear; y, mo, d, h, mi = y+1, 1, 1, 0, 0 {
		if !c.years[y-minYear] {
			continue
		}
		for ; mo <= 12; mo, d, h, mi = mo+1, 1, 0, 0 {
			if !c.months[mo] {
				continue
			}
			last := daysIn(y, mo)
			for ; d <= last; d, h, mi = d+1, 0, 0 {
				if !c.dayMatches(y, mo, d, last) {
					continue
				}
				for ; h < 24; h, mi = h+1, 0 {
					if !c.hours[h] {
						continue
					}
					for ; mi < 60; mi++ {
						if c.minutes[mi] {
							return time.Date(y, time.Month(mo), d, h, mi, 0, 0, time.UTC), true
						}
					}
				}
			}
		}
	}
	return time.Time{}, false
}
