// Package onchange reads, from a job's specification alone, what the agent would watch for
// config-change rollouts and how it would roll each group: the consent and options in the
// job's meta (nomad-restart.*), and the Nomad variables and Consul keys its templates read.
//
// It does no I/O: it reads Nomad's api types and answers with data (Explain) that the
// agent acts on and that `watches -explain` and `watches -json` show. Anything it cannot
// read for certain (a path computed at render time, a Vault secret, a template from an
// artifact) is listed as not watched with the reason, never guessed.
package onchange

import (
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Consent is a group's answer to nomad-restart.on-change.
type Consent string

const (
	// ConsentNone: no nomad-restart.on-change, or an empty one; the group is not rolled.
	ConsentNone Consent = ""
	// ConsentAuto: "auto", roll on a change of what the group's templates read.
	ConsentAuto Consent = "auto"
	// ConsentExplicit: a list of sources, which replaces what templates read.
	ConsentExplicit Consent = "explicit"
	// ConsentOff: "off", a group opting out of its job's consent.
	ConsentOff Consent = "off"
	// ConsentRendered: "rendered", roll on Nomad's re-renders of any of the group's
	// templates only, whatever they read.
	ConsentRendered Consent = "rendered"
)

// Watched is a source the group rolls on, and the templates that read it.
type Watched struct {
	Source Source
	// Explicit says the source is named in nomad-restart.on-change.
	Explicit bool `json:",omitempty"`
	// Reads are the templates that read it (for an explicit prefix: read under it). An
	// explicit source no template reads has none.
	Reads []Read `json:",omitempty"`
}

// Group is what the agent would do for one task group.
type Group struct {
	Name    string
	Consent Consent
	// OnChange is nomad-restart.on-change as written (the group's, else the job's).
	OnChange string `json:",omitempty"`
	// Spec is how a rollout restarts the group: run's options read from the meta, with
	// on-error fail by default. Meaningful only when Problems is empty.
	Spec restart.Spec
	// Debounce is how long a rollout waits after the last change of a burst.
	Debounce time.Duration
	// Watched are the sources a change of which rolls the group; with no consent, those
	// that "auto" would watch, so that a job can be explained before it opts in.
	Watched    []Watched    `json:",omitempty"`
	NotWatched []NotWatched `json:",omitempty"`
	// Followed are the templates whose re-renders roll the group (with "auto", those that
	// read something not watched by path; with "rendered", all); with no consent, those
	// "auto" would follow. NotFollowed are those that cannot be, and why.
	Followed    []Followed    `json:",omitempty"`
	NotFollowed []NotFollowed `json:",omitempty"`
	// RenderInterval is how often the files of followed templates are read.
	RenderInterval time.Duration `json:",omitempty"`
	// OnFailure is what a rollout whose batch fails does: stop, or revert the change.
	OnFailure OnFailure `json:",omitempty"`
	// NotRevertible says, with on-failure revert, which changes cannot be reverted and why.
	NotRevertible []string `json:",omitempty"`
	// Warnings are things that work but not as the author likely means.
	Warnings []string `json:",omitempty"`
	// Problems are invalid values and unknown keys; a group with any is never rolled.
	Problems []Problem `json:",omitempty"`
}

// OptedIn reports whether the group consents to rollouts (auto, rendered or explicit).
func (g Group) OptedIn() bool {
	return g.Consent == ConsentAuto || g.Consent == ConsentExplicit || g.Consent == ConsentRendered
}

// Rolls reports whether a change would roll the group: it opted in, its meta is valid,
// and it has something to watch or templates to follow.
func (g Group) Rolls() bool {
	return g.OptedIn() && len(g.Problems) == 0 && (len(g.Watched) > 0 || len(g.Followed) > 0)
}

// RollsOnRenders reports whether re-renders of its followed templates roll the group.
func (g Group) RollsOnRenders() bool {
	return g.OptedIn() && len(g.Problems) == 0 && len(g.Followed) > 0
}

// Explain is what the agent would watch and do for one job, group by group in the job's
// order.
type Explain struct {
	Namespace string
	JobID     string
	Groups    []Group
}

// OptedIn reports whether any group of the job consents to rollouts.
func (e Explain) OptedIn() bool {
	for _, g := range e.Groups {
		if g.OptedIn() {
			return true
		}
	}
	return false
}

// String is a short summary, one line per group.
func (e Explain) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %q (namespace %s)", e.JobID, e.Namespace)
	for _, g := range e.Groups {
		fmt.Fprintf(&b, "\ngroup %q: %s", g.Name, g.summary())
	}
	return b.String()
}

