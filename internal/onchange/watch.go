package onchange

import (
	"fmt"
	"sort"
	"strings"
)

// watchAuto is what "auto" watches: every source the templates read, once each, in the
// order they are first read.
func watchAuto(reads []found) []Watched {
	var out []Watched
	index := map[Source]int{}
	for _, f := range reads {
		i, ok := index[f.source]
		if !ok {
			i = len(out)
			index[f.source] = i
			out = append(out, Watched{Source: f.source})
		}
		out[i].Reads = append(out[i].Reads, f.read)
	}
	return out
}

// watchExplicit watches the sources the meta names, each with the templates that read it;
// a source a template reads that none of them covers is listed as not watched.
func watchExplicit(explicit []Source, reads []found, not []NotWatched) ([]Watched, []NotWatched) {
	out := make([]Watched, len(explicit))
	for i, src := range explicit {
		out[i] = Watched{Source: src, Explicit: true}
	}
	for _, f := range reads {
		covered := false
		for i := range out {
			if covers(out[i].Source, f.source) {
				out[i].Reads = append(out[i].Reads, f.read)
				covered = true
			}
		}
		if !covered {
			not = append(not, NotWatched{
				Task: f.read.Task, Template: f.read.Template, Destination: f.read.Destination,
				What:   f.source.String(),
				Reason: "not in the sources of " + KeyOnChange + ", which replace what auto would watch",
			})
		}
	}
	return out, not
}

// covers reports whether watching w sees a change of s: the same source, or s under the
// prefix w, in the same namespace, region, partition and datacenter.
func covers(w, s Source) bool {
	if w == s {
		return true
	}
	if w.Kind != NomadPrefix && w.Kind != ConsulPrefix || w.Kind.Nomad() != s.Kind.Nomad() {
		return false
	}
	return w.Namespace == s.Namespace && w.Region == s.Region && w.Partition == s.Partition &&
		w.Datacenter == s.Datacenter && strings.HasPrefix(s.Path, w.Path)
}

// warnings are what works, but likely not as the job's author means.
func warnings(g Group) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range g.Watched {
		for _, r := range w.Reads {
			id := fmt.Sprintf("%s/%d", r.Task, r.Template)
			if seen[id] {
				continue
			}
			if act := nomadActs(r.ChangeMode); act != "" {
				seen[id] = true
				out = append(out, fmt.Sprintf("task %q template %s has change_mode %q: when a watched source it reads changes, Nomad %s in every allocation at once, before any rollout; set change_mode = \"noop\" and let the rollout restart them in batches",
					r.Task, templateName(r.Template, r.Destination), r.ChangeMode, act))
			}
		}
	}
	if g.OptedIn() && len(g.Problems) == 0 && len(g.Watched) == 0 && len(g.Followed) == 0 {
		out = append(out, "opted in, but no template reads a Nomad variable or Consul key the agent can watch, and none is followed by its renders, so nothing rolls this group: see what is not watched or followed, or name the sources in "+KeyOnChange)
	}
	return out
}

// nomadActs is what Nomad itself does on a re-render with a template's change mode, or
// "" when it only writes the file (noop).
func nomadActs(mode string) string {
	switch mode {
	case "restart":
		return "restarts the task"
	case "signal":
		return "signals the task"
	case "script":
		return "runs the change script"
	}
	return ""
}

// taskMetaProblems reports nomad-restart keys in a task's meta, which the agent does not
// read: an option its author meant would otherwise be silently dropped.
func taskMetaProblems(tg GroupSpec) []Problem {
	var out []Problem
	for _, task := range tg.Tasks {
		var keys []string
		for k := range task.Meta {
			if strings.HasPrefix(k, MetaPrefix) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			out = append(out, Problem{
				Key: k, Value: task.Meta[k], Level: fmt.Sprintf("task %q", task.Name),
				Reason: "a task's meta is not read: move it to the group's or the job's meta",
			})
		}
	}
	return out
}
