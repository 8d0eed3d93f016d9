// Package restart is the pure domain of nomad-restart: what a restart is asked to do (Spec),
// what is known of it (Record), the facts observed in the cluster (Job, Alloc), and the rules
// that connect them (selection, batch math, status transitions). It does no I/O and knows
// nothing of Nomad's client or of where records are stored.
package restart

import (
	"fmt"
	"time"
)

// Status is the lifecycle state of a restart.
type Status string

const (
	StatusPending   Status = "pending"   // recorded, no driver has started it yet
	StatusRunning   Status = "running"   // a driver is restarting allocations
	StatusPaused    Status = "paused"    // held after the batch in flight finished
	StatusWaiting   Status = "waiting"   // waiting for an operator's answer to Question
	StatusSucceeded Status = "succeeded" // every planned allocation was restarted
	StatusFailed    Status = "failed"    // stopped by an error
	StatusCanceled  Status = "canceled"  // stopped by an operator
)

// Statuses are every status a restart (or a fleet) can have, from pending to the ends.
func Statuses() []Status {
	return []Status{StatusPending, StatusRunning, StatusPaused, StatusWaiting,
		StatusSucceeded, StatusFailed, StatusCanceled}
}

// Terminal reports whether no further work will happen for a restart in this status.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCanceled
}

// AllocState is the progress of one planned allocation.
type AllocState string

const (
	AllocPending    AllocState = "pending"    // not yet touched
	AllocRestarting AllocState = "restarting" // intent persisted; the restart or stop request may or may not have reached Nomad
	AllocWaiting    AllocState = "waiting"    // Nomad accepted the request; waiting for the tasks (or the replacement) to run again
	AllocDone       AllocState = "done"       // restarted and running again
	AllocFailed     AllocState = "failed"     // the restart or the wait failed; Error says why
	AllocSkipped    AllocState = "skipped"    // no longer eligible when its batch came (gone, replaced, stopped)
)

// Terminal reports whether the allocation needs no more work.
func (s AllocState) Terminal() bool {
	return s == AllocDone || s == AllocFailed || s == AllocSkipped
}

// Intent is the operator's latest wish for a restart. The driver watches it and obeys.
type Intent string

const (
	IntentRun    Intent = "run"
	IntentPause  Intent = "pause"
	IntentCancel Intent = "cancel"
)

