package schedule

import "testing"

func TestValidateExpressionAccepts(t *testing.T) {
	for _, expr := range []string{
		"rate(1 minute)",
		"rate(5 minutes)",
		"rate(1 hour)",
		"rate(12 hours)",
		"rate(1 day)",
		"rate(7 days)",
		"cron(0 3 * * ? *)",
		"cron(0 10 * * ? *)",
		"cron(15 12 * * ? *)",
		"cron(0 18 ? * MON-FRI *)",
		"cron(0 8 1 * ? *)",
		"cron(0/15 * * * ? *)",
		"cron(*/10 * ? * MON-FRI *)",
		"cron(0/5 8-17 ? * MON-FRI *)",
		"cron(0 9 ? * 2#1 *)",
		"cron(0 9 ? * MON#1 *)",
		"cron(0 0 L * ? *)",
		"cron(0 0 15W * ? *)",
		"cron(0 0 ? * L *)",
		"cron(0 0 ? * 6L *)",
		"cron(0 0 ? * FRIL *)",
		"cron(0 0 1 JAN,JUL ? *)",
		"cron(0 0 1 jan-jun ? 2030-2035)",
		"cron(0 0 ? * WED,SAT *)",
		"cron(0,30 0-23/2 1-15 */3 ? 2025/2)",
		"cron(59 23 31 12 ? 2199)",
	} {
		if err := ValidateExpression(expr); err != nil {
			t.Errorf("ValidateExpression(%q) = %v, want nil", expr, err)
		}
	}
}

