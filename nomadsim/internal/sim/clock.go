package sim

import (
	"time"
)

// clock is the simulated clock: simulated time runs TimeScale times faster than real time,
// starting at the real time the cluster started. Every duration the simulation waits
// (kill timeouts, start delays, health times) is simulated and so runs scaled.
type clock struct {
	realStart time.Time
	simStart  time.Time
	scale     float64
}

func newClock(scale float64) clock {
	now := time.Now()
	return clock{realStart: now, simStart: now.UTC(), scale: scale}
}

// Now is the current simulated time.
func (k clock) Now() time.Time {
	elapsed := time.Since(k.realStart)
	return k.simStart.Add(time.Duration(float64(elapsed) * k.scale))
}

// Real converts a simulated duration to the real duration it takes.
func (k clock) Real(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(float64(d) / k.scale)
}
