package notify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// Trigger names what a notification is about. The names follow Argo Rollouts' triggers
// where one fits (on-rollout-completed is succeeded, on-rollout-aborted canceled,
// on-analysis-run-failed gate-failed), without their "on-" prefix.
type Trigger string

const (
	TriggerStarted       Trigger = "started"        // a driver started the restart
	TriggerQuestion      Trigger = "question"       // the restart waits for an answer
	TriggerBatchFailed   Trigger = "batch-failed"   // a batch had errors (a question or a failure follows)
	TriggerGateFailed    Trigger = "gate-failed"    // a metric gate failed a batch
	TriggerPaused        Trigger = "paused"         // an operator's pause took hold
	TriggerResumed       Trigger = "resumed"        // an operator resumed it
	TriggerCanceled      Trigger = "canceled"       // an operator canceled it
	TriggerSucceeded     Trigger = "succeeded"      // every allocation was restarted
	TriggerFailed        Trigger = "failed"         // it stopped on an error
	TriggerConfigChange  Trigger = "config-change"  // the agent started a config-change rollout
	TriggerScheduleFired Trigger = "schedule-fired" // a schedule filed the restart
	TriggerStaleFound    Trigger = "stale-found"    // the agent found allocations running stale renders and started a rollout
	TriggerFleetStarted  Trigger = "fleet-started"  // a fleet started, with its jobs' count
	TriggerFleetFinished Trigger = "fleet-finished" // a fleet ended, with its jobs' outcomes
)

// Triggers are every trigger, in the order the docs list them.
func Triggers() []Trigger {
	return []Trigger{TriggerStarted, TriggerQuestion, TriggerBatchFailed, TriggerGateFailed,
		TriggerPaused, TriggerResumed, TriggerCanceled, TriggerSucceeded, TriggerFailed,
		TriggerConfigChange, TriggerStaleFound, TriggerScheduleFired, TriggerFleetStarted, TriggerFleetFinished}
}

// ParseTrigger reads a trigger's name.
func ParseTrigger(s string) (Trigger, error) {
	t := Trigger(strings.ToLower(strings.TrimSpace(s)))
	if slices.Contains(Triggers(), t) {
		return t, nil
	}
	return "", fmt.Errorf("unknown trigger %q: use one of %s, or all", s, triggerList())
}

func triggerList() string {
	names := make([]string, 0, len(Triggers()))
	for _, t := range Triggers() {
		names = append(names, string(t))
	}
	return strings.Join(names, ", ")
}

// Severity grades a notification, for -notify-min.
type Severity int

const (
	SeverityInfo Severity = iota
	SeverityWarning
	SeverityError
)

func (s Severity) String() string {
	switch s {
	case SeverityWarning:
		return "warning"
	case SeverityError:
		return "error"
	}
	return "info"
}

// ParseSeverity reads -notify-min.
func ParseSeverity(s string) (Severity, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "info":
		return SeverityInfo, nil
	case "warning", "warn":
		return SeverityWarning, nil
	case "error":
		return SeverityError, nil
	}
	return 0, fmt.Errorf("invalid -notify-min %q: use info, warning or error", s)
}

// severityOf is how much a trigger matters: what needs someone (a question, a failed
// batch, a cancel) is a warning, what failed an error, the rest news.
func severityOf(t Trigger, status restart.Status) Severity {
	switch t {
	case TriggerQuestion, TriggerBatchFailed, TriggerCanceled:
		return SeverityWarning
	case TriggerGateFailed, TriggerFailed:
		return SeverityError
	case TriggerFleetFinished:
		switch status {
		case restart.StatusFailed:
			return SeverityError
		case restart.StatusCanceled:
			return SeverityWarning
		}
	}
	return SeverityInfo
}

// triggersOf are the triggers an event of a subject raises (none for most: an
// allocation's steps are the page's and attach's to show, not a chat's).
func triggersOf(s *Subject, ev restart.Event) []Trigger {
	// Pausing and resuming read the same of a restart and of a fleet.
	switch ev.Type {
	case restart.EventPaused:
		return []Trigger{TriggerPaused}
	case restart.EventResumed:
		return []Trigger{TriggerResumed}
	}
	if s.Kind == steer.KindFleet {
		switch ev.Type {
		case restart.EventCreated:
			return []Trigger{TriggerFleetStarted}
		case restart.EventSucceeded, restart.EventFailed, restart.EventCanceled:
			return []Trigger{TriggerFleetFinished}
		case restart.EventQuestion:
			return []Trigger{TriggerQuestion}
		}
		return nil
	}
	switch ev.Type {
	case restart.EventCreated:
		if strings.Contains(ev.Message, "created by schedule") {
			return []Trigger{TriggerScheduleFired}
		}
	case restart.EventStarted:
		switch {
		case s.StaleRenders:
			return []Trigger{TriggerStaleFound}
		case len(s.Changes) > 0:
			return []Trigger{TriggerConfigChange}
		}
		return []Trigger{TriggerStarted}
	case restart.EventQuestion:
		if strings.Contains(ev.Message, "errors") {
			return []Trigger{TriggerQuestion, TriggerBatchFailed}
		}
		return []Trigger{TriggerQuestion}
	case restart.EventGateFailed:
		return []Trigger{TriggerGateFailed}
	case restart.EventCanceled:
		return []Trigger{TriggerCanceled}
	case restart.EventSucceeded:
		return []Trigger{TriggerSucceeded}
	case restart.EventFailed:
		if failedByBatch(ev.Message) {
			return []Trigger{TriggerFailed, TriggerBatchFailed}
		}
		return []Trigger{TriggerFailed}
	}
	return nil
}

// failedByBatch tells, by the engine's words, a restart that a batch's errors stopped
// ("Stopping job restart due to error: ...", "... due to unrecoverable error: ...", "Job
// restart finished with errors ...") from one stopped by something else (a deployment,
// a surge, a gate under -yes: "Stopping job restart: ...").
func failedByBatch(msg string) bool {
	for _, words := range []string{"due to error", "due to unrecoverable error", "finished with errors"} {
		if strings.Contains(msg, words) {
			return true
		}
	}
	return false
}
