package schedule

import (
	"fmt"
	"time"
)

// maxCount bounds the occurrences counted in one step: a per-second cron left alone for
// weeks would otherwise be walked one second at a time. Past it the count is a floor.
const maxCount = 100000

// Step is what a schedule asks for at one moment.
type Step struct {
	// Run is the occurrence to start now; zero: none.
	Run time.Time
	// Missed counts occurrences given up (due longer than the grace ago, or passed over
	// for a later one that is due too); LastMissed is the latest of them.
	Missed     int
	LastMissed time.Time
	// MissedReason says why, for the record and the logs.
	MissedReason string
	// Next is the schedule's next due time after this step; zero: no more (done).
	Next time.Time
}

// Due reports whether an occurrence is due at now.
func (s *Schedule) Due(now time.Time) bool {
	return s.Status == StatusActive && !s.Next.IsZero() && !now.Before(s.Next)
}

// Plan says what to do at now: which occurrence to start (at most one: a backlog is never
// run as a burst), which ones are missed, and the next due time. It changes nothing.
func (s *Schedule) Plan(now time.Time) (Step, error) {
	if !s.Due(now) {
		return Step{Next: s.Next}, nil
	}
	grace := s.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	// The occurrences due by now: Next and, for a cron, those after it up to now.
	w := walked{count: 1, last: s.Next}
	if s.Cron != "" {
		c, err := s.cron()
		if err != nil {
			return Step{}, err
		}
		if w, err = walk(c, s.Next, now); err != nil {
			return Step{}, fmt.Errorf("schedule %s: %w", s.ID, err)
		}
		if w.capped {
			// A long backlog: only the occurrences within the grace can still start;
			// walk those alone (the count of the others is a floor).
			recent, err := walk(c, now.Add(-grace), now)
			if err != nil {
				return Step{}, fmt.Errorf("schedule %s: %w", s.ID, err)
			}
			if !recent.last.Before(now.Add(-grace)) {
				w.prev, w.last = recent.prev, recent.last
			}
			w.next = recent.next
		}
	}
	st := Step{Next: w.next}
	late := now.Sub(w.last)
	if late > grace {
		st.Missed = w.count
		st.LastMissed = w.last
		st.MissedReason = fmt.Sprintf("not started within the grace of %s after its due time: no agent was running (handled %s late)", grace, late.Round(time.Second))
		return st, nil
	}
	st.Run = w.last
	if w.count > 1 {
		st.Missed = w.count - 1
		st.LastMissed = w.prev
		st.MissedReason = "passed while no agent was running; only the latest due occurrence is started"
	}
	return st, nil
}

// walked is a walk over a cron's occurrences.
type walked struct {
	count      int       // occurrences from the start up to the end (the start counts)
	prev, last time.Time // the last two of them (prev zero when count is 1)
	next       time.Time // the first after the end; zero if none
	capped     bool      // maxCount was reached: count is a floor, prev and last stale
}

// walk steps from start (an occurrence, or any time: it counts only when it is one) to end.
func walk(c *Cron, start, end time.Time) (walked, error) {
	w := walked{}
	cur := start.Add(-time.Nanosecond)
	for {
		t, err := c.Next(cur)
		if err != nil {
			return w, err
		}
		if t.IsZero() || t.After(end) {
			w.next = t
			return w, nil
		}
		w.count++
		w.prev, w.last, cur = w.last, t, t
		if w.count >= maxCount {
			w.capped = true
			if w.next, err = c.Next(end); err != nil {
				return w, err
			}
			return w, nil
		}
	}
}

// Outcome is what became of an occurrence the agent tried to start.
type Outcome struct {
	Result    Result
	RestartID string
	Reason    string
}

// Claim records step's missed occurrences, advances Next, and makes step.Run (if any)
// the schedule's Pending occurrence, claimed by holder at now: stored with check-and-set
// before its restart is created, so that of agents racing on one occurrence exactly one
// decides what becomes of it. Finish records the outcome.
func (s *Schedule) Claim(step Step, holder string, now time.Time) {
	if step.Missed > 0 {
		s.Missed += step.Missed
		s.LastMissed = step.LastMissed
		s.MissedReason = step.MissedReason
		s.remember(Occurrence{Due: step.LastMissed, Result: ResultMissed, Reason: step.MissedReason, Count: step.Missed, Handled: now})
	}
	if !step.Run.IsZero() {
		s.Pending = &Pending{Due: step.Run, RestartID: OccurrenceID(s.ID, step.Run), Holder: holder, Since: now}
	}
	s.Next = step.Next
	s.endIfDone()
}

// Finish records the outcome of the Pending occurrence and clears it; false when there is
// none.
func (s *Schedule) Finish(out Outcome, now time.Time) bool {
	p := s.Pending
	if p == nil {
		return false
	}
	s.Pending = nil
	s.LastDue, s.LastResult, s.LastRestartID, s.LastReason = p.Due, out.Result, out.RestartID, out.Reason
	switch out.Result {
	case ResultStarted:
		s.Started++
	case ResultSkipped:
		s.Skipped++
	case ResultFailed:
		s.Failed++
	}
	s.remember(Occurrence{Due: p.Due, Result: out.Result, RestartID: out.RestartID, Reason: out.Reason, Handled: now})
	s.endIfDone()
	return true
}

// Apply is Claim and Finish at once, for an outcome known in advance.
func (s *Schedule) Apply(step Step, out Outcome, now time.Time) {
	s.Claim(step, "", now)
	if !step.Run.IsZero() {
		s.Finish(out, now)
	}
}

func (s *Schedule) endIfDone() {
	if s.Next.IsZero() && s.Pending == nil {
		s.Status = StatusDone
	}
}

func (s *Schedule) remember(o Occurrence) {
	s.History = append(s.History, o)
	if n := len(s.History) - HistoryLimit; n > 0 {
		s.History = append([]Occurrence(nil), s.History[n:]...)
	}
}