// Record is the durable state of one restart. The driver owns every field but Control;
// operators (pause, resume, cancel, answer) write only Control. Stores keep that split when
// they merge concurrent writes (see MergeControl). Its times (and its allocations',
// observations' and surge's) are written even when zero: status -json and the agent's API
// show records as they are, and their schemas (docs/schemas) require those fields.
type Record struct {
	ID         string
	Namespace  string
	Region     string
	JobID      string
	JobType    string
	JobVersion uint64
	Spec       Spec

	Status Status
	// Reason says why the restart is in its Status: the error that failed it, who
	// canceled it, what it waits for.
	Reason string

	// Allocs is the plan: every eligible allocation, in batch order, with its progress.
	Allocs []AllocProgress
	// Batches is the number of batches in the plan; CurrentBatch the 1-based batch in
	// flight or last finished (0 before the first).
	Batches      int
	CurrentBatch int
	// BatchWait is the wait in force between batches; an answer of a duration changes it.
	BatchWait time.Duration
	// NextBatchAt is when the next batch may start (after a batch wait); zero when none.
	NextBatchAt time.Time
	// BatchWaitAsk is -batch-wait=ask in force: set from the Spec, turned off when an
	// answer gives a wait duration (as Nomad's prompt does).
	BatchWaitAsk bool `json:",omitempty"`
	// DecidedBatch is the last batch after which the driver decided to go on (no question
	// was needed, or it was answered yes): a resumed driver neither asks again nor restarts
	// the wait from scratch.
	DecidedBatch int `json:",omitempty"`

	// Question is set while Status is waiting.
	Question *Question `json:",omitempty"`

	Control Control

	// Triggers are the changes that caused a config-change rollout (none for a restart an
	// operator or a schedule filed), oldest first.
	Triggers []Trigger `json:",omitempty"`

	// Revert is set on the restart that brings back, after a config-change rollout failed,
	// the allocations that restarted onto the bad value: what was written back, never the
	// value itself.
	Revert *Revert `json:",omitempty"`

	// Fleet is the ID of the fleet that filed this restart as one of its jobs' ("" for a
	// restart filed on its own).
	Fleet string `json:",omitempty"`

	// Driver names the process driving the restart (host and pid), for humans.
	Driver string `json:",omitempty"`
	// Cluster is the Nomad cluster the restart was filed against, as the address its
	// creator used: a store on this machine serves every cluster the operator talks to, and a
	// restart must never be resumed against another (its allocations do not exist there).
	Cluster string `json:",omitempty"`

	CreateIndex uint64
	ModifyIndex uint64
	CreateTime  time.Time
	ModifyTime  time.Time
	StartTime   time.Time
	EndTime     time.Time

	// GateRuns are the metric gates' judgements of the batches so far (Spec.Gates), oldest
	// first.
	GateRuns []GateRun `json:",omitempty"`

	// Surge is the state of each targeted group's surge (-surge): the extra allocations the
	// restart runs while it restarts, scaled up before the first batch and back down before
	// the restart ends. A resumed driver finishes what it says.
	Surge []SurgeGroup `json:",omitempty"`

	// Notify is the record's outbox of notifications (nil: none was asked for or sent).
	Notify *Notifications `json:",omitempty"`

	// Events is a bounded log of what happened, oldest first (see MaxEvents).
	Events []Event
	// EventsDropped counts the oldest events dropped from Events to keep it bounded.
	EventsDropped uint64 `json:",omitempty"`
}

// Control is the part of a Record that operators write.
type Control struct {
	Intent Intent
	// Answer answers the Question whose ID is AnswerTo.
	Answer   string `json:",omitempty"`
	AnswerTo string `json:",omitempty"`
	// By names who set the intent or answer, for the event log.
	By string `json:",omitempty"`
}

// Question is something a restart needs an operator to decide before it continues.
type Question struct {
	ID   string
	Kind QuestionKind
	Text string
	// Options lists the accepted answers, as shown in the prompt ("y/N", "Y/n/<wait duration>").
	Options string
	// Default is the answer an empty reply means.
	Default string
	Asked   time.Time
}

// QuestionKind tells why a restart is asking.
type QuestionKind string

const (
	QuestionProceed     QuestionKind = "proceed"      // -batch-wait ask: proceed with the next batch?
	QuestionIgnoreError QuestionKind = "ignore-error" // -on-error ask: ignore the errors above?
)

// AllocProgress is the plan and progress of one allocation.
type AllocProgress struct {
	ID     string
	Name   string
	Group  string
	NodeID string
	Batch  int // 1-based
	State  AllocState
	// Tasks are the tasks to restart in place (empty with AllTasks, or with -reschedule).
	Tasks []string `json:",omitempty"`
	// Before holds what was observed just before the request, so that a later driver can
	// tell from Nomad's own facts whether the request took effect.
	Before *Observation `json:",omitempty"`
	// Replacement is the allocation that replaced this one (with -reschedule), the last
	// of the NextAllocation chain followed so far.
	Replacement string `json:",omitempty"`
	StartTime   time.Time
	EndTime     time.Time
	Error       string `json:",omitempty"`
	Waiting     string `json:",omitempty"` // what the driver waits for now, for humans
	Unrecovered bool   `json:",omitempty"` // Error is one likely to happen again
	Attempts    int    `json:",omitempty"` // restart or stop requests sent
	// StopIndex is Nomad's index of the stop request (-reschedule): placement failures are
	// evaluations created at or after it.
	StopIndex uint64     `json:",omitempty"`
	LastSeen  *time.Time `json:",omitempty"`
}

