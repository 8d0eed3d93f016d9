package output

import (
	"fmt"
	"strings"
	"time"
)

// FormatTime is Nomad's CLI timestamp (command/helpers.go formatTime).
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// ShortID is an ID as Nomad prints it: 8 characters unless verbose.
func ShortID(id string, verbose bool) string {
	if verbose || len(id) <= 8 {
		return id
	}
	return id[:8]
}

// OneLine joins a multi-line error into one line, so that every failure is one line.
func OneLine(s string) string {
	fields := strings.Split(strings.TrimSpace(s), "\n")
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	return strings.Join(fields, " ")
}

// Plural is n with its noun, one or many: "1 allocation", "3 allocations".
func Plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// oneLineError is an error as one line that still unwraps to it, so that what it carries is
// found (the command line finds upstream's line in it).
type oneLineError struct{ err error }

func (e oneLineError) Error() string { return OneLine(e.err.Error()) }
func (e oneLineError) Unwrap() error { return e.err }

// Flat is err as one line (oneLineError).
func Flat(err error) error { return oneLineError{err} }

// RoundDuration rounds d as the progress lines and tables show it: tenths of a second
// under 10s, whole seconds above; never negative.
func RoundDuration(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// OrDash is s, or "-" for an empty table cell.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
