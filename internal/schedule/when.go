package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/cronexpr"
)

// ParseAt reads -at: an RFC 3339 time ("2026-12-01T02:00:00Z"), a date and time
// ("2026-12-01 02:00", seconds optional) or a time of day ("02:00": the next one, today or
// tomorrow) in loc. A time not after now is refused: it would be missed at once.
func ParseAt(s string, now time.Time, loc *time.Location) (time.Time, error) {
	s = strings.TrimSpace(s)
	if loc == nil {
		loc = time.Local
	}
	var t time.Time
	if v, err := time.Parse(time.RFC3339, s); err == nil {
		t = v
	} else if v, ok := parseLocal(s, loc); ok {
		t = v
	} else if v, ok := parseTimeOfDay(s, now, loc); ok {
		t = v
	} else {
		return time.Time{}, fmt.Errorf("invalid -at value %q: give an RFC 3339 time like 2026-12-01T02:00:00Z, a local date and time like \"2026-12-01 02:00\", or a time of day like 02:00", s)
	}
	if !t.After(now) {
		return time.Time{}, fmt.Errorf("invalid -at value %q: %s is in the past; give a future time", s, t.Format(time.RFC3339))
	}
	return t, nil
}

func parseLocal(s string, loc *time.Location) (time.Time, bool) {
	for _, layout := range []string{"2006-01-02 15:04", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, loc); err == nil {
			return t, true
		}
	}
	return time.Time{}, false
}

func parseTimeOfDay(s string, now time.Time, loc *time.Location) (time.Time, bool) {
	for _, layout := range []string{"15:04", "15:04:05"} {
		clock, err := time.Parse(layout, s)
		if err != nil {
			continue
		}
		today := now.In(loc)
		t := time.Date(today.Year(), today.Month(), today.Day(), clock.Hour(), clock.Minute(), clock.Second(), 0, loc)
		if !t.After(now) {
			t = time.Date(today.Year(), today.Month(), today.Day()+1, clock.Hour(), clock.Minute(), clock.Second(), 0, loc)
		}
		return t, true
	}
	return time.Time{}, false
}

// LoadZone reads -time-zone: an IANA name ("Europe/Berlin"), "" or "UTC" for UTC, or
// "Local", as Nomad's periodic time_zone.
func LoadZone(name string) (*time.Location, error) {
	if strings.TrimSpace(name) == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("invalid -time-zone value %q: give an IANA time zone name like UTC, Europe/Berlin or America/New_York", name)
	}
	return loc, nil
}

// Cron is a parsed -every expression in its zone.
type Cron struct {
	expr *cronexpr.Expression
	loc  *time.Location
}

// ParseCron parses a cron expression the way Nomad's periodic block does (the same
// library: 5 fields, or 6 and 7 with seconds and years, and the @daily-style aliases),
// evaluated in zone (see LoadZone). An expression that never fires again is refused.
func ParseCron(spec, zone string, now time.Time) (*Cron, error) {
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, err
	}
	expr, err := parseExpr(spec)
	if err != nil {
		return nil, fmt.Errorf("invalid -every value %q: %v; give a cron expression like \"0 2 * * *\" (02:00 every day) or @daily", spec, err)
	}
	c := &Cron{expr: expr, loc: loc}
	if next, err := c.Next(now); err != nil || next.IsZero() {
		return nil, fmt.Errorf("invalid -every value %q: it names no time after now; check the expression's year and day fields", spec)
	}
	return c, nil
}

// parseExpr parses with the library, turning its panics (it has some on odd input, which
// Nomad guards against the same way) into errors.
func parseExpr(spec string) (expr *cronexpr.Expression, err error) {
	defer func() {
		if recover() != nil {
			expr, err = nil, errors.New("the expression could not be parsed")
		}
	}()
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("it is empty")
	}
	return cronexpr.Parse(spec)
}

// Next is the first time the expression names strictly after t, in the cron's zone (as
// Nomad's periodic dispatcher computes it: from t in the zone). Zero when there is none.
func (c *Cron) Next(t time.Time) (next time.Time, err error) {
	defer func() {
		if recover() != nil {
			next, err = time.Time{}, errors.New("the cron expression could not be evaluated")
		}
	}()
	return c.expr.Next(t.In(c.loc)), nil
}

// cron parses the schedule's own expression.
func (s *Schedule) cron() (*Cron, error) {
	loc, err := LoadZone(s.TimeZone)
	if err != nil {
		return nil, err
	}
	expr, err := parseExpr(s.Cron)
	if err != nil {
		return nil, fmt.Errorf("schedule %s: cron expression %q: %w", s.ID, s.Cron, err)
	}
	return &Cron{expr: expr, loc: loc}, nil
}
