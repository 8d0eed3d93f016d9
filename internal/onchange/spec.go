package onchange

import (
	"slices"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// A job's specification, in the project's own types, so that the rules stay free of Nomad's
// client: cluster builds a JobSpec from the specification Nomad returns (or a job file
// parses into), and no package above cluster handles Nomad's api types. Config-change
// rollouts read its meta and templates; the readiness gate its groups' services, checks,
// update blocks and lifecycle hooks; the engine its shutdown delays.

// JobSpec is a job's full specification: where it runs, its meta and update block, and its
// groups' services, checks, tasks and templates.
type JobSpec struct {
	ID        string
	Name      string // the job's name (its ID when it has none)
	ParentID  string // the periodic or parameterized job that dispatched this one ("")
	Type      string // service, batch, system or sysbatch (service when unset, as Nomad registers it)
	Namespace string // "" is the default namespace
	Region    string
	Meta      map[string]string
	// Update is the job's update block, nil when it has none.
	Update *UpdateSpec
	Groups []GroupSpec
	// Job is the job as the engine plans with it (cluster.Cluster.Job's view), from the
	// same read: one read of a job serves both. Nil when the specification was built
	// without it.
	Job *restart.Job
}

// Group is the task group named name, and whether the job has it (a nil JobSpec has none).
func (s *JobSpec) Group(name string) (GroupSpec, bool) {
	if s == nil {
		return GroupSpec{}, false
	}
	i := slices.IndexFunc(s.Groups, func(g GroupSpec) bool { return g.Name == name })
	if i < 0 {
		return GroupSpec{}, false
	}
	return s.Groups[i], true
}

// GroupSpec is one task group of a JobSpec.
type GroupSpec struct {
	Name string
	// Count is the group's count (Nomad's default 1 when unset).
	Count int
	Meta  map[string]string
	// Consul is the group's consul block, nil when it has none.
	Consul *ConsulSpec
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
	Name string
	Meta map[string]string
	// Consul is the task's consul block, nil when it has none (the group's applies).
	Consul    *ConsulSpec
	Services  []ServiceSpec
	Templates []TemplateSpec
	// Ephemeral says the task runs and finishes by design: a lifecycle hook that is not a
	// sidecar (prestart, poststart, poststop).
	Ephemeral bool
	// ShutdownDelay is the task's shutdown_delay (0: none).
	ShutdownDelay time.Duration
}

// UpdateSpec is an update block's fields that the readiness gate defaults from; nil fields
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
	// Tags are the service's tags, which name the load balancer that reads it (traefik.*,
	// urlprefix-).
	Tags []string
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

// ConsulSpec is where a consul block sends a task's Consul reads.
type ConsulSpec struct {
	Namespace string
	Partition string
}

// TemplateSpec is one template block of a task.
type TemplateSpec struct {
	// Embedded is the template's text (its data); SourcePath is the file on the client it
	// is read from instead.
	Embedded   string
	SourcePath string
	DestPath   string
	// LeftDelim and RightDelim are its delimiters ("": consul-template's {{ and }}).
	LeftDelim, RightDelim string
	// ChangeMode is change_mode as written ("": Nomad's default, restart).
	ChangeMode string
}
