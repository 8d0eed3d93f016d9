package health

import (
	"sync"
	"time"
)

// Clock reads Nomad's current time, or the best estimate of it. The gate measures
// min_healthy_time and healthy_deadline on it, against Nomad's own timestamps.
type Clock func() time.Time

// OffsetClock estimates Nomad's clock as the local clock plus the largest offset seen
// between a Nomad timestamp and the local moment it was read: an event Nomad stamped is
// already in Nomad's past when it arrives, so the estimate stays at or behind Nomad's
// clock, and the gate errs towards waiting longer, never towards declaring health early.
// It assumes Nomad's clock runs at the local clock's rate (not true of a time-scaled
// simulation: give the gate the simulation's clock there).
type OffsetClock struct {
	local func() time.Time

	mu     sync.Mutex
	offset time.Duration
	set    bool
}

// NewOffsetClock returns an estimate anchored on local (time.Now when nil); until a Nomad
// timestamp is observed it reads the local clock.
func NewOffsetClock(local func() time.Time) *OffsetClock {
	if local == nil {
		local = time.Now
	}
	return &OffsetClock{local: local}
}

// Observe takes a timestamp Nomad just reported (a task event, an allocation's modify
// time, a check result's time). Feed it every timestamp the gate is given (task start
// times above all), so that snapshots stamped with Now never read as older than them.
func (c *OffsetClock) Observe(nomad time.Time) {
	if nomad.IsZero() {
		return
	}
	off := nomad.Sub(c.local())
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.set || off > c.offset {
		c.offset, c.set = off, true
	}
}

// Now is the estimate of Nomad's current time.
func (c *OffsetClock) Now() time.Time {
	c.mu.Lock()
	off := c.offset
	c.mu.Unlock()
	return c.local().Add(off)
}
