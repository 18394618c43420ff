package schedule

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// ratePattern is EventBridge's rate expression: a positive whole number
// without a leading zero, one space, and a unit.
var ratePattern = regexp.MustCompile(`^rate\(([0-9]+) ([a-z]+)\)$`)

// ValidateExpression reports whether expr is a schedule expression that an
// EventBridge rule accepts:
//
//   - rate(N unit): N a positive whole number; unit minute, hour or day,
//     singular when N is 1 and plural otherwise ("rate(1 hour)", "rate(5
//     minutes)");
//   - cron(Minutes Hours Day-of-month Month Day-of-week Year): six fields
//     separated by spaces, with the values and wildcards of EventBridge's
//     cron reference (, - * / in every field but Day-of-week; ? L W in
//     Day-of-month; ? L # in Day-of-week; JAN-DEC and SUN-SAT names, any
//     case), and exactly one of Day-of-month and Day-of-week set to "?".
//
// It is stricter than EventBridge in one respect: descending ranges such as
// "FRI-MON" are refused, since their meaning is easy to misread. The error
// names the expression and the offending part.
func ValidateExpression(expr string) error {
	var err error
	switch {
	case expr == "":
		return fmt.Errorf("expression: missing (want rate(...) or cron(...))")
	case strings.HasPrefix(expr, "rate("):
		err = validateRate(expr)
	case strings.HasPrefix(expr, "cron("):
		err = validateCron(expr)
	case strings.HasPrefix(expr, "at("):
		err = fmt.Errorf("one-time at(...) schedules are not supported by EventBridge rules; want rate(...) or cron(...)")
	default:
		err = fmt.Errorf("want rate(...) or cron(...)")
	}
	if err != nil {
		return fmt.Errorf("expression %q: %w", expr, err)
	}
	return nil
}

func validateRate(expr string) error {
	m := ratePattern.FindStringSubmatch(expr)
	if m == nil {
		return fmt.Errorf(`want "rate(N unit)" with one space, e.g. "rate(5 minutes)"`)
	}
	num, unit := m[1], m[2]
	if num[0] == '0' {
		return fmt.Errorf("rate value %q: want a positive whole number without leading zeros", num)
	}
	n, err := strconv.ParseInt(num, 10, 32)
	if err != nil {
		return fmt.Errorf("rate value %q: too large", num)
	}
	singular := strings.TrimSuffix(unit, "s")
	switch singular {
	case "minute", "hour", "day":
	default:
		return fmt.Errorf("rate unit %q: want minute(s), hour(s) or day(s)", unit)
	}
	switch {
	case n == 1 && unit != singular:
		return fmt.Errorf("rate unit %q: a value of 1 takes the singular %q", unit, singular)
	case n > 1 && unit == singular:
		return fmt.Errorf("rate unit %q: a value above 1 takes the plural %q", unit, singular+"s")
	}
	return nil
}

// cronField describes one field of a cron expression.
type cronField struct {
	name     string
	min, max int
	names    []string // names of min, min+1, ... (months, week days)
	step     bool     // "/" allowed
}

var cronFields = [6]cronField{
	{name: "minutes", min: 0, max: 59, step: true},
	{name: "hours", min: 0, max: 23, step: true},
	{name: "day-of-month", min: 1, max: 31, step: true},
	{name: "month", min: 1, max: 12, step: true,
		names: []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}},
	{name: "day-of-week", min: 1, max: 7,
		names: []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}},
	{name: "year", min: 1970, max: 2199, step: true},
}

const (
	fieldDayOfMonth = 2
	fieldDayOfWeek  = 4
)

func validateCron(expr string) error {
	if !strings.HasSuffix(expr, ")") {
		return fmt.Errorf(`want "cron(fields)" ending in ")"`)
	}
	body := expr[len("cron(") : len(expr)-1]
	fields := strings.Split(body, " ")
	for _, f := range fields {
		if f == "" {
			return fmt.Errorf("want six fields separated by single spaces")
		}
	}
	if len(fields) != len(cronFields) {
		return fmt.Errorf("%d fields: want six (minutes hours day-of-month month day-of-week year)", len(fields))
	}
	for i, f := range fields {
		if err := cronFields[i].validate(f); err != nil {
			return fmt.Errorf("%s %q: %w", cronFields[i].name, f, err)
		}
	}
	dom, dow := fields[fieldDayOfMonth], fields[fieldDayOfWeek]
	if (dom == "?") == (dow == "?") {
		return fmt.Errorf(`day-of-month %q and day-of-week %q: exactly one of them must be "?"`, dom, dow)
	}
	return nil
}

