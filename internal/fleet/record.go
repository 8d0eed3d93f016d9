package fleet

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Record is a fleet as it is stored: the rules' state (Fleet) and what a reader needs
// besides (where it lives, what selected it, the options every child gets, its times and
// its log). Like a restart record, every field but Control is its driver's; operators
// write only Control.
type Record struct {
	Fleet
	// Namespace is where the record lives: the one namespace -namespace named, or
	// "default" for a selection across namespaces (see docs: "Fleet restarts").
	Namespace string
	Selection Selection
	// Spec is the options of `run` every child starts from; a job's own nomad-restart.*
	// meta (Job.Meta) overrides them for that job.
	Spec   restart.Spec
	Reason string `json:",omitempty"`
	// Driver names the process driving the fleet (host and pid), for humans.
	Driver string `json:",omitempty"`
	// Cluster is the Nomad address the fleet was filed against, as in a restart record.
	Cluster string `json:",omitempty"`
	// Question is set while the fleet is waiting for an operator (its failure budget spent
	// under -on-error ask).
	Question *restart.Question `json:",omitempty"`

	CreateIndex uint64
	ModifyIndex uint64
	CreateTime  time.Time
	ModifyTime  time.Time
	StartTime   time.Time `json:",omitzero"`
	EndTime     time.Time `json:",omitzero"`

	// Notify is the fleet's outbox of notifications, as a restart's (restart.Notifications).
	Notify *restart.Notifications `json:",omitempty"`

	// Events is a bounded log (MaxEvents, oldest dropped) of what happened to the fleet.
	Events []restart.Event `json:",omitempty"`
}

// Selection is what chose the fleet's jobs, kept for `status` and the page: the selection
// itself is fixed in Jobs.
type Selection struct {
	// Namespace is -namespace as given ("*" for every namespace the token may list).
	Namespace string
	// Filter is -jobs, Nomad's filter expression on its jobs list.
	Filter string `json:",omitempty"`
}

// MaxEvents bounds a fleet's log so that a fleet of many jobs still fits one variable;
// the children keep their own logs.
const MaxEvents = 100

// AddEvent appends an event, numbering it and dropping the oldest beyond MaxEvents.
func (r *Record) AddEvent(now time.Time, typ restart.EventType, msg string) {
	var seq uint64 = 1
	if n := len(r.Events); n > 0 {
		seq = r.Events[n-1].Seq + 1
	}
	r.Events = append(r.Events, restart.Event{Seq: seq, Time: now, Type: typ, Message: msg})
	if over := len(r.Events) - MaxEvents; over > 0 {
		r.Events = append(r.Events[:0], r.Events[over:]...)
	}
}

// ChildID is the ID of the restart record of one job of a fleet. It derives from the fleet
// and the job, so that a driver that died after creating a child and before recording it
// finds it again (a second Create of it fails with the store's ErrExists): a job is
// restarted once per fleet whatever instant a driver died at.
func ChildID(fleetID, namespace, jobID string) string {
	name := strings.Join([]string{"nomad-restart-fleet", fleetID, namespace, jobID}, "\x00")
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(name)).String()
}

// Counts tallies a fleet's jobs by status, for status lines and metrics.
func (f Fleet) Counts() map[JobStatus]int {
	out := map[JobStatus]int{}
	for _, j := range f.Jobs {
		out[j.Status]++
	}
	return out
}

// QuestionBudget is the kind of the question a fleet asks when its failure budget is spent.
const QuestionBudget restart.QuestionKind = "fleet-budget"

// BudgetQuestion is the question a fleet asks once its failure budget is spent under
// -on-error ask: yes raises the budget to the failures so far, so that the next failure
// asks again; no ends the fleet failed.
func BudgetQuestion(id, reason string, now time.Time) *restart.Question {
	text := strings.TrimSuffix(reason, ".") + ". Start the remaining jobs anyway (yes raises -max-failed-jobs to the failures so far)?"
	return &restart.Question{ID: id, Kind: QuestionBudget, Text: text, Options: "y/N", Default: "n", Asked: now}
}

// ApplyAnswer applies an operator's answer to the fleet's question. It returns whether the
// fleet goes on; an answer that is not yes or no is an error naming the valid ones.
func ApplyAnswer(r *Record, answer string) (proceed bool, err error) {
	if r.Status != restart.StatusWaiting || r.Question == nil {
		return false, fmt.Errorf("fleet %s is not waiting for an answer", r.ID)
	}
	ans, err := restart.ParseAnswer(r.Question, answer)
	if err != nil || ans.Wait != nil {
		return false, fmt.Errorf("answer %q is not one of %s", answer, r.Question.Options)
	}
	r.Question = nil
	if ans.Proceed {
		r.Options.MaxFailedJobs = tallyOf(r.Fleet).failures()
		releaseFailedUpstreams(&r.Fleet)
		r.Status = restart.StatusRunning
		return true, nil
	}
	// As under -on-error fail: the jobs a failed upstream holds are skipped naming it.
	d := failPending(r.Fleet, "an operator answered no to continuing after the failed jobs")
	d.Record(&r.Fleet)
	r.Reason = d.Reason
	return false, nil
}

// The events of a fleet's own log beyond a restart's (restart.EventStarted, EventPaused,
// EventQuestion, EventAnswer, EventSucceeded and the like keep their meaning).
const (
	EventJobStarted restart.EventType = "job-started" // a job's child was filed
	EventJobWaiting restart.EventType = "job-waiting" // a job waits for another restart of it
	EventJobEnded   restart.EventType = "job-ended"   // a job's turn ended: its status says how
)

// StatusEvent is the event type that reports a fleet's move to status.
func StatusEvent(from, to restart.Status) restart.EventType {
	switch to {
	case restart.StatusPaused:
		return restart.EventPaused
	case restart.StatusWaiting:
		return restart.EventQuestion
	case restart.StatusSucceeded:
		return restart.EventSucceeded
	case restart.StatusFailed:
		return restart.EventFailed
	case restart.StatusCanceled:
		return restart.EventCanceled
	case restart.StatusRunning:
		if from == restart.StatusPaused || from == restart.StatusWaiting {
			return restart.EventResumed
		}
	}
	return restart.EventStarted
}

// releaseFailedUpstreams lets the jobs held by an upstream that failed go on: an operator
// answered yes to continuing after the failures. Only the upstreams that failed so far are
// released; a later failure holds its downstream jobs again.
func releaseFailedUpstreams(f *Fleet) {
	for i := range f.Jobs {
		if f.Jobs[i].Status == JobFailed || f.Jobs[i].Status == JobCanceled || f.Jobs[i].Evidence.Unready != "" {
			f.Jobs[i].Evidence.Released = true
		}
	}
	for i := range f.Outside {
		if f.Outside[i].Evidence.Unready != "" {
			f.Outside[i].Evidence.Released = true
		}
	}
}

// EventWaveStarted is the event of a wave's first job starting.
const EventWaveStarted restart.EventType = "wave-started"
