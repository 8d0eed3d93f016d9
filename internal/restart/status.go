package restart

import "fmt"

// transitions lists the legal status changes. Terminal statuses have none.
var transitions = map[Status][]Status{
	StatusPending: {StatusRunning, StatusCanceled, StatusFailed},
	StatusRunning: {StatusPaused, StatusWaiting, StatusSucceeded, StatusFailed, StatusCanceled},
	StatusPaused:  {StatusRunning, StatusCanceled, StatusFailed},
	StatusWaiting: {StatusRunning, StatusPaused, StatusSucceeded, StatusFailed, StatusCanceled},
}

// CanTransition reports whether a restart may go from one status to another. Staying in the
// same non-terminal status is allowed.
func CanTransition(from, to Status) bool {
	if from == to {
		return !from.Terminal()
	}
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// SetStatus moves the record to status to, with reason, or fails if the change is illegal.
func (r *Record) SetStatus(to Status, reason string) error {
	if !CanTransition(r.Status, to) {
		return fmt.Errorf("restart %s cannot go from %s to %s", r.ID, r.Status, to)
	}
	r.Status = to
	r.Reason = reason
	if to != StatusWaiting {
		r.Question = nil
	}
	return nil
}
