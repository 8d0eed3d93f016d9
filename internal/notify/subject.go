package notify

import (
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// Subject is what notifications speak of: a restart or a fleet, as its record says.
type Subject struct {
	Kind      steer.Kind
	ID        string
	Namespace string
	Region    string
	JobID     string // "" for a fleet
	Status    restart.Status
	Reason    string
	// Fleet is the fleet a restart is a job of ("" for one filed on its own).
	Fleet string
	// Changes name what a config-change rollout answers (sources and indexes, never values).
	Changes []string
	// StaleRenders says the rollout answers allocations found running templates
	// re-rendered after their tasks started (rather than a source's change).
	StaleRenders bool
	Question     *restart.Question
	Progress     Progress
	Events       []restart.Event
	Outbox       *restart.Notifications
}

// Progress says how far a restart or a fleet got.
type Progress struct {
	Allocs    int `json:"allocs"`
	Restarted int `json:"restarted"`
	Failed    int `json:"failed"`
	Skipped   int `json:"skipped"`
	Batch     int `json:"batch"`
	Batches   int `json:"batches"`
	// A fleet's jobs and how each ended so far.
	Jobs      int `json:"jobs,omitempty"`
	Succeeded int `json:"succeeded,omitempty"`
	Canceled  int `json:"canceled,omitempty"`
	Running   int `json:"running,omitempty"`
}

// RestartSubject is a restart record as notifications see it.
func RestartSubject(r *restart.Record) *Subject {
	s := &Subject{Kind: steer.KindRestart, ID: r.ID, Namespace: r.Namespace, Region: r.Region, JobID: r.JobID,
		Status: r.Status, Reason: r.Reason, Fleet: r.Fleet, Question: r.Question, Events: r.Events, Outbox: r.Notify}
	for _, t := range r.Triggers {
		s.Changes = append(s.Changes, t.String())
		s.StaleRenders = s.StaleRenders || t.Destination != ""
	}
	p := &s.Progress
	p.Allocs, p.Batch, p.Batches = len(r.Allocs), r.CurrentBatch, r.Batches
	for _, a := range r.Allocs {
		switch a.State {
		case restart.AllocDone:
			p.Restarted++
		case restart.AllocFailed:
			p.Failed++
		case restart.AllocSkipped:
			p.Skipped++
		}
	}
	return s
}

// FleetSubject is a fleet record as notifications see it.
func FleetSubject(r *fleet.Record) *Subject {
	s := &Subject{Kind: steer.KindFleet, ID: r.ID, Namespace: r.Namespace, Status: r.Status, Reason: r.Reason,
		Question: r.Question, Events: r.Events, Outbox: r.Notify}
	p := &s.Progress
	p.Jobs = len(r.Jobs)
	for _, j := range r.Jobs {
		switch j.Status {
		case fleet.JobSucceeded:
			p.Succeeded++
		case fleet.JobFailed:
			p.Failed++
		case fleet.JobSkipped:
			p.Skipped++
		case fleet.JobCanceled:
			p.Canceled++
		case fleet.JobRunning:
			p.Running++
		}
	}
	return s
}
