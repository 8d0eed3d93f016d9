package restart

import (
	"fmt"
	"strings"
	"time"
)

// Progress summarises a restart for humans: the live progress line and `status`.
type Progress struct {
	Total, Done, Failed, Skipped, InFlight int
	Batch, Batches                         int
	Elapsed                                time.Duration
	// Estimate is the expected time left: the mean time of the finished batches times the
	// batches left, plus the batch waits between them. Zero when unknown.
	Estimate time.Duration
}

// Progress computes the summary at local time now (the record's times are local too).
func (r *Record) Progress(now time.Time) Progress {
	p := Progress{Total: len(r.Allocs), Batch: r.CurrentBatch, Batches: r.Batches}
	type span struct {
		start, end time.Time
		open       bool
	}
	spans := map[int]*span{}
	for _, a := range r.Allocs {
		switch a.State {
		case AllocDone:
			p.Done++
		case AllocFailed:
			p.Failed++
		case AllocSkipped:
			p.Skipped++
		case AllocRestarting, AllocWaiting:
			p.InFlight++
		}
		s := spans[a.Batch]
		if s == nil {
			s = &span{}
			spans[a.Batch] = s
		}
		if !a.State.Terminal() {
			s.open = true
		}
		if !a.StartTime.IsZero() && (s.start.IsZero() || a.StartTime.Before(s.start)) {
			s.start = a.StartTime
		}
		if a.EndTime.After(s.end) {
			s.end = a.EndTime
		}
	}
	if !r.StartTime.IsZero() {
		end := now
		if r.Status.Terminal() && !r.EndTime.IsZero() {
			end = r.EndTime
		}
		p.Elapsed = end.Sub(r.StartTime)
	}
	var sum time.Duration
	finished := 0
	for _, s := range spans {
		if !s.open && !s.start.IsZero() && !s.end.IsZero() {
			sum += s.end.Sub(s.start)
			finished++
		}
	}
	if finished > 0 && !r.Status.Terminal() {
		left := 0
		for b := 1; b <= r.Batches; b++ {
			if s := spans[b]; s != nil && s.open {
				left++
			}
		}
		if left > 0 {
			p.Estimate = sum/time.Duration(finished)*time.Duration(left) + r.BatchWait*time.Duration(left-1)
			if !r.NextBatchAt.IsZero() && r.NextBatchAt.After(now) {
				p.Estimate += r.NextBatchAt.Sub(now)
			}
		}
	}
	return p
}

// String is the one-line summary: "batch 2 of 5, 3/10 allocations done, 1 failed, 12s elapsed, ~30s left".
func (p Progress) String() string {
	parts := []string{}
	if p.Batches > 0 {
		parts = append(parts, fmt.Sprintf("batch %d of %d", max(p.Batch, 1), p.Batches))
	}
	parts = append(parts, fmt.Sprintf("%d/%d allocations done", p.Done, p.Total))
	if p.Failed > 0 {
		parts = append(parts, fmt.Sprintf("%d failed", p.Failed))
	}
	if p.Skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d skipped", p.Skipped))
	}
	parts = append(parts, p.Elapsed.Round(time.Second).String()+" elapsed")
	if p.Estimate > 0 {
		parts = append(parts, "~"+p.Estimate.Round(time.Second).String()+" left")
	}
	return strings.Join(parts, ", ")
}
