package fleet

import (
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Observation is what the driver saw of one job of a fleet. Set one kind of fact: the
// job's child (RestartID and ChildStatus), another restart in progress on the job
// (BusyWith), or that Nomad no longer knows the job (Purged). A pending job observed with
// none of them is free to start.
type Observation struct {
	Namespace string
	JobID     string
	// RestartID and ChildStatus are the job's child restart and its status.
	RestartID   string
	ChildStatus restart.Status
	// ChildError is the child's error when it failed, kept as the job's Reason.
	ChildError string
	// BusyWith is the ID of another restart in progress on the job, not this fleet's child.
	BusyWith string
	// Purged means the job is gone from Nomad.
	Purged bool
	// Skip is why the job's turn found nothing to restart (no allocation left to restart).
	Skip string
	// Failed is why the job's child could not be planned or created (Nomad refused the
	// plan, the token may not write the child's record).
	Failed string
	// Evidence is what the driver measured of the job as an upstream (of the fleet, or
	// outside it): its progress, Ready, or Unready.
	Evidence *Evidence
}

// Observe applies obs to its job in f. It never moves a job back: a job that ended keeps
// its end, and a job's child once recorded is the only one it may have; either attempt is
// an error, since it means two drivers disagree about the fleet and the write must not go on.
func Observe(f *Fleet, obs Observation) error {
	if obs.Evidence != nil {
		return observeEvidence(f, obs)
	}
	i := indexOf(f.Jobs, obs.Namespace, obs.JobID)
	if i < 0 {
		return fmt.Errorf("fleet %s: job %q in namespace %q is not in its selection", f.ID, obs.JobID, obs.Namespace)
	}
	job := &f.Jobs[i]
	if obs.RestartID != "" {
		return observeChild(f.ID, job, obs)
	}
	if job.Status != JobPending {
		// Busy and purged facts matter only before the job's turn: once its child exists,
		// the child's own status tells how the job ends.
		return nil
	}
	switch {
	case obs.Purged:
		*job = settle(*job, JobSkipped, "the job was purged from Nomad before its turn")
	case obs.Skip != "":
		*job = settle(*job, JobSkipped, obs.Skip)
	case obs.Failed != "":
		*job = settle(*job, JobFailed, obs.Failed)
	case obs.BusyWith != "" && f.Options.Busy == BusySkip:
		*job = settle(*job, JobSkipped, fmt.Sprintf("restart %s was in progress on the job (-busy skip)", obs.BusyWith))
	case obs.BusyWith != "":
		job.BusyWith = obs.BusyWith
		job.Reason = fmt.Sprintf("waiting for restart %s in progress on the job (-busy wait)", obs.BusyWith)
	default:
		job.BusyWith, job.Reason = "", ""
	}
	return nil
}

// Unstart takes back the start of a job whose child was recorded as an intent but could not
// be created (the job became busy with another restart meanwhile, or the token may not write
// its record): the child does not exist, so the job is pending again, and obs (BusyWith or
// Failed) is applied to it as to any pending job.
func Unstart(f *Fleet, obs Observation) error {
	i := indexOf(f.Jobs, obs.Namespace, obs.JobID)
	if i < 0 {
		return fmt.Errorf("fleet %s: job %q in namespace %q is not in its selection", f.ID, obs.JobID, obs.Namespace)
	}
	if f.Jobs[i].Status != JobRunning {
		return fmt.Errorf("fleet %s: job %q is %s, not running: only a start may be taken back", f.ID, obs.JobID, f.Jobs[i].Status)
	}
	f.Jobs[i].Status, f.Jobs[i].RestartID, f.Jobs[i].Steered = JobPending, "", ""
	obs.RestartID = ""
	return Observe(f, obs)
}

// observeChild records the job's child and maps its status onto the job.
func observeChild(fleetID string, job *Job, obs Observation) error {
	if job.RestartID != "" && job.RestartID != obs.RestartID {
		return fmt.Errorf("fleet %s: job %q already has restart %s, not %s: a job is restarted once per fleet", fleetID, job.JobID, job.RestartID, obs.RestartID)
	}
	if job.Status.Terminal() {
		if job.RestartID == "" {
			return fmt.Errorf("fleet %s: job %q ended %s before its turn and may not get restart %s", fleetID, job.JobID, job.Status, obs.RestartID)
		}
		return nil
	}
	status, err := jobStatusOf(obs.ChildStatus)
	if err != nil {
		return fmt.Errorf("fleet %s: job %q: %w", fleetID, job.JobID, err)
	}
	job.RestartID = obs.RestartID
	job.BusyWith = ""
	reason := ""
	if status == JobFailed {
		reason = obs.ChildError
	}
	*job = settle(*job, status, reason)
	return nil
}

// jobStatusOf maps a child's status onto its job's: any child that has not ended holds
// the job running, because its allocations may be mid-restart.
func jobStatusOf(s restart.Status) (JobStatus, error) {
	switch s {
	case restart.StatusPending, restart.StatusRunning, restart.StatusPaused, restart.StatusWaiting:
		return JobRunning, nil
	case restart.StatusSucceeded:
		return JobSucceeded, nil
	case restart.StatusFailed:
		return JobFailed, nil
	case restart.StatusCanceled:
		return JobCanceled, nil
	}
	return "", fmt.Errorf("unknown child restart status %q", s)
}

func settle(job Job, status JobStatus, reason string) Job {
	job.Status, job.Reason, job.BusyWith = status, reason, ""
	return job
}

func indexOf(jobs []Job, namespace, jobID string) int {
	for i, j := range jobs {
		if j.Namespace == namespace && j.JobID == jobID {
			return i
		}
	}
	return -1
}

// observeEvidence records an upstream's measured evidence. A verdict is final: once Ready
// or Unready, later measurements change nothing, so that a downstream job that started
// never finds its upstream's evidence taken back, and one held is held for good (until an
// operator releases it). An upstream in the fleet whose restart succeeded but whose
// evidence failed counts as failed: its restart did not leave it well. So does one that
// was skipped (nothing to restart, purged, busy) but is not healthy: its downstream jobs
// are not restarted for it, which the budget and the fleet's end must count.
func observeEvidence(f *Fleet, obs Observation) error {
	ev := f.evidenceOf(Ref{obs.Namespace, obs.JobID})
	if ev == nil {
		return fmt.Errorf("fleet %s: job %q in namespace %q is neither in its selection nor an upstream of it", f.ID, obs.JobID, obs.Namespace)
	}
	i := indexOf(f.Jobs, obs.Namespace, obs.JobID)
	if ev.verdict() || (i >= 0 && !f.Jobs[i].Status.Terminal()) {
		return nil // a verdict is final; a job's evidence is measured once its restart ended
	}
	got := *obs.Evidence
	ev.Ready, ev.Unready, ev.Waits = got.Ready, got.Unready, got.Waits
	if ev.Ready {
		ev.Waits = ""
	}
	if i < 0 || got.Unready == "" {
		return nil
	}
	switch j := &f.Jobs[i]; j.Status {
	case JobSucceeded:
		j.Status, j.Reason = JobFailed, "its restart succeeded, but "+got.Unready
	case JobSkipped:
		j.Status, j.Reason = JobFailed, "it was skipped ("+j.Reason+"), but as an upstream it "+got.Unready
	}
	return nil
}

// evidenceOf is where the evidence of upstream r is kept: its job's, or its entry among
// the upstreams outside the fleet; nil for neither.
func (f *Fleet) evidenceOf(r Ref) *Evidence {
	if i := indexOf(f.Jobs, r.Namespace, r.JobID); i >= 0 {
		return &f.Jobs[i].Evidence
	}
	if o := f.outsideIndex(r); o >= 0 {
		return &f.Outside[o].Evidence
	}
	return nil
}

// EvidenceOf is the recorded evidence of upstream r, zero when r is no upstream of f.
func (f Fleet) EvidenceOf(r Ref) Evidence {
	if ev := f.evidenceOf(r); ev != nil {
		return *ev
	}
	return Evidence{}
}
