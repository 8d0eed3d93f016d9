package health

import (
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Nomad's defaults for a group's update block (api.DefaultUpdateStrategy).
const (
	DefaultMinHealthyTime  = 10 * time.Second
	DefaultHealthyDeadline = 5 * time.Minute
)

// On-update values of a check, as Nomad names them.
const (
	OnUpdateRequireHealthy = "require_healthy"
	OnUpdateIgnoreWarnings = "ignore_warnings"
	OnUpdateIgnore         = "ignore"
)

// CheckSpec is a check a group defines: what the gate expects to see for each allocation.
type CheckSpec struct {
	Provider Provider
	// Service is the service's name, as the job defines it (it may hold ${...} variables
	// until AllocChecks interpolates it for one allocation).
	Service string
	// Task owns the service; empty for group services.
	Task string
	// PortLabel is the service's port label, part of the ID Nomad registers it under.
	PortLabel string
	// Name is the check's name; Nomad names unnamed checks `service: "<service>" check`.
	Name string
	// OnUpdate is require_healthy, ignore_warnings or ignore (inherited from the service).
	OnUpdate string
	// Interval is how often the check runs, the pace to poll its result at; Timeout bounds
	// one run. With FailuresBeforeCritical (Consul's threshold: that many failed runs in a
	// row before a passing check turns critical) they bound how long a status from before a
	// restart can outlive it.
	Interval, Timeout      time.Duration
	FailuresBeforeCritical int
	// InitialStatus is the status Consul gives the check when it is registered, before it
	// runs ("" is critical).
	InitialStatus string
}

// GroupChecks lists the checks of the group's services (group-level first, then tasks in
// the job's order), with Nomad's defaults filled in: the names Nomad gives unnamed
// services and checks, the consul provider, and on_update inherited from the service.
// It returns nil for an unknown group.
func GroupChecks(spec *onchange.JobSpec, group string) []CheckSpec {
	tg, ok := spec.Group(group)
	if !ok {
		return nil
	}
	jobName := spec.Name
	var out []CheckSpec
	add := func(task string, svcs []onchange.ServiceSpec) {
		for _, s := range svcs {
			name := canonicalServiceName(jobName, group, task, s.Name)
			provider := ProviderConsul
			if s.Provider == string(ProviderNomad) {
				provider = ProviderNomad
			}
			for _, c := range s.Checks {
				spec := CheckSpec{Provider: provider, Service: name, Task: task, PortLabel: s.PortLabel,
					Name: c.Name, OnUpdate: c.OnUpdate, Interval: c.Interval, Timeout: c.Timeout,
					FailuresBeforeCritical: c.FailuresBeforeCritical, InitialStatus: c.InitialStatus}
				if spec.Name == "" {
					spec.Name = fmt.Sprintf("service: %q check", name)
				}
				if spec.OnUpdate == "" {
					spec.OnUpdate = s.OnUpdate
				}
				if spec.OnUpdate == "" {
					spec.OnUpdate = OnUpdateRequireHealthy
				}
				out = append(out, spec)
			}
		}
	}
	add("", tg.Services)
	for _, t := range tg.Tasks {
		add(t.Name, t.Services)
	}
	return out
}

// canonicalServiceName is the name Nomad gives a service: its own, else (as
// api.Service.Canonicalize names services) <job>-<group>[-<task>].
func canonicalServiceName(jobName, group, task, name string) string {
	switch {
	case name != "":
		return name
	case task != "":
		return fmt.Sprintf("%s-%s-%s", jobName, group, task)
	}
	return fmt.Sprintf("%s-%s", jobName, group)
}

// Providers reports which providers' checks the specs need.
func Providers(specs []CheckSpec) (nomad, consul bool) {
	for _, s := range specs {
		switch s.Provider {
		case ProviderNomad:
			nomad = true
		case ProviderConsul:
			consul = true
		}
	}
	return nomad, consul
}

// PollInterval is the pace to poll Nomad-native check results at: the shortest interval
// of the specs' Nomad checks (so a failure is seen within one run of the check), or Nomad's
// ten seconds when none says.
func PollInterval(specs []CheckSpec) time.Duration {
	var d time.Duration
	for _, s := range specs {
		if s.Provider == ProviderNomad && s.Interval > 0 && (d == 0 || s.Interval < d) {
			d = s.Interval
		}
	}
	if d == 0 {
		d = 10 * time.Second
	}
	return d
}

// Defaults returns the group's min_healthy_time and healthy_deadline from its update block,
// then the job's, else Nomad's defaults (10s, 5m); and what -health auto means for the
// group: restart.HealthChecks when it defines checks, restart.HealthRunning when it defines none or when its
// update block says health_check = "task_states" (its operators chose not to trust the
// checks for rollouts).
func Defaults(spec *onchange.JobSpec, group string) (minHealthy, deadline time.Duration, mode restart.HealthMode) {
	minHealthy, deadline = DefaultMinHealthyTime, DefaultHealthyDeadline
	var healthCheck string
	// The job's block first, so that the group's own values win.
	var updates []*onchange.UpdateSpec
	if spec != nil {
		updates = append(updates, spec.Update)
	}
	if tg, ok := spec.Group(group); ok {
		updates = append(updates, tg.Update)
	}
	for _, u := range updates {
		if u == nil {
			continue
		}
		if u.MinHealthyTime != nil {
			minHealthy = *u.MinHealthyTime
		}
		if u.HealthyDeadline != nil && *u.HealthyDeadline > 0 {
			deadline = *u.HealthyDeadline
		}
		if u.HealthCheck != "" {
			healthCheck = u.HealthCheck
		}
	}
	mode = restart.HealthRunning
	if len(GroupChecks(spec, group)) > 0 && healthCheck != "task_states" {
		mode = restart.HealthChecks
	}
	return minHealthy, deadline, mode
}

// ResolveMode turns restart.HealthAuto into restart.HealthChecks when any of the groups
// would use checks (see Defaults), else restart.HealthRunning; other modes are returned as
// they are.
func ResolveMode(m restart.HealthMode, spec *onchange.JobSpec, groups []string) restart.HealthMode {
	if m != restart.HealthAuto && m != "" {
		return m
	}
	for _, g := range groups {
		if _, _, gm := Defaults(spec, g); gm == restart.HealthChecks {
			return restart.HealthChecks
		}
	}
	return restart.HealthRunning
}

// RunningTimes gives -health running each group's healthy deadline from its update block
// (Nomad's healthy_deadline, the bound of a deployment's wait for the same thing) where
// -healthy-deadline is not given. The min-healthy time stays the flag's (none by default):
// without checks there is nothing to watch stay healthy but the tasks themselves.
func RunningTimes(spec *restart.Spec, job *onchange.JobSpec, groups []string) {
	if spec.HealthyDeadlineGiven {
		return
	}
	spec.GroupHealth = map[string]restart.GroupHealth{}
	for _, g := range groups {
		_, deadline, _ := Defaults(job, g)
		if deadline <= spec.MinHealthyTime {
			deadline = spec.HealthyDeadline // the flag's min-healthy time needs room
		}
		spec.GroupHealth[g] = restart.GroupHealth{MinHealthyTime: spec.MinHealthyTime, HealthyDeadline: deadline}
	}
}

// LongRunning drops the tasks the job defines as ephemeral (prestart, non-sidecar
// poststart, poststop hooks): they run and finish by design, and the gate must not wait
// for them to be running. Tasks the job does not name are kept.
func LongRunning(spec *onchange.JobSpec, group string, tasks []string) []string {
	ephemeral := map[string]bool{}
	if tg, ok := spec.Group(group); ok {
		for _, t := range tg.Tasks {
			ephemeral[t.Name] = t.Ephemeral
		}
	}
	out := make([]string, 0, len(tasks))
	for _, t := range tasks {
		if !ephemeral[t] {
			out = append(out, t)
		}
	}
	return out
}