// Observation is the state of an allocation's targeted tasks in Nomad just before a restart
// request, in Nomad's own terms (counters and Nomad's timestamps, never the local clock).
type Observation struct {
	// Restarts is each task's restart counter.
	Restarts map[string]uint64 `json:",omitempty"`
	// States is each targeted task's state (running, pending, dead): a task that was not
	// running (a finished prestart task under -all-tasks) counts as restarted when it ran
	// again and finished successfully.
	States map[string]string `json:",omitempty"`
	// LastEventTime is the time (Nomad's clock) of the newest task event of the allocation.
	LastEventTime time.Time
	// AllocModifyIndex is the allocation's ModifyIndex.
	AllocModifyIndex uint64
}

// SurgePhase is where one group's surge stands.
type SurgePhase string

const (
	SurgeScalingUp   SurgePhase = "scaling-up"   // intent persisted; the scale-up may or may not have reached Nomad, or its allocations are not yet healthy
	SurgeUp          SurgePhase = "up"           // the group runs To allocations, the extra ones healthy
	SurgeScalingDown SurgePhase = "scaling-down" // intent persisted; the scale-down may or may not have reached Nomad
	SurgeDown        SurgePhase = "down"         // the group is back to From (or was never scaled)
	SurgeLeft        SurgePhase = "left"         // the count changed under us (or could not be restored); left as is, Note says why
)

// Done reports whether the phase needs no more work.
func (p SurgePhase) Done() bool { return p == SurgeDown || p == SurgeLeft }

// SurgeOpen reports whether a group's surge may still be up (or its request in flight):
// such a restart must end through a driver, which scales the groups back first.
func (r *Record) SurgeOpen() bool {
	for _, s := range r.Surge {
		if !s.Phase.Done() {
			return true
		}
	}
	return false
}

// SurgeGroup is one group's surge: its count was From, the restart scales it to To while it
// restarts, then back to From. Every scale request is preceded by a persisted intent holding
// the job's JobModifyIndex observed then, so that a later driver tells from the job's count
// (and that index, sent as Nomad's check-and-set) whether the request took effect.
type SurgeGroup struct {
	Group string
	From  int
	To    int
	Phase SurgePhase
	// JobModifyIndex is the job's JobModifyIndex read just before the pending request.
	JobModifyIndex uint64 `json:",omitempty"`
	// ScaledIndex is the JobModifyIndex Nomad answered the last scale request with: the
	// deployment made for it (if any) has that JobSpecModifyIndex.
	ScaledIndex uint64 `json:",omitempty"`
	// UpIndex is the ScaledIndex of the scale-up, kept while scaling down: a deployment
	// with that JobSpecModifyIndex is the surge's own, which the restart may fail to
	// scale back.
	UpIndex  uint64 `json:",omitempty"`
	UpTime   time.Time
	DownTime time.Time
	// Note says what was found when the count was not ours any more, or why it could not
	// be restored.
	Note string `json:",omitempty"`
}

// Event is one line of a restart's log. It is also what `run -json` prints, one per line.
type Event struct {
	// Seq numbers the events of one restart from 1, so that a reader of a bounded log
	// (attach, status) can tell which events it has already shown.
	Seq     uint64
	Time    time.Time
	Type    EventType
	Message string
	AllocID string `json:",omitempty"`
	Batch   int    `json:",omitempty"`
}

// EventType classifies events for machines reading `-json` output.
type EventType string

