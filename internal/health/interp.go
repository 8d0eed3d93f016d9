package health

import (
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// AllocChecks is GroupChecks for one allocation, with the ${...} variables of service and
// check names interpolated as the Nomad client does when it registers them (the job,
// group, task, namespace, region and allocation variables, and NOMAD_META_*). A reference
// to anything else (node attributes, ports, ...) stays as written; the gate then matches
// that check by its service and position instead of its name, and Unresolved reports it.
func AllocChecks(spec *onchange.JobSpec, a *restart.Alloc) []CheckSpec {
	if a == nil {
		return nil
	}
	specs := GroupChecks(spec, a.Group)
	for i := range specs {
		env := allocEnv(spec, a, specs[i].Task)
		specs[i].Service = interpolate(specs[i].Service, env)
		specs[i].Name = interpolate(specs[i].Name, env)
	}
	return specs
}

// ServiceName is the name under which Nomad registers, for the allocation, a service of
// its group (task "") or of one of its tasks: the job's name for it with the variables
// Nomad's client resolves from the job and the allocation, or Nomad's default name.
func ServiceName(spec *onchange.JobSpec, a *restart.Alloc, task string, s onchange.ServiceSpec) string {
	jobName := ""
	if spec != nil {
		jobName = spec.Name
	}
	return interpolate(canonicalServiceName(jobName, a.Group, task, s.Name), allocEnv(spec, a, task))
}

// Unresolved reports whether a name still holds a ${...} reference.
func Unresolved(name string) bool {
	i := strings.Index(name, "${")
	return i >= 0 && strings.IndexByte(name[i:], '}') > 2
}

// interpolate replaces each ${NAME} whose NAME env holds, and keeps the others as written.
func interpolate(s string, env map[string]string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			break
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			break
		}
		b.WriteString(s[:i])
		ref := s[i : i+j+1]
		if v, ok := env[ref[2:len(ref)-1]]; ok {
			b.WriteString(v)
		} else {
			b.WriteString(ref)
		}
		s = s[i+j+1:]
	}
	b.WriteString(s)
	return b.String()
}

// allocEnv is the part of a task's environment that Nomad computes from the job and the
// allocation alone.
func allocEnv(spec *onchange.JobSpec, a *restart.Alloc, task string) map[string]string {
	env := map[string]string{
		"NOMAD_ALLOC_ID":       a.ID,
		"NOMAD_ALLOC_NAME":     a.Name,
		"NOMAD_GROUP_NAME":     a.Group,
		"NOMAD_JOB_ID":         a.JobID,
		"NOMAD_NAMESPACE":      a.Namespace,
		"NOMAD_SHORT_ALLOC_ID": shortID(a.ID),
	}
	if task != "" {
		env["NOMAD_TASK_NAME"] = task
	}
	if i := strings.LastIndexByte(a.Name, '['); i >= 0 && strings.HasSuffix(a.Name, "]") {
		env["NOMAD_ALLOC_INDEX"] = a.Name[i+1 : len(a.Name)-1]
	}
	if spec == nil {
		return env
	}
	if name := spec.Name; name != "" {
		env["NOMAD_JOB_NAME"] = name
	}
	if region := spec.Region; region != "" {
		env["NOMAD_REGION"] = region
	}
	if parent := spec.ParentID; parent != "" {
		env["NOMAD_JOB_PARENT_ID"] = parent
	}
	// Meta merges job, then group, then task (the innermost wins), under both the key as
	// written and its upper-case form, as the client's task environment does.
	metas := []map[string]string{spec.Meta}
	if tg, ok := spec.Group(a.Group); ok {
		metas = append(metas, tg.Meta)
		for _, t := range tg.Tasks {
			if t.Name == task {
				metas = append(metas, t.Meta)
			}
		}
	}
	for _, m := range metas {
		for k, v := range m {
			env["NOMAD_META_"+k] = v
			env["NOMAD_META_"+strings.ToUpper(k)] = v
		}
	}
	return env
}

func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
