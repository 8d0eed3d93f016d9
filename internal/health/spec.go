package health

import (
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"
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
	// Interval is how often the client runs the check, the pace to poll its result at.
	Interval time.Duration
}

// GroupChecks lists the checks of the group's services (group-level first, then tasks in
// the job's order), with Nomad's defaults filled in: the names Nomad gives unnamed
// services and checks, the consul provider, and on_update inherited from the service.
// It returns nil for an unknown group.
func GroupChecks(job *api.Job, group string) []CheckSpec {
	tg := lookupGroup(job, group)
	if tg == nil {
		return nil
	}
	jobName := ""
	if job.Name != nil {
		jobName = *job.Name
	} else if job.ID != nil {
		jobName = *job.ID
	}
	var out []CheckSpec
	add := func(task string, svcs []*api.Service) {
		for _, s := range svcs {
			if s == nil {
				continue
			}
			name := s.Name
			if name == "" {
				// As api.Service.Canonicalize names services.
				if task != "" {
					name = fmt.Sprintf("%s-%s-%s", jobName, group, task)
				} else {
					name = fmt.Sprintf("%s-%s", jobName, group)
				}
			}
			provider := ProviderConsul
			if s.Provider == string(ProviderNomad) {
				provider = ProviderNomad
			}
			for _, c := range s.Checks {
				spec := CheckSpec{Provider: provider, Service: name, Task: task, PortLabel: s.PortLabel,
					Name: c.Name, OnUpdate: c.OnUpdate, Interval: c.Interval}
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
		if t != nil {
			add(t.Name, t.Services)
		}
	}
	return out
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
// group: ModeChecks when it defines checks, ModeRunning when it defines none or when its
// update block says health_check = "task_states" (its operators chose not to trust the
// checks for rollouts).
func Defaults(job *api.Job, group string) (minHealthy, deadline time.Duration, mode Mode) {
	minHealthy, deadline = DefaultMinHealthyTime, DefaultHealthyDeadline
	var healthCheck string
	var updates []*api.UpdateStrategy
	if job != nil {
		// The job's block first, so that the group's own values win.
		updates = append(updates, job.Update)
	}
	if tg := lookupGroup(job, group); tg != nil {
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
		if u.HealthCheck != nil && *u.HealthCheck != "" {
			healthCheck = *u.HealthCheck
		}
	}
	mode = ModeRunning
	if len(GroupChecks(job, group)) > 0 && healthCheck != "task_states" {
		mode = ModeChecks
	}
	return minHealthy, deadline, mode
}

// ResolveMode turns ModeAuto into ModeChecks when any of the groups would use checks (see
// Defaults), else ModeRunning; other modes are returned as they are.
func ResolveMode(m Mode, job *api.Job, groups []string) Mode {
	if m != ModeAuto && m != "" {
		return m
	}
	for _, g := range groups {
		if _, _, gm := Defaults(job, g); gm == ModeChecks {
			return ModeChecks
		}
	}
	return ModeRunning
}

func lookupGroup(job *api.Job, group string) *api.TaskGroup {
	if job == nil {
		return nil
	}
	for _, tg := range job.TaskGroups {
		if tg != nil && tg.Name != nil && *tg.Name == group {
			return tg
		}
	}
	return nil
}