func (g Group) summary() string {
	state := "not opted in"
	switch {
	case g.OptedIn() && len(g.Problems) > 0:
		state = fmt.Sprintf("invalid (%d problems)", len(g.Problems))
	case g.Rolls() && len(g.Watched) == 0:
		state = "rolls on re-renders"
	case g.Rolls():
		state = "rolls on change"
	case g.OptedIn():
		state = "opted in, nothing to watch"
	case g.Consent == ConsentOff:
		state = "opted out"
	}
	return fmt.Sprintf("%s; %d watched, %d not watched, %d followed by renders, %d warnings", state, len(g.Watched), len(g.NotWatched), len(g.Followed), len(g.Warnings))
}

// Analyze reads job (as Nomad's API returns it, or as parsed from a job file) and says, for
// each group, whether and how a change of what its templates read rolls it.
func Analyze(job JobSpec) Explain {
	e := Explain{Namespace: orDefault(job.Namespace), JobID: job.ID}
	for _, tg := range job.Groups {
		e.Groups = append(e.Groups, analyzeGroup(job, tg))
	}
	return e
}

func orDefault(namespace string) string {
	if namespace == "" {
		return "default"
	}
	return namespace
}

// analyzeGroup reads one group: its meta, then its templates' sources.
func analyzeGroup(job JobSpec, tg GroupSpec) Group {
	g := Group{Name: tg.Name}
	meta := groupMeta(job.Meta, tg.Meta)
	opts := readOptions(g.Name, meta)
	g.Spec, g.Debounce, g.RenderInterval, g.Problems = opts.spec, opts.debounce, opts.renderInterval, opts.problems
	g.OnFailure = opts.onFailure
	g.Problems = append(g.Problems, taskMetaProblems(tg)...)

	var reads []found
	dynamic := map[string]bool{}
	for _, task := range tg.Tasks {
		d := defaultsFor(job, tg, &task)
		for i, t := range task.Templates {
			sc := scanTemplate(task.Name, i, t, d)
			reads = append(reads, sc.found...)
			g.NotWatched = append(g.NotWatched, sc.not...)
			dynamic[templateKey(task.Name, i)] = sc.dynamic
		}
	}

	onChange, given := meta[KeyOnChange]
	g.OnChange = strings.TrimSpace(onChange.value)
	consent, explicit, problems := readConsent(onChange, given, defaultsFor(job, tg, nil))
	g.Consent = consent
	// The consent's problems come first: it is the key a reader looks at first.
	g.Problems = append(problems, g.Problems...)
	switch g.Consent {
	case ConsentExplicit:
		g.Watched, g.NotWatched = watchExplicit(explicit, reads, g.NotWatched)
	case ConsentRendered:
		// Re-renders only: what the templates read is not watched by path.
	default:
		g.Watched = watchAuto(reads)
	}
	g.Followed, g.NotFollowed = followTemplates(tg, g.Consent, dynamic)
	g.NotRevertible = notRevertible(g)
	g.Warnings = warnings(g)
	return g
}

// readConsent reads nomad-restart.on-change: none, auto, off, or a comma-separated list of
// sources. An entry that does not read is a problem, and the group then watches nothing.
func readConsent(mv metaValue, given bool, d defaults) (Consent, []Source, []Problem) {
	value := strings.TrimSpace(mv.value)
	switch {
	case !given || value == "":
		return ConsentNone, nil, nil
	case value == string(ConsentAuto):
		return ConsentAuto, nil, nil
	case value == string(ConsentOff):
		return ConsentOff, nil, nil
	case value == string(ConsentRendered):
		return ConsentRendered, nil, nil
	}
	var out []Source
	var problems []Problem
	for _, entry := range strings.Split(value, ",") {
		src, err := parseExplicit(entry, d)
		if err != nil {
			problems = append(problems, Problem{Key: KeyOnChange, Value: mv.value, Level: mv.level, Reason: err.Error()})
			continue
		}
		out = appendUnique(out, src)
	}
	if len(problems) > 0 {
		return ConsentExplicit, nil, problems
	}
	return ConsentExplicit, out, nil
}

// defaultsFor is where a template of task reads by default: the job's namespace and
// region for Nomad variables (Nomad gives consul-template the job's namespace; a client
// reads its own region, the job's), the task's Consul namespace and partition, else the
// group's (Allocation.ConsulNamespaceForTask). task may be nil: the group's.
func defaultsFor(job JobSpec, tg GroupSpec, task *TaskSpec) defaults {
	d := defaults{nomadNamespace: orDefault(job.Namespace), nomadRegion: job.Region}
	consul := tg.Consul
	if task != nil && task.Consul != nil {
		consul = task.Consul
	}
	if consul != nil {
		d.consulNamespace, d.consulPartition = consul.Namespace, consul.Partition
	}
	return d
}

func appendUnique(list []Source, s Source) []Source {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}
