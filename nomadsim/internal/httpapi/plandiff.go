package httpapi

import (
	"fmt"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

// Task-level detail of a plan's job diff, as Nomad's structs/diff.go gives it and the CLI
// prints it ("+/- Task: "main" (forces create/destroy update)", "+/- Config { ... }"):
// tasks added, deleted or edited, and for edited tasks the driver config's flattened
// fields. Other task fields are compared only to mark the task edited.

// taskDiffs compares the tasks of a group in two job versions.
func taskDiffs(prev, next *api.TaskGroup, destructive bool) []*api.TaskDiff {
	old := map[string]*api.Task{}
	if prev != nil {
		for _, t := range prev.Tasks {
			old[t.Name] = t
		}
	}
	annotation := "forces in-place update"
	if destructive {
		annotation = "forces create/destroy update"
	}
	var out []*api.TaskDiff
	seen := map[string]bool{}
	for _, t := range next.Tasks {
		seen[t.Name] = true
		o := old[t.Name]
		switch {
		case o == nil:
			out = append(out, &api.TaskDiff{Type: "Added", Name: t.Name, Annotations: []string{"forces create"}})
		case sim.EqualJSON(o, t):
			// Unchanged tasks are left out of a non-contextual diff.
		default:
			td := &api.TaskDiff{Type: "Edited", Name: t.Name, Annotations: []string{annotation}}
			if cd := configDiff(o.Config, t.Config); cd != nil {
				td.Objects = append(td.Objects, cd)
			}
			out = append(out, td)
		}
	}
	if prev != nil {
		for _, t := range prev.Tasks {
			if !seen[t.Name] {
				out = append(out, &api.TaskDiff{Type: "Deleted", Name: t.Name, Annotations: []string{"forces destroy"}})
			}
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// configDiff is the "Config" object diff of two driver configs, field by flattened key.
func configDiff(old, next map[string]any) *api.ObjectDiff {
	fo, fn := map[string]string{}, map[string]string{}
	flatten("", old, fo)
	flatten("", next, fn)
	keys := map[string]bool{}
	for k := range fo {
		keys[k] = true
	}
	for k := range fn {
		keys[k] = true
	}
	var fields []*api.FieldDiff
	for k := range keys {
		o, inOld := fo[k]
		n, inNew := fn[k]
		switch {
		case !inOld:
			fields = append(fields, &api.FieldDiff{Type: "Added", Name: k, New: n})
		case !inNew:
			fields = append(fields, &api.FieldDiff{Type: "Deleted", Name: k, Old: o})
		case o != n:
			fields = append(fields, &api.FieldDiff{Type: "Edited", Name: k, Old: o, New: n})
		}
	}
	if len(fields) == 0 {
		return nil
	}
	sort.Slice(fields, func(a, b int) bool { return fields[a].Name < fields[b].Name })
	return &api.ObjectDiff{Type: "Edited", Name: "Config", Fields: fields}
}

// flatten writes v's leaves under Nomad's flatmap keys: "a.b" for maps, "args[1]" for
// lists.
func flatten(prefix string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, e, out)
		}
	case []any:
		for i, e := range x {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), e, out)
		}
	case []string:
		for i, e := range x {
			out[fmt.Sprintf("%s[%d]", prefix, i)] = e
		}
	case nil:
	default:
		out[prefix] = fmt.Sprint(x)
	}
}
