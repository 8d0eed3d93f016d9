package agent

import (
	"testing"
	"time"
)

// realWait turns a wait on the agent's clock into a real wait: unchanged for a real clock,
// divided by the rate for a clock that runs faster, and capped by the time run so far while
// the rate is not known yet.
func TestClockRateRealWait(t *testing.T) {
	realStart := time.Now().Add(-2 * time.Second)
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		elapsed   time.Duration // of the clock, over the 2 real seconds
		realStart time.Time
		in, want  time.Duration
		tolerance time.Duration
	}{
		{"real clock", 2 * time.Second, realStart, time.Minute, time.Minute, 100 * time.Millisecond},
		{"50 times faster", 100 * time.Second, realStart, 50 * time.Second, time.Second, 100 * time.Millisecond},
		{"due already", 2 * time.Second, realStart, -time.Second, 0, 0},
		{"just started: capped", 0, time.Now(), time.Hour, 10 * time.Millisecond, 10 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			now := func() time.Time { return base.Add(tc.elapsed) }
			r := clockRate{now: now, realStart: tc.realStart, clockZero: base}
			got := r.realWait(tc.in)
			if d := got - tc.want; d > tc.tolerance || d < -tc.tolerance {
				t.Fatalf("realWait(%v) = %v, want %v ± %v", tc.in, got, tc.want, tc.tolerance)
			}
		})
	}
}
