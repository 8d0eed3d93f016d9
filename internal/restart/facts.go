package restart

import (
	"slices"
	"time"
)

// The types below are the facts the cluster reports, reduced to what restarts need. They are
// filled by package cluster from Nomad's API and read by the selection and progress rules.

// Job is what a restart needs to know of a job.
type Job struct {
	ID          string
	Namespace   string
	Region      string
	Type        string // service, batch, system, sysbatch
	Version     uint64
	ModifyIndex uint64
	// MultiRegion is true when the job's multiregion block names regions.
	MultiRegion bool
	// Datacenters are the job's datacenters as Nomad holds them: names or patterns with
	// "*" (Nomad's default is "*", every datacenter).
	Datacenters []string
	Groups      []Group
}

// Group is a task group of a job version.
type Group struct {
	Name  string
	Count int
	Tasks []string
}

// HasTask reports whether the group defines the named task.
func (g Group) HasTask(name string) bool { return slices.Contains(g.Tasks, name) }

// Group returns the named group of the job version and whether it exists.
func (j *Job) Group(name string) (Group, bool) {
	if j == nil {
		return Group{}, false
	}
	i := slices.IndexFunc(j.Groups, func(g Group) bool { return g.Name == name })
	if i < 0 {
		return Group{}, false
	}
	return j.Groups[i], true
}

// Alloc is an allocation as observed in Nomad.
type Alloc struct {
	ID                 string
	Name               string
	Namespace          string
	JobID              string
	JobVersion         uint64
	Group              string
	NodeID             string
	NodeName           string
	DesiredStatus      string // run, stop, evict
	ClientStatus       string // pending, running, complete, failed, lost, unknown
	NextAllocation     string
	PreviousAllocation string
	CreateIndex        uint64
	ModifyIndex        uint64
	// Tasks is nil when only a list stub was read.
	Tasks map[string]TaskState
}

// TaskState is one task's state within an allocation.
type TaskState struct {
	State       string // pending, running, dead
	Failed      bool
	Restarts    uint64
	LastRestart time.Time
	StartedAt   time.Time
	FinishedAt  time.Time
	Events      []TaskEvent
}

// LatestStart is when the task last started, or began restarting: the latest of its
// StartedAt (Nomad sets it on each move to running), LastRestart (set when a restart
// begins, before the task runs again) and its newest Started event. Zero: never started.
func (ts TaskState) LatestStart() time.Time {
	latest := ts.StartedAt
	if ts.LastRestart.After(latest) {
		latest = ts.LastRestart
	}
	for _, e := range ts.Events {
		if e.Type == TaskEventStarted && e.Time.After(latest) {
			latest = e.Time
		}
	}
	return latest
}

// TaskEvent is a task event, with Nomad's timestamp.
type TaskEvent struct {
	Type    string
	Time    time.Time
	Message string
}

// Task event types Nomad emits that restarts care about.
const (
	TaskEventStarted         = "Started"
	TaskEventRestartSignaled = "Restart Signaled"
	TaskEventRestarting      = "Restarting"
	TaskEventTerminated      = "Terminated"
	TaskEventKilling         = "Killing"
	TaskEventKilled          = "Killed"
	TaskEventDriverFailure   = "Driver Failure"
	TaskEventNotRestarting   = "Not Restarting"
)

// Allocation client and desired statuses, as Nomad names them.
const (
	ClientPending  = "pending"
	ClientRunning  = "running"
	ClientComplete = "complete"
	ClientFailed   = "failed"
	ClientLost     = "lost"
	DesiredRun     = "run"
	DesiredStop    = "stop"
	TaskRunning    = "running"
	TaskPending    = "pending"
	TaskDead       = "dead"
)
