package cluster

import (
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// NewJobSpec is the job's specification in the project's own types (onchange.JobSpec),
// from a job of the api module (Nomad's answer, or a job file parsed): the one place its
// services, checks, update blocks, lifecycle hooks, meta and templates are read. namespace
// is the one the job was read in, for the planning view of a specification that names
// none ("": as it names).
func NewJobSpec(job *api.Job) *onchange.JobSpec { return jobSpec(job, "") }

func jobSpec(job *api.Job, namespace string) *onchange.JobSpec {
	if job == nil {
		return &onchange.JobSpec{Type: api.JobTypeService}
	}
	out := &onchange.JobSpec{ID: str(job.ID), Name: str(job.ID), ParentID: str(job.ParentID), Type: str(job.Type),
		Namespace: str(job.Namespace), Region: str(job.Region), Meta: job.Meta, Update: updateSpec(job.Update)}
	if job.Name != nil {
		out.Name = *job.Name
	}
	if out.Type == "" {
		out.Type = api.JobTypeService
	}
	out.Job = convertJob(job)
	if out.Job.Namespace == "" {
		out.Job.Namespace = namespace
	}
	for _, tg := range job.TaskGroups {
		if tg != nil {
			out.Groups = append(out.Groups, groupSpec(tg))
		}
	}
	return out
}

func groupSpec(tg *api.TaskGroup) onchange.GroupSpec {
	g := onchange.GroupSpec{Name: str(tg.Name), Count: 1, Meta: tg.Meta, Consul: consulSpec(tg.Consul),
		Update: updateSpec(tg.Update), Services: serviceSpecs(tg.Services)}
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
		task := onchange.TaskSpec{Name: t.Name, Meta: t.Meta, Consul: consulSpec(t.Consul), Services: serviceSpecs(t.Services),
			Ephemeral: t.Lifecycle != nil && !t.Lifecycle.Sidecar, ShutdownDelay: t.ShutdownDelay}
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
	return g
}

func updateSpec(u *api.UpdateStrategy) *onchange.UpdateSpec {
	if u == nil {
		return nil
	}
	return &onchange.UpdateSpec{MinHealthyTime: u.MinHealthyTime, HealthyDeadline: u.HealthyDeadline, HealthCheck: str(u.HealthCheck)}
}

func serviceSpecs(svcs []*api.Service) []onchange.ServiceSpec {
	var out []onchange.ServiceSpec
	for _, s := range svcs {
		if s == nil {
			continue
		}
		svc := onchange.ServiceSpec{Name: s.Name, Provider: s.Provider, PortLabel: s.PortLabel, OnUpdate: s.OnUpdate, Tags: s.Tags}
		for _, c := range s.Checks {
			svc.Checks = append(svc.Checks, onchange.CheckSpec{Name: c.Name, Type: c.Type, OnUpdate: c.OnUpdate, InitialStatus: c.InitialStatus,
				Interval: c.Interval, Timeout: c.Timeout, FailuresBeforeCritical: c.FailuresBeforeCritical})
		}
		out = append(out, svc)
	}
	return out
}

func consulSpec(c *api.Consul) *onchange.ConsulSpec {
	if c == nil {
		return nil
	}
	return &onchange.ConsulSpec{Namespace: c.Namespace, Partition: c.Partition}
}