// validate checks one field's text.
func (f cronField) validate(s string) error {
	switch {
	case s == "?":
		if f.name != "day-of-month" && f.name != "day-of-week" {
			return fmt.Errorf(`"?" is allowed only in day-of-month and day-of-week`)
		}
		return nil
	case f.name == "day-of-month" && strings.ContainsAny(s, "LW"),
		f.name == "day-of-week" && (s == "L" || strings.HasSuffix(s, "L") || strings.Contains(s, "#")):
		return f.validateSpecial(s)
	}
	items := strings.Split(s, ",")
	for _, it := range items {
		if it == "" {
			return fmt.Errorf("empty list item")
		}
		if it == "*" && len(items) > 1 {
			return fmt.Errorf(`"*" must stand alone, not in a list`)
		}
		if err := f.validateItem(it); err != nil {
			if len(items) > 1 {
				return fmt.Errorf("%q: %w", it, err)
			}
			return err
		}
	}
	return nil
}

// validateItem checks one list item: "*", a value, a range "a-b", or any of
// those (but a bare value) followed by "/step" where steps are allowed;
// "a/step" starts at a.
func (f cronField) validateItem(it string) error {
	base, step, hasStep := strings.Cut(it, "/")
	if hasStep {
		if !f.step {
			return fmt.Errorf(`"/" is not allowed in %s`, f.name)
		}
		n, err := strconv.Atoi(step)
		span := f.max - f.min + 1
		if err != nil || step[0] == '+' || n < 1 || n > span {
			return fmt.Errorf("step %q: want a whole number from 1 to %d", step, span)
		}
	}
	if base == "*" {
		return nil
	}
	lo, hi, isRange := strings.Cut(base, "-")
	a, err := f.value(lo)
	if err != nil {
		return err
	}
	if !isRange {
		return nil
	}
	b, err := f.value(hi)
	if err != nil {
		return err
	}
	if a > b {
		return fmt.Errorf("range %q is descending", base)
	}
	return nil
}

// value parses a number or a name of the field.
func (f cronField) value(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("missing value")
	}
	for i, n := range f.names {
		if strings.EqualFold(s, n) {
			return f.min + i, nil
		}
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			if len(f.names) > 0 {
				return 0, fmt.Errorf("value %q: want %d-%d or %s-%s", s, f.min, f.max, f.names[0], f.names[len(f.names)-1])
			}
			return 0, fmt.Errorf("value %q: want %d-%d", s, f.min, f.max)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < f.min || n > f.max {
		return 0, fmt.Errorf("value %q: out of range %d-%d", s, f.min, f.max)
	}
	return n, nil
}

// validateSpecial checks the forms with L, W and #, which stand alone in
// their field: "L" and "nW" in day-of-month; "L", "dL" and "d#n" in
// day-of-week. Elsewhere those letters are plain invalid values (the names
// JUL and WED contain them and are parsed as names).
func (f cronField) validateSpecial(s string) error {
	switch f.name {
	case "day-of-month":
		if s == "L" {
			return nil
		}
		if n, ok := strings.CutSuffix(s, "W"); ok && !strings.ContainsAny(n, "LW#,-/*") {
			_, err := f.value(n)
			return err
		}
		return fmt.Errorf(`want "L" (last day) or "nW" (weekday nearest day n), alone in the field`)
	case "day-of-week":
		if s == "L" {
			return nil
		}
		if d, ok := strings.CutSuffix(s, "L"); ok && !strings.ContainsAny(d, "L#,-/*") {
			_, err := f.value(d)
			return err
		}
		if d, nth, ok := strings.Cut(s, "#"); ok && !strings.ContainsAny(d+nth, "L#,-/*") {
			if _, err := f.value(d); err != nil {
				return err
			}
			if len(nth) != 1 || nth[0] < '1' || nth[0] > '5' {
				return fmt.Errorf("%q: the week of the month after \"#\" must be 1-5", s)
			}
			return nil
		}
		return fmt.Errorf(`want "L" (last day of the week), "dL" (last day d of the month) or "d#n" (n-th day d of the month), alone in the field`)
	}
	return fmt.Errorf(`"L", "W" and "#" are allowed only in day-of-month and day-of-week`)
}
