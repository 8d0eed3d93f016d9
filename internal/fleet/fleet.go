package fleet

import (
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Fleet is the durable state of one fleet restart. Status uses the words of a restart's
// status (pending, running, paused, waiting, succeeded, failed, canceled) so that a reader
// of both, the CLI or the agent's page, shows them alike.
type Fleet struct {
	ID      string
	Options Options
	// Jobs is the selection in the order it is restarted, fixed at creation: the order is
	// recorded rather than recomputed so that a resumed driver continues where it stopped
	// even if the jobs' priorities changed meanwhile.
	Jobs   []Job
	Status restart.Status
	// Control is the operators' part, as in a restart record: Intent run, pause or cancel,
	// and By, who set it.
	Control restart.Control
	// Outside are the upstreams of its jobs that it does not restart, with their evidence
	// (waves.go).
	Outside []Upstream `json:",omitempty"`
}

// Job is one selected job and what became of it in this fleet.
type Job struct {
	Namespace string
	JobID     string
	// Type is Nomad's job type (service, batch, system, sysbatch) when the fleet was created.
	Type string `json:",omitempty"`
	// Priority is Nomad's job priority when the fleet was created, kept for -order priority.
	Priority int
	// Meta holds the job's own nomad-restart.* meta keys when the fleet was created: they
	// override the fleet's options for this job's child.
	Meta map[string]string `json:",omitempty"`
	// RestartID is the child restart's ID once the job's turn came; it never changes after,
	// which is what makes each job restarted once per fleet.
	RestartID string `json:",omitempty"`
	// Status starts as JobPending; the zero value is no status, and Next starts no such job.
	Status JobStatus
	// Reason says why a job was skipped, failed, canceled or is still waiting.
	Reason string `json:",omitempty"`
	// BusyWith is the other restart in progress on the job that a pending job waits for
	// (-busy wait); Next does not start the job while it is set.
	BusyWith string `json:",omitempty"`
	// Steered is the fleet's intent last forwarded to the job's child (empty: none, which
	// means run). Recording it lets Next forward a fleet's pause or resume once, and so not
	// undo what an operator did to that child alone afterwards.
	Steered restart.Intent `json:",omitempty"`
	// Wave is the job's wave when the fleet orders its jobs by their upstreams (1 first; 0:
	// the fleet has no order between jobs), and After its upstreams (waves.go).
	Wave  int   `json:",omitempty"`
	After []Ref `json:",omitempty"`
	// Evidence is what its downstream jobs wait for once its restart ended: set by the
	// driver's measurements, durable so that a resumed driver never starts a downstream
	// job before it.
	Evidence Evidence `json:",omitzero"`
}

// JobStatus is where a job stands in its fleet.
type JobStatus string

const (
	JobPending   JobStatus = "pending"   // its turn has not come, or it waits for another restart
	JobRunning   JobStatus = "running"   // its child restart exists and has not ended (paused and waiting included)
	JobSucceeded JobStatus = "succeeded" // its child restarted every planned allocation
	JobFailed    JobStatus = "failed"    // its child failed
	JobSkipped   JobStatus = "skipped"   // never restarted, for the recorded Reason (purged, busy under -busy skip)
	JobCanceled  JobStatus = "canceled"  // its child was canceled, or the fleet stopped (canceled, failed) before its turn
)

// Terminal reports whether nothing more will happen to the job in this fleet.
func (s JobStatus) Terminal() bool {
	return s == JobSucceeded || s == JobFailed || s == JobSkipped || s == JobCanceled
}

// Options are the fleet's own options; the per-job options of a restart live in each
// child's Spec.
type Options struct {
	// MaxParallelJobs bounds the children running at once, so a fleet never restarts more
	// of the cluster at once than the operator allowed (-max-parallel-jobs, default 1).
	MaxParallelJobs int
	// MaxFailedJobs is how many jobs may fail before nothing new starts (-max-failed-jobs,
	// default 0: the first failure stops the fleet from starting more).
	MaxFailedJobs int
	Order         OrderBy
	Busy          Busy
	// OnError is what happens once the failure budget is spent and no child runs.
	OnError restart.OnError
	// After is -after, the order of the fleet's jobs beyond their meta's (waves.go).
	After []Dependency `json:",omitempty"`
	// AfterOutside is -after-outside: whether an upstream outside the selection must be
	// healthy ("wait", also when empty) or is not looked at ("ignore").
	AfterOutside AfterOutside `json:",omitempty"`
	// WaveWait is -wave-wait: how long an upstream's gates must hold after its restart
	// ended, its allocations healthy, before its downstream jobs start.
	WaveWait time.Duration `json:",omitempty"`
}

// DefaultOptions are the options of a fleet given no flag: the most cautious ones, one job
// at a time and stop at the first failure, because a fleet reaches many services at once.
func DefaultOptions() Options {
	return Options{MaxParallelJobs: 1, MaxFailedJobs: 0, Order: OrderName, Busy: BusyWait, OnError: restart.OnErrorAsk, AfterOutside: AfterOutsideWait}
}

// Validate refuses options the rules cannot apply, with the flag to fix, before anything
// is written.
func (o Options) Validate() error {
	if o.MaxParallelJobs < 1 {
		return &restart.ValueError{Flag: "max-parallel-jobs", Value: fmt.Sprint(o.MaxParallelJobs), Reason: "give at least 1"}
	}
	if o.MaxFailedJobs < 0 {
		return &restart.ValueError{Flag: "max-failed-jobs", Value: fmt.Sprint(o.MaxFailedJobs), Reason: "give 0 or more"}
	}
	if _, err := ParseOrderBy(string(o.Order)); err != nil {
		return err
	}
	if _, err := ParseBusy(string(o.Busy)); err != nil {
		return err
	}
	if _, err := restart.ParseOnError(string(o.OnError)); err != nil {
		return err
	}
	if o.AfterOutside != "" {
		if _, err := ParseAfterOutside(string(o.AfterOutside)); err != nil {
			return err
		}
	}
	if o.WaveWait < 0 {
		return &restart.ValueError{Flag: "wave-wait", Value: o.WaveWait.String(), Reason: "give 0 or a positive duration, like 30s"}
	}
	for _, d := range o.After {
		if _, err := ParseAfter(d.String()); err != nil {
			return err
		}
	}
	return nil
}

// Busy is -busy: what a fleet does with a job that already has a restart in progress. Both
// answers keep the rule that a job is never restarted twice at once.
type Busy string

const (
	BusyWait Busy = "wait" // keep it pending until that restart ends, and start it then
	BusySkip Busy = "skip" // record it skipped: that restart is deemed enough
)

// ParseBusy parses -busy: "wait" or "skip", exactly, as restart.ParseOnError does.
func ParseBusy(s string) (Busy, error) {
	switch Busy(s) {
	case BusyWait, BusySkip:
		return Busy(s), nil
	}
	return "", &restart.ValueError{Flag: "busy", Value: s, Reason: `valid options are "wait" and "skip"`}
}
