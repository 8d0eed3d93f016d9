package cluster

import (
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// The functions below reduce the api module's types to the facts restarts need. They never
// fail: a field Nomad left out stays at its zero value.

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func u64(p *uint64) uint64 {
	if p == nil {
		return 0
	}
	return *p
}

// convertJob converts a job (or one version of it) from Nomad's API.
func convertJob(j *api.Job) *restart.Job {
	if j == nil {
		return nil
	}
	out := &restart.Job{
		ID:          str(j.ID),
		Namespace:   str(j.Namespace),
		Region:      str(j.Region),
		Type:        str(j.Type),
		Version:     u64(j.Version),
		ModifyIndex: u64(j.ModifyIndex),
		// Nomad's command asks before restarting a multi-region job in one region only
		// when the multiregion block names regions (job_restart.go: len(Regions) > 0).
		MultiRegion: j.Multiregion != nil && len(j.Multiregion.Regions) > 0,
		Datacenters: j.Datacenters,
	}
	if out.Type == "" {
		// Nomad defaults the type on registration; a job read back always has one, but a
		// version written by an old client may not.
		out.Type = api.JobTypeService
	}
	for _, tg := range j.TaskGroups {
		if tg == nil {
			continue
		}
		g := restart.Group{Name: str(tg.Name)}
		if tg.Count != nil {
			g.Count = *tg.Count
		}
		for _, t := range tg.Tasks {
			if t != nil {
				g.Tasks = append(g.Tasks, t.Name)
			}
		}
		out.Groups = append(out.Groups, g)
	}
	return out
}

// convertAlloc converts a full allocation read from /v1/allocation/:id: its list stub's
// facts, plus what only the full allocation carries.
func convertAlloc(a *api.Allocation) *restart.Alloc {
	if a == nil {
		return nil
	}
	// Stub reads the embedded job's type and version without a nil check: leave the job
	// out, and take its version here.
	withoutJob := *a
	withoutJob.Job = nil
	out := convertStub(withoutJob.Stub())
	out.PreviousAllocation = a.PreviousAllocation
	if a.Job != nil {
		// The full allocation embeds the job version it was created from; the stub
		// carries the number only.
		out.JobVersion = u64(a.Job.Version)
	}
	return out
}

// convertStub converts an allocation list stub. Stubs carry TaskStates (with events) but
// not PreviousAllocation.
func convertStub(a *api.AllocationListStub) *restart.Alloc {
	if a == nil {
		return nil
	}
	return &restart.Alloc{
		ID:             a.ID,
		Name:           a.Name,
		Namespace:      a.Namespace,
		JobID:          a.JobID,
		JobVersion:     a.JobVersion,
		Group:          a.TaskGroup,
		NodeID:         a.NodeID,
		NodeName:       a.NodeName,
		DesiredStatus:  a.DesiredStatus,
		ClientStatus:   a.ClientStatus,
		NextAllocation: a.NextAllocation,
		CreateIndex:    a.CreateIndex,
		ModifyIndex:    a.ModifyIndex,
		Tasks:          convertTaskStates(a.TaskStates),
	}
}

func convertStubs(stubs []*api.AllocationListStub) []*restart.Alloc {
	out := make([]*restart.Alloc, 0, len(stubs))
	for _, s := range stubs {
		if a := convertStub(s); a != nil {
			out = append(out, a)
		}
	}
	return out
}

// convertTaskStates returns nil when Nomad reported no task states (an allocation not yet
// received by its client), so that "no tasks known" stays distinct from "no tasks".
func convertTaskStates(states map[string]*api.TaskState) map[string]restart.TaskState {
	if states == nil {
		return nil
	}
	out := make(map[string]restart.TaskState, len(states))
	for name, ts := range states {
		if ts == nil {
			continue
		}
		s := restart.TaskState{
			State:       ts.State,
			Failed:      ts.Failed,
			Restarts:    ts.Restarts,
			LastRestart: ts.LastRestart,
			StartedAt:   ts.StartedAt,
			FinishedAt:  ts.FinishedAt,
		}
		if len(ts.Events) > 0 {
			s.Events = make([]restart.TaskEvent, 0, len(ts.Events))
			for _, ev := range ts.Events {
				if ev != nil {
					s.Events = append(s.Events, convertTaskEvent(ev))
				}
			}
		}
		out[name] = s
	}
	return out
}

// convertTaskEvent keeps Nomad's timestamp: TaskEvent.Time is Unix nanoseconds on Nomad's
// clock (the client node's), to be compared only with other Nomad timestamps.
func convertTaskEvent(ev *api.TaskEvent) restart.TaskEvent {
	msg := ev.DisplayMessage
	if msg == "" {
		msg = ev.Message
	}
	out := restart.TaskEvent{Type: ev.Type, Message: msg}
	if ev.Time != 0 {
		out.Time = time.Unix(0, ev.Time).UTC()
	}
	return out
}
