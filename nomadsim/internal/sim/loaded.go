package sim

import (
	"math"
	"strconv"
	"strings"
)

// A workload whose behaviour depends on the configuration it loaded when it started
// (nomadsim.bad_when): its task reads a Nomad variable's item or a Consul key, and a bad
// value makes its service answer errors and its checks fail. The value is the one the source
// holds when the task starts, as a task with restart { render_templates = true } loads it
// (templates are not evaluated: the sim reads the source itself). Every function runs with
// c.Mu held.

// Meta keys of loaded configuration.
const (
	// MetaBadWhen is "nomad:<path>:<item>=<value>" (a variable of the allocation's
	// namespace) or "consul:<key>=<value>".
	MetaBadWhen = "nomadsim.bad_when"
	// MetaBadErrors is the share of requests a bad instance answers 500 (default 0.3).
	MetaBadErrors = "nomadsim.bad_errors"
)

// defaultBadErrors is the share of requests a bad instance answers 500 by default.
const defaultBadErrors = 0.3

// loadConfig judges, as the task starts, whether it loaded a bad value: it sets tr.bad.
func (tr *taskRun) loadConfig() {
	ar := tr.ar
	tr.bad = 0
	spec, ok := lookupMeta(ar.Alloc.Job, ar.Group, tr.Task, MetaBadWhen)
	if !ok {
		return
	}
	src, want, ok := strings.Cut(strings.TrimSpace(spec), "=")
	if !ok {
		return
	}
	if !tr.ar.c.loadedValueIs(ar.Alloc.Namespace, src, want) {
		return
	}
	tr.bad = defaultBadErrors
	if v, ok := lookupMeta(ar.Alloc.Job, ar.Group, tr.Task, MetaBadErrors); ok {
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f >= 0 && f <= 1 {
			tr.bad = f
		}
	}
}

// loadedValueIs reports whether src (nomad:<path>:<item> or consul:<key>) holds want now.
func (c *Cluster) loadedValueIs(namespace, src, want string) bool {
	switch {
	case strings.HasPrefix(src, "nomad:"):
		path, item, ok := strings.Cut(strings.TrimPrefix(src, "nomad:"), ":")
		if !ok || c.Ext.Vars == nil {
			return false
		}
		items, _, _, found := c.Ext.Vars.Lookup(namespace, path)
		return found && items[item] == want
	case strings.HasPrefix(src, "consul:"):
		v, found := c.Ext.catalog.KVGet(strings.TrimPrefix(src, "consul:"))
		return found && string(v) == want
	}
	return false
}

// badShare is the share of requests the instance on label answers 500: the largest of its
// running tasks' that loaded a bad value (0: none).
func (ar *AllocRun) badShare(label string) float64 {
	share := 0.0
	for _, tr := range ar.Tasks {
		if !tr.proc {
			continue
		}
		for _, svc := range tr.Task.Services {
			if svc != nil && svc.PortLabel == label {
				share = math.Max(share, tr.bad)
			}
		}
	}
	return share
}
