package cli

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
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
	fmt.Fprintf(&b, "  elapsed %s", output.RoundDuration(elapsed))
	if ended := fp.total - pending - fp.counts[fleet.JobRunning]; ended > 0 && ended < fp.total {
		left := time.Duration(float64(elapsed) * float64(fp.total-ended) / float64(ended))
		fmt.Fprintf(&b, "  ~%s left", output.RoundDuration(left))
	}
	return b.String()
}

// tracker follows a restart's progress from its record and events, for the progress line.
type tracker struct {
	total, batches, batch int
	states                map[string]restart.AllocState
	done, failed, skipped int // allocations in each ended state (setState)
	start                 time.Time
	batchStart            time.Time
	finished              []time.Duration // durations of finished batches
	// waiting is what each allocation in flight waits for, from its latest health event.
	waiting map[string]string
}

func newTracker(rec *restart.Record) *tracker {
	t := &tracker{states: map[string]restart.AllocState{}, waiting: map[string]string{}}
	if rec == nil {
		return t
	}
	t.total = len(rec.Allocs)
	t.batches = rec.Batches
	t.batch = rec.CurrentBatch
	t.start = rec.StartTime
	for _, a := range rec.Allocs {
		t.setState(a.ID, a.State)
		if !a.State.Terminal() && a.Waiting != "" && a.State != restart.AllocPending {
			t.waiting[a.ID] = a.Waiting
		}
	}
	return t
}

// apply updates the tracker with one event.
func (t *tracker) apply(ev restart.Event) {
	switch ev.Type {
	case restart.EventStarted:
		if t.start.IsZero() {
			t.start = ev.Time
		}
	case restart.EventBatchStarted:
		if ev.Batch > 0 {
			t.batch = ev.Batch
		}
		t.batchStart = ev.Time
		if t.start.IsZero() {
			t.start = ev.Time
		}
	case restart.EventBatchFinished:
		if !t.batchStart.IsZero() {
			t.finished = append(t.finished, ev.Time.Sub(t.batchStart))
			t.batchStart = time.Time{}
		}
	case restart.EventAllocHealth:
		if _, what, ok := strings.Cut(ev.Message, "waits for: "); ok {
			t.waiting[ev.AllocID] = what
		}
	case restart.EventAllocDone:
		t.setState(ev.AllocID, restart.AllocDone)
	case restart.EventAllocFailed:
		t.setState(ev.AllocID, restart.AllocFailed)
	case restart.EventAllocSkipped:
		t.setState(ev.AllocID, restart.AllocSkipped)
	}
	switch ev.Type {
	case restart.EventAllocDone, restart.EventAllocFailed, restart.EventAllocSkipped, restart.EventAllocRestart:
		delete(t.waiting, ev.AllocID)
	}
}

// setState records an allocation's state and keeps the counts of ended ones, so that the
// progress line costs the same whatever the job's size.
func (t *tracker) setState(id string, s restart.AllocState) {
	t.count(t.states[id], -1)
	t.states[id] = s
	t.count(s, 1)
}

func (t *tracker) count(s restart.AllocState, delta int) {
	switch s {
	case restart.AllocDone:
		t.done += delta
	case restart.AllocFailed:
		t.failed += delta
	case restart.AllocSkipped:
		t.skipped += delta
	}
}

// counts returns the allocations done (restarted), failed and skipped.
func (t *tracker) counts() (done, failed, skipped int) {
	return t.done, t.failed, t.skipped
}

// line renders the progress line: batches, allocations, failures, elapsed and an estimate
// from the mean duration of the finished batches.
func (t *tracker) line(now time.Time) string {
	done, failed, skipped := t.counts()
	var b strings.Builder
	fmt.Fprintf(&b, "batch %d/%d  allocations %d/%d done", t.batch, t.batches, done, t.total)
	if failed > 0 {
		fmt.Fprintf(&b, ", %d failed", failed)
	}
	if skipped > 0 {
		fmt.Fprintf(&b, ", %d skipped", skipped)
	}
	if !t.start.IsZero() {
		fmt.Fprintf(&b, "  elapsed %s", output.RoundDuration(now.Sub(t.start)))
	}
	if est, ok := t.estimate(now); ok && est > 0 {
		fmt.Fprintf(&b, "  ~%s left", output.RoundDuration(est))
	}
	// What the restart waits for: the first thing an operator asks when it stalls.
	if len(t.waiting) > 0 {
		ids := make([]string, 0, len(t.waiting))
		for id := range t.waiting {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		fmt.Fprintf(&b, "  waiting: %s %s", output.ShortID(ids[0], false), t.waiting[ids[0]])
		if len(ids) > 1 {
			fmt.Fprintf(&b, " (+%d more)", len(ids)-1)
		}
	}
	return b.String()
}

// estimate guesses the time left from the mean batch duration.
func (t *tracker) estimate(now time.Time) (time.Duration, bool) {
	if len(t.finished) == 0 || t.batches == 0 {
		return 0, false
	}
	var sum time.Duration
	for _, d := range t.finished {
		sum += d
	}
	mean := sum / time.Duration(len(t.finished))
	remaining := t.batches - len(t.finished)
	if remaining <= 0 {
		return 0, false
	}
	left := mean * time.Duration(remaining)
	if !t.batchStart.IsZero() {
		left -= now.Sub(t.batchStart)
	}
	if left < 0 {
		left = 0
	}
	return left, true
}
