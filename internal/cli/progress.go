package cli

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// fleetProgress is the progress line of a fleet followed on a terminal: its jobs by
// status, the time since it started, and what is left at the pace of the jobs ended so
// far. A drive here takes the counts from the fleet's events (fleetrun.Event.Counts), a
// viewer from the records it reads.
type fleetProgress struct {
	mu     sync.Mutex
	total  int
	counts map[fleet.JobStatus]int
	start  time.Time
}

func newFleetProgress(rec *fleet.Record) *fleetProgress {
	fp := &fleetProgress{}
	fp.set(rec)
	return fp
}

// take updates the counts from an event of the fleet, and reports whether it carried any.
func (fp *fleetProgress) take(e fleetrun.Event) bool {
	if e.JobID != "" || e.Counts == nil {
		return false
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.counts = e.Counts
	if fp.start.IsZero() && e.Type == restart.EventStarted {
		fp.start = e.Time
	}
	return true
}

// set takes the counts of the fleet as stored.
func (fp *fleetProgress) set(rec *fleet.Record) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	fp.total, fp.counts = len(rec.Jobs), rec.Counts()
	if fp.start.IsZero() {
		fp.start = rec.StartTime
	}
}

// line renders the progress line, e.g.
// "jobs 118/500 done, 20 running, 1 failed, 361 pending  elapsed 2m10s  ~7m0s left".
func (fp *fleetProgress) line(now time.Time) string {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	var b strings.Builder
	b.WriteString("jobs " + jobCounts(fp.counts, fp.total))
	pending := fp.counts[fleet.JobPending]
	if pending > 0 {
		fmt.Fprintf(&b, ", %d pending", pending)
	}
	if fp.start.IsZero() {
		return b.String()
	}
	elapsed := now.Sub(fp.start)
	fmt.Fprintf(&b, "  elapsed %s", roundDuration(elapsed))
	if ended := fp.total - pending - fp.counts[fleet.JobRunning]; ended > 0 && ended < fp.total {
		left := time.Duration(float64(elapsed) * float64(fp.total-ended) / float64(ended))
		fmt.Fprintf(&b, "  ~%s left", roundDuration(left))
	}
	return b.String()
}