func TestValidateExpressionRejects(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"", `expression: missing (want rate(...) or cron(...))`},
		{"every 5 minutes", `expression "every 5 minutes": want rate(...) or cron(...)`},
		{"at(2030-01-01T00:00:00)", `expression "at(2030-01-01T00:00:00)": one-time at(...) schedules are not supported by EventBridge rules; want rate(...) or cron(...)`},
		{"rate(5 minutes", `expression "rate(5 minutes": want "rate(N unit)" with one space, e.g. "rate(5 minutes)"`},
		{"rate(5  minutes)", `expression "rate(5  minutes)": want "rate(N unit)" with one space, e.g. "rate(5 minutes)"`},
		{"rate(-5 minutes)", `expression "rate(-5 minutes)": want "rate(N unit)" with one space, e.g. "rate(5 minutes)"`},
		{"rate(0 minutes)", `expression "rate(0 minutes)": rate value "0": want a positive whole number without leading zeros`},
		{"rate(05 minutes)", `expression "rate(05 minutes)": rate value "05": want a positive whole number without leading zeros`},
		{"rate(99999999999 days)", `expression "rate(99999999999 days)": rate value "99999999999": too large`},
		{"rate(1 minutes)", `expression "rate(1 minutes)": rate unit "minutes": a value of 1 takes the singular "minute"`},
		{"rate(5 hour)", `expression "rate(5 hour)": rate unit "hour": a value above 1 takes the plural "hours"`},
		{"rate(2 weeks)", `expression "rate(2 weeks)": rate unit "weeks": want minute(s), hour(s) or day(s)`},
		{"rate(30 seconds)", `expression "rate(30 seconds)": rate unit "seconds": want minute(s), hour(s) or day(s)`},
		{"cron(0 3 * * ? *", `expression "cron(0 3 * * ? *": want "cron(fields)" ending in ")"`},
		{"cron(0 3 * * ?)", `expression "cron(0 3 * * ?)": 5 fields: want six (minutes hours day-of-month month day-of-week year)`},
		{"cron(0 3 * * * ? *)", `expression "cron(0 3 * * * ? *)": 7 fields: want six (minutes hours day-of-month month day-of-week year)`},
		{"cron(0  3 * * ? *)", `expression "cron(0  3 * * ? *)": want six fields separated by single spaces`},
		{"cron(0 3 * * * *)", `expression "cron(0 3 * * * *)": day-of-month "*" and day-of-week "*": exactly one of them must be "?"`},
		{"cron(0 3 ? * ? *)", `expression "cron(0 3 ? * ? *)": day-of-month "?" and day-of-week "?": exactly one of them must be "?"`},
		{"cron(0 3 1 * MON *)", `expression "cron(0 3 1 * MON *)": day-of-month "1" and day-of-week "MON": exactly one of them must be "?"`},
		{"cron(60 3 * * ? *)", `expression "cron(60 3 * * ? *)": minutes "60": value "60": out of range 0-59`},
		{"cron(0 24 * * ? *)", `expression "cron(0 24 * * ? *)": hours "24": value "24": out of range 0-23`},
		{"cron(0 3 0 * ? *)", `expression "cron(0 3 0 * ? *)": day-of-month "0": value "0": out of range 1-31`},
		{"cron(0 3 * 13 ? *)", `expression "cron(0 3 * 13 ? *)": month "13": value "13": out of range 1-12`},
		{"cron(0 3 * FOO ? *)", `expression "cron(0 3 * FOO ? *)": month "FOO": value "FOO": want 1-12 or JAN-DEC`},
		{"cron(0 3 ? * 8 *)", `expression "cron(0 3 ? * 8 *)": day-of-week "8": value "8": out of range 1-7`},
		{"cron(0 3 ? * 0 *)", `expression "cron(0 3 ? * 0 *)": day-of-week "0": value "0": out of range 1-7`},
		{"cron(0 3 * * ? 1969)", `expression "cron(0 3 * * ? 1969)": year "1969": value "1969": out of range 1970-2199`},
		{"cron(0 ? * * ? *)", `expression "cron(0 ? * * ? *)": hours "?": "?" is allowed only in day-of-month and day-of-week`},
		{"cron(0 3 ? * */2 *)", `expression "cron(0 3 ? * */2 *)": day-of-week "*/2": "/" is not allowed in day-of-week`},
		{"cron(0/0 3 * * ? *)", `expression "cron(0/0 3 * * ? *)": minutes "0/0": step "0": want a whole number from 1 to 60`},
		{"cron(0/61 3 * * ? *)", `expression "cron(0/61 3 * * ? *)": minutes "0/61": step "61": want a whole number from 1 to 60`},
		{"cron(0/x 3 * * ? *)", `expression "cron(0/x 3 * * ? *)": minutes "0/x": step "x": want a whole number from 1 to 60`},
		{"cron(0 3 * * ? 2030-2025)", `expression "cron(0 3 * * ? 2030-2025)": year "2030-2025": range "2030-2025" is descending`},
		{"cron(0 3 ? * FRI-MON *)", `expression "cron(0 3 ? * FRI-MON *)": day-of-week "FRI-MON": range "FRI-MON" is descending`},
		{"cron(0 3- * * ? *)", `expression "cron(0 3- * * ? *)": hours "3-": missing value`},
		{"cron(0,,5 3 * * ? *)", `expression "cron(0,,5 3 * * ? *)": minutes "0,,5": empty list item`},
		{"cron(*,5 3 * * ? *)", `expression "cron(*,5 3 * * ? *)": minutes "*,5": "*" must stand alone, not in a list`},
		{"cron(0,75 3 * * ? *)", `expression "cron(0,75 3 * * ? *)": minutes "0,75": "75": value "75": out of range 0-59`},
		{"cron(L 3 * * ? *)", `expression "cron(L 3 * * ? *)": minutes "L": value "L": want 0-59`},
		{"cron(0 3 LW * ? *)", `expression "cron(0 3 LW * ? *)": day-of-month "LW": want "L" (last day) or "nW" (weekday nearest day n), alone in the field`},
		{"cron(0 3 1,L * ? *)", `expression "cron(0 3 1,L * ? *)": day-of-month "1,L": want "L" (last day) or "nW" (weekday nearest day n), alone in the field`},
		{"cron(0 3 32W * ? *)", `expression "cron(0 3 32W * ? *)": day-of-month "32W": value "32": out of range 1-31`},
		{"cron(0 3 ? * 3#6 *)", `expression "cron(0 3 ? * 3#6 *)": day-of-week "3#6": "3#6": the week of the month after "#" must be 1-5`},
		{"cron(0 3 ? * 3#1,6#3 *)", `expression "cron(0 3 ? * 3#1,6#3 *)": day-of-week "3#1,6#3": want "L" (last day of the week), "dL" (last day d of the month) or "d#n" (n-th day d of the month), alone in the field`},
		{"cron(0 3 ? * 9L *)", `expression "cron(0 3 ? * 9L *)": day-of-week "9L": value "9": out of range 1-7`},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			err := ValidateExpression(tc.expr)
			if err == nil {
				t.Fatalf("ValidateExpression(%q) = nil, want %q", tc.expr, tc.want)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("ValidateExpression(%q)\n got: %s\nwant: %s", tc.expr, got, tc.want)
			}
		})
	}
}