const (
	EventCreated       EventType = "created"
	EventStarted       EventType = "started"
	EventBatchStarted  EventType = "batch-started"
	EventBatchFinished EventType = "batch-finished"
	EventAllocRestart  EventType = "alloc-restart"
	EventAllocWaiting  EventType = "alloc-waiting"
	// EventAllocDrain says that an allocation's Consul service instances were taken out
	// of Consul's passing answers before its request (-drain).
	EventAllocDrain EventType = "alloc-drain"
	// EventAllocHealth says what a restarted allocation's health gate waits for now
	// (a task, a failing check with its output, the min-healthy timer); one per change of
	// kind, not one per observation.
	EventAllocHealth   EventType = "alloc-health"
	EventAllocDone     EventType = "alloc-done"
	EventAllocFailed   EventType = "alloc-failed"
	EventAllocSkipped  EventType = "alloc-skipped"
	EventAllocReplaced EventType = "alloc-replaced"
	EventBatchWait     EventType = "batch-wait"
	EventQuestion      EventType = "question"
	EventAnswer        EventType = "answer"
	EventPaused        EventType = "paused"
	EventResumed       EventType = "resumed"
	EventCanceled      EventType = "canceled"
	EventSucceeded     EventType = "succeeded"
	EventFailed        EventType = "failed"
	EventDriver        EventType = "driver" // a driver took over or let go
	EventWarning       EventType = "warning"
	// EventSurge reports a surge step: scaling a group up, its surge allocations healthy,
	// scaling it back down.
	EventSurge EventType = "surge"
	// EventGate reports that a batch's metric gates started measuring, and each
	// measurement; EventGatePassed, EventGateWouldFail (a dry run's failure, not acted on)
	// and EventGateFailed how they ended (a failure acts as a batch with errors).
	EventGate          EventType = "gate"
	EventGatePassed    EventType = "gate-passed"
	EventGateWouldFail EventType = "gate-would-fail"
	EventGateFailed    EventType = "gate-failed"
)

// MaxEvents bounds Record.Events; older events are dropped first, and one marker event says
// how many were dropped.
const MaxEvents = 200

// Trigger is one change of a source a job's templates read (a Nomad variable, a Consul key
// or prefix) that a config-change rollout answers.
type Trigger struct {
	// Source names what changed as the job's meta names it: "nomad:<path>" or
	// "consul:<key>[@dc]".
	Source string
	// OldIndex and NewIndex are the source's modify index before and after the change
	// (Nomad's ModifyIndex, Consul's X-Consul-Index).
	OldIndex, NewIndex uint64
	// ChangedAt is when the change was made (Nomad's ModifyTime), or first seen where the
	// source keeps no time (Consul); for a re-render, the newest render.
	ChangedAt time.Time
	// Task, Destination and Allocs name a re-rendered template (Source
	// "rendered:<task>/<destination>") and how many allocations ran it stale.
	Task        string `json:",omitempty"`
	Destination string `json:",omitempty"`
	Allocs      int    `json:",omitempty"`
}

func (t Trigger) String() string {
	at := t.ChangedAt.UTC().Format(time.RFC3339)
	if t.Destination != "" {
		return fmt.Sprintf("template %q of task %q re-rendered after its task started in %d allocation(s), last at %s", t.Destination, t.Task, t.Allocs, at)
	}
	if t.OldIndex == 0 {
		return fmt.Sprintf("%s changed (index %d) at %s", t.Source, t.NewIndex, at)
	}
	return fmt.Sprintf("%s changed (index %d → %d) at %s", t.Source, t.OldIndex, t.NewIndex, at)
}

// Revert says what the revert of a failed config-change rollout wrote back before its
// restart: its allocations' progress is each one's way back to the previous value.
type Revert struct {
	// Rollout is the failed rollout reverted.
	Rollout string
	Writes  []RevertWrite
}

// RevertWrite is one source put back to its kept value with check-and-set.
type RevertWrite struct {
	// Source names the source as the rollout's trigger does ("nomad:<path>",
	// "consul:<key>[@dc]").
	Source string
	// KeptPath is the Nomad variable (in the job's namespace) the previous value was kept in.
	KeptPath string
	// BadIndex is the bad value's modify index, the check-and-set's; WrittenIndex the
	// source's index after the write-back.
	BadIndex, WrittenIndex uint64
}
