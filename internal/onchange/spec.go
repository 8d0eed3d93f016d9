package onchange

// What config-change rollouts read of a job's specification, in the project's own types so
// that the rules stay free of Nomad's client: cluster.JobSpec builds a JobSpec from the
// specification Nomad returns (or a job file parses into).

// JobSpec is a job as config-change rollouts read it: where it runs, its meta, and its
// groups' tasks' templates.
type JobSpec struct {
	ID        string
	Namespace string // "" is the default namespace
	Region    string
	Meta      map[string]string
	Groups    []GroupSpec
}

// GroupSpec is one task group of a JobSpec.
type GroupSpec struct {
	Name string
	Meta map[string]string
	// Consul is the group's consul block, nil when it has none.
	Consul *ConsulSpec
	Tasks  []TaskSpec
}

// TaskSpec is one task of a GroupSpec.
type TaskSpec struct {
	Name string
	Meta map[string]string
	// Consul is the task's consul block, nil when it has none (the group's applies).
	Consul    *ConsulSpec
	Templates []TemplateSpec
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
