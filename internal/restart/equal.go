package restart

import (
	"maps"
	"slices"
	"time"
)

// Same reports whether p and o hold the same progress, field by field (times by instant).
// The Nomad store compares a range of allocations with the range it wrote last to skip
// encoding it again; a field added to AllocProgress must be added here too (a test
// counts the fields).
func (p *AllocProgress) Same(o *AllocProgress) bool {
	return p.ID == o.ID && p.Name == o.Name && p.Group == o.Group && p.NodeID == o.NodeID &&
		p.Batch == o.Batch && p.State == o.State && slices.Equal(p.Tasks, o.Tasks) &&
		p.Before.Same(o.Before) && p.Replacement == o.Replacement &&
		p.StartTime.Equal(o.StartTime) && p.EndTime.Equal(o.EndTime) && p.Error == o.Error &&
		p.Waiting == o.Waiting && p.Unrecovered == o.Unrecovered && p.Attempts == o.Attempts &&
		p.StopIndex == o.StopIndex && sameTimePtr(p.LastSeen, o.LastSeen)
}

// Same reports whether two observations (either may be nil) hold the same facts.
func (b *Observation) Same(o *Observation) bool {
	if b == o {
		return true
	}
	if b == nil || o == nil {
		return false
	}
	return b.AllocModifyIndex == o.AllocModifyIndex && b.LastEventTime.Equal(o.LastEventTime) &&
		maps.Equal(b.Restarts, o.Restarts) && maps.Equal(b.States, o.States)
}

func sameTimePtr(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}
