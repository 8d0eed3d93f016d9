package cluster

import (
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// What the layers above read of a job's specification, in the project's own types: the
// health gate its groups' services, checks, update blocks and lifecycle hooks
// (JobSpec.Groups), config-change rollouts its meta and templates (JobSpec.OnChange). No
// package above this one handles Nomad's api types.

// GroupSpec is a task group as the health gate reads it.
type GroupSpec struct {
	Name string
	// Count is the group's count (Nomad's default 1 when unset).
	Count int
	Meta  map[string]string
	// Update is the group's own update block, nil when it has none (JobSpec.Update is the
	// job's).
	Update   *UpdateSpec
	Services []ServiceSpec
	Tasks    []TaskSpec
	// ShutdownDelay is the group's shutdown_delay: how long Nomad waits between taking its
	// services out of the catalog and stopping (or restarting) its tasks (0: none).
	ShutdownDelay time.Duration
}

// TaskSpec is one task of a GroupSpec.
type TaskSpec struct {
	Name     string
	Meta     map[string]string
	Services []ServiceSpec
	// Ephemeral says the task runs and finishes by design: a lifecycle hook that is not a
	// sidecar (prestart, poststart, poststop).
	Ephemeral bool
	// ShutdownDelay is the task's shutdown_delay (0: none).
	ShutdownDelay time.Duration
}

// UpdateSpec is an update block's fields that the health gate defaults from; nil fields
// are unset.
type UpdateSpec struct {
	MinHealthyTime  *time.Duration
	HealthyDeadline *time.Duration
	// HealthCheck is health_check: checks, task_states or manual ("": unset).
	HealthCheck string
}

// ServiceSpec is a service block: Name as the job writes it ("" when Nomad names it).
type ServiceSpec struct {
	Name      string
	Provider  string // "consul" (also when unset) or "nomad"
	PortLabel string
	OnUpdate  string
	Checks    []CheckSpec
}

// CheckSpec is a check block of a service.
type CheckSpec struct {
	Name                   string
	Type                   string
	OnUpdate               string
	InitialStatus          string
	Interval, Timeout      time.Duration
	FailuresBeforeCritical int
}

// Name is the job's name (its ID when it has none).
func (s *JobSpec) Name() string {
	if s == nil || s.job == nil {
		return ""
	}
	if s.job.Name != nil {
		return *s.job.Name
	}
	return str(s.job.ID)
}

// ParentID is the ID of the periodic or parameterized job that dispatched this one ("").
func (s *JobSpec) ParentID() string {
	if s == nil || s.job == nil {
		return ""
	}
	return str(s.job.ParentID)
}

// Type is the job's type (service, batch, system, sysbatch; service when unset, as Nomad
// registers it).
func (s *JobSpec) Type() string {
	if s == nil || s.job == nil || str(s.job.Type) == "" {
		return api.JobTypeService
	}
	return *s.job.Type
}

// Region is the job's region ("" when unset).
func (s *JobSpec) Region() string {
	if s == nil || s.job == nil {
		return ""
	}
	return str(s.job.Region)
}

// Meta is the job's own meta.
func (s *JobSpec) Meta() map[string]string {
	if s == nil || s.job == nil {
		return nil
	}
	return s.job.Meta
}

// Update is the job's update block, nil when it has none.
func (s *JobSpec) Update() *UpdateSpec {
	if s == nil || s.job == nil {
		return nil
	}
	return updateSpec(s.job.Update)
}

// Group is the task group named name, and whether the job has it.
func (s *JobSpec) Group(name string) (GroupSpec, bool) {
	if s == nil || s.job == nil {
		return GroupSpec{}, false
	}
	for _, tg := range s.job.TaskGroups {
		if tg != nil && tg.Name != nil && *tg.Name == name {
			return groupSpec(tg), true
		}
	}
	return GroupSpec{}, false
}

func groupSpec(tg *api.TaskGroup) GroupSpec {
	g := GroupSpec{Name: str(tg.Name), Count: 1, Meta: tg.Meta, Update: updateSpec(tg.Update), Services: serviceSpecs(tg.Services)}
	if tg.Count != nil {
		g.Count = *tg.Count
	}
	if tg.ShutdownDelay != nil {
		g.ShutdownDelay = *tg.ShutdownDelay
	}
	for _, t := range tg.Tasks {
		if t == nil {
			continue
		}
		g.Tasks = append(g.Tasks, TaskSpec{Name: t.Name, Meta: t.Meta, Services: serviceSpecs(t.Services),
			Ephemeral: t.Lifecycle != nil && !t.Lifecycle.Sidecar, ShutdownDelay: t.ShutdownDelay})
	}
	return g
}

func updateSpec(u *api.UpdateStrategy) *UpdateSpec {
	if u == nil {
		return nil
	}
	return &UpdateSpec{MinHealthyTime: u.MinHealthyTime, HealthyDeadline: u.HealthyDeadline, HealthCheck: str(u.HealthCheck)}
}

func serviceSpecs(svcs []*api.Service) []ServiceSpec {
	var out []ServiceSpec
	for _, s := range svcs {
		if s == nil {
			continue
		}
		svc := ServiceSpec{Name: s.Name, Provider: s.Provider, PortLabel: s.PortLabel, OnUpdate: s.OnUpdate}
		for _, c := range s.Checks {
			svc.Checks = append(svc.Checks, CheckSpec{Name: c.Name, Type: c.Type, OnUpdate: c.OnUpdate, InitialStatus: c.InitialStatus,
				Interval: c.Interval, Timeout: c.Timeout, FailuresBeforeCritical: c.FailuresBeforeCritical})
		}
		out = append(out, svc)
	}
	return out
}

// OnChange is the job as config-change rollouts read it: its meta and its tasks' templates.
func (s *JobSpec) OnChange() onchange.JobSpec {
	if s == nil || s.job == nil {
		return onchange.JobSpec{}
	}
	j := s.job
	out := onchange.JobSpec{ID: str(j.ID), Namespace: str(j.Namespace), Region: str(j.Region), Meta: j.Meta}
	for _, tg := range j.TaskGroups {
		if tg == nil {
			continue
		}
		g := onchange.GroupSpec{Name: str(tg.Name), Meta: tg.Meta, Consul: consulSpec(tg.Consul)}
		for _, t := range tg.Tasks {
			if t == nil {
				continue
			}
			task := onchange.TaskSpec{Name: t.Name, Meta: t.Meta, Consul: consulSpec(t.Consul)}
			for _, tp := range t.Templates {
				if tp == nil {
					continue
				}
				task.Templates = append(task.Templates, onchange.TemplateSpec{
					Embedded: str(tp.EmbeddedTmpl), SourcePath: str(tp.SourcePath), DestPath: str(tp.DestPath),
					LeftDelim: str(tp.LeftDelim), RightDelim: str(tp.RightDelim), ChangeMode: str(tp.ChangeMode),
				})
			}
			g.Tasks = append(g.Tasks, task)
		}
		out.Groups = append(out.Groups, g)
	}
	return out
}

func consulSpec(c *api.Consul) *onchange.ConsulSpec {
	if c == nil {
		return nil
	}
	return &onchange.ConsulSpec{Namespace: c.Namespace, Partition: c.Partition}
}
