package restart

import (
	"errors"
	"testing"
	"time"
)

// TestParsersRefuseWithValueError checks the option parsers shared by run's flags and a
// job's meta: each refusal is a *ValueError naming the flag and the value, and reads as the
// command line has always said it.
func TestParsersRefuseWithValueError(t *testing.T) {
	tests := []struct {
		name  string
		parse func() error
		want  string
	}{
		{"batch size", func() error { _, err := ParseBatchSizes("1,0"); return err },
			`invalid -batch-size value "0": it must be greater than zero`},
		{"batch wait without unit", func() error { _, _, err := ParseBatchWait("10"); return err },
			`invalid -batch-wait value "10": give a duration with a unit like 10s or 2m, or "ask"`},
		{"negative batch wait", func() error { _, _, err := ParseBatchWait("-1s"); return err },
			`invalid -batch-wait value "-1s": it must not be negative`},
		{"on-error is case-sensitive", func() error { _, err := ParseOnError("Fail"); return err },
			`invalid -on-error value "Fail": valid options are "ask" and "fail"`},
		{"health", func() error { _, err := ParseHealthMode("healthy"); return err },
			`invalid -health value "healthy": valid options are "auto" (default: checks where the groups define them, else running), "checks", "running" and "none" (Nomad's behaviour)`},
		{"zero healthy deadline", func() error { _, err := ParseHealthyDeadline("0s"); return err },
			`invalid -healthy-deadline value "0s": give a positive duration like 5m`},
		{"negative min healthy time", func() error { _, err := ParseMinHealthyTime("-1s", time.Minute); return err },
			`invalid -min-healthy-time value "-1s": it must not be negative`},
		{"min healthy time at the deadline", func() error { _, err := ParseMinHealthyTime("1m", time.Minute); return err },
			`invalid -min-healthy-time value "1m": it must be shorter than -healthy-deadline (1m0s)`},
		{"surge", func() error { _, err := ParseSurge("0"); return err },
			`invalid -surge value "0": give the number of extra allocations per group, 1 or more`},
		{"max unavailable", func() error { _, err := ParseMaxUnavailable("0"); return err },
			`invalid -max-unavailable value "0": it must be greater than zero (and at most 100%)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.parse()
			var ve *ValueError
			if !errors.As(err, &ve) {
				t.Fatalf("error = %v (%T), want a *ValueError", err, err)
			}
			if err.Error() != tt.want {
				t.Errorf("error = %q\nwant    %q", err, tt.want)
			}
		})
	}
}

func TestParsersAccept(t *testing.T) {
	if d, ask, err := ParseBatchWait("Ask"); err != nil || !ask || d != 0 {
		t.Errorf("ParseBatchWait(Ask) = %s, %v, %v", d, ask, err)
	}
	if d, ask, err := ParseBatchWait("0s"); err != nil || ask || d != 0 {
		t.Errorf("ParseBatchWait(0s) = %s, %v, %v", d, ask, err)
	}
	if h, err := ParseHealthMode(" NONE "); err != nil || h != HealthNone {
		t.Errorf("ParseHealthMode(NONE) = %q, %v", h, err)
	}
	if o, err := ParseOnError("ask"); err != nil || o != OnErrorAsk {
		t.Errorf("ParseOnError(ask) = %q, %v", o, err)
	}
	if d, err := ParseMinHealthyTime("0", time.Minute); err != nil || d != 0 {
		t.Errorf("ParseMinHealthyTime(0) = %s, %v", d, err)
	}
	if n, err := ParseSurge(" 3 "); err != nil || n != 3 {
		t.Errorf("ParseSurge(3) = %d, %v", n, err)
	}
}
