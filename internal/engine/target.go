package engine

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// errTargetingUnsupported is the answer for a cluster client that cannot evaluate -filter or
// list nodes.
var errTargetingUnsupported = errors.New("this cluster cannot evaluate -filter, -node or -datacenter; drop them")

// TargetError refuses a -node or -datacenter that names what does not exist, where
// Nomad's command would restart nothing without a word: a node no node of the cluster is
// (by ID prefix or name), a datacenter no node is in, or one the job does not run in.
type TargetError struct {
	Flag, Value string
	// OfJob says the name exists in the cluster but not for this job (a datacenter the
	// job does not run in): a fleet skips such a job rather than failing it.
	OfJob bool
	text  string
}

func (e *TargetError) Error() string { return e.text }

// target narrows the selected allocations to -filter, -node and -datacenter, and puts
// those out of service first with -unhealthy-first. The allocations left out are skipped
// with the reason. A node or datacenter named that no allocation kept is on is looked up
// in the cluster: one that does not exist is refused (TargetError), one that exists leaves
// an empty selection, which Nomad's command answers with "No allocations to restart".
func (e *Engine) target(ctx context.Context, spec restart.Spec, job *restart.Job, kept []*restart.Alloc) ([]*restart.Alloc, []Skip, error) {
	if spec.Filter == "" && len(spec.Nodes) == 0 && len(spec.Datacenters) == 0 {
		return orderUnhealthyFirst(spec, kept), nil, nil
	}
	var matching map[string]bool
	if spec.Filter != "" {
		m, err := e.cluster.MatchingAllocations(ctx, job.Namespace, job.ID, spec.Filter)
		switch {
		case errors.Is(err, cluster.ErrNotSupported):
			return nil, nil, errTargetingUnsupported
		case err != nil:
			return nil, nil, filterError(spec.Filter, err)
		}
		matching = m
	}
	nodes := &nodeList{e: e}
	var dcOf map[string]string
	if len(spec.Datacenters) > 0 {
		list, err := nodes.get(ctx)
		switch {
		case errors.Is(err, cluster.ErrNotSupported):
			return nil, nil, errTargetingUnsupported
		case err != nil:
			return nil, nil, fmt.Errorf("listing nodes for -datacenter: %w; the token needs node:read", err)
		}
		dcOf = make(map[string]string, len(list))
		for _, n := range list {
			dcOf[n.ID] = n.Datacenter
		}
	}
	if err := e.checkTargetsExist(ctx, spec, job, kept, nodes, dcOf); err != nil {
		return nil, nil, err
	}
	var out []*restart.Alloc
	var skipped []Skip
	for _, a := range kept {
		why := ""
		switch {
		case matching != nil && !matching[a.ID]:
			why = "it does not match -filter"
		case len(spec.Nodes) > 0 && !onNode(a, spec.Nodes):
			why = fmt.Sprintf("its node %s is not one of -node %s", short(a.NodeID), strings.Join(spec.Nodes, ", "))
		case dcOf != nil && !contains(spec.Datacenters, dcOf[a.NodeID]):
			why = fmt.Sprintf("its datacenter %q is not one of -datacenter %s", dcOf[a.NodeID], strings.Join(spec.Datacenters, ", "))
		}
		if why != "" {
			skipped = append(skipped, Skip{Alloc: a, Reason: why})
			continue
		}
		out = append(out, a)
	}
	return orderUnhealthyFirst(spec, out), skipped, nil
}

// checkTargetsExist refuses each -node and -datacenter that none of the kept allocations is
// on and that does not exist, from what Nomad knows: its nodes list and the job's
// datacenters. A name an allocation is on exists; the nodes are listed only when a name is
// on none. Without the right to list nodes (node:read), -node is not checked: the plan then
// is Nomad's, empty when the name is wrong.
func (e *Engine) checkTargetsExist(ctx context.Context, spec restart.Spec, job *restart.Job, kept []*restart.Alloc, nodes *nodeList, dcOf map[string]string) error {
	for _, name := range spec.Nodes {
		if slices.ContainsFunc(kept, func(a *restart.Alloc) bool { return onNode(a, []string{name}) }) {
			continue
		}
		list, err := nodes.get(ctx)
		switch {
		case errors.Is(err, cluster.ErrNotSupported), errors.Is(err, cluster.ErrPermissionDenied):
			// -datacenter would have needed the list already: nothing else is left to check.
			e.log.Debug("not checking that -node names a node: the nodes cannot be listed", "node", name, "err", err)
			return nil
		case err != nil:
			return fmt.Errorf("listing nodes to check -node %q: %w", name, err)
		}
		if !slices.ContainsFunc(list, func(n cluster.Node) bool { return strings.HasPrefix(n.ID, name) || n.Name == name }) {
			return &TargetError{Flag: "-node", Value: name, text: fmt.Sprintf(
				"-node %q: no node of the cluster has that ID prefix or name; check it with `nomad node status`", name)}
		}
	}
	for _, dc := range spec.Datacenters {
		if slices.ContainsFunc(kept, func(a *restart.Alloc) bool { return dcOf[a.NodeID] == dc }) {
			continue
		}
		if !slices.ContainsFunc(nodes.list, func(n cluster.Node) bool { return n.Datacenter == dc }) {
			return &TargetError{Flag: "-datacenter", Value: dc, text: fmt.Sprintf(
				"-datacenter %q: no node of the cluster is in that datacenter (the nodes' datacenters: %s); check the name",
				dc, strings.Join(datacentersOf(nodes.list), ", "))}
		}
		if len(job.Datacenters) > 0 && !slices.ContainsFunc(job.Datacenters, func(p string) bool { return globMatch(p, dc) }) {
			return &TargetError{Flag: "-datacenter", Value: dc, OfJob: true, text: fmt.Sprintf(
				"-datacenter %q: job %q does not run in that datacenter (its datacenters: %s); check the name",
				dc, job.ID, strings.Join(job.Datacenters, ", "))}
		}
	}
	return nil
}

// nodeList lists the cluster's nodes once, when first needed.
type nodeList struct {
	e    *Engine
	list []cluster.Node
	err  error
	done bool
}

func (l *nodeList) get(ctx context.Context) ([]cluster.Node, error) {
	if !l.done {
		l.list, l.err = l.e.cluster.Nodes(ctx)
		l.done = true
	}
	return l.list, l.err
}

// datacentersOf lists the nodes' datacenters, sorted, each once.
func datacentersOf(nodes []cluster.Node) []string {
	var out []string
	for _, n := range nodes {
		if !slices.Contains(out, n.Datacenter) {
			out = append(out, n.Datacenter)
		}
	}
	sort.Strings(out)
	return out
}

// globMatch is how Nomad matches a job's datacenter against a node's (structs.Node.IsInAnyDC
// with github.com/ryanuber/go-glob): "*" matches any run of characters, nothing else is
// special.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return s == pattern
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last)
}

// unknownField finds, in Nomad's answer to a filter, the selector that names no field of
// an allocation (go-bexpr's "couldn't find key: struct field with name").
var unknownField = regexp.MustCompile(`couldn't find key: struct field with name "([^"]*)"`)

// filterError is -filter's refusal from Nomad's answer, in one line: a field that does not
// exist is named, as are the fields to use.
func filterError(filter string, err error) error {
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		return fmt.Errorf("-filter %q: an allocation has no field %q (Nomad answered: %s); use an allocation's fields, like TaskGroup == \"web\", NodeName or ClientStatus", filter, m[1], oneLineErr(err))
	}
	return fmt.Errorf("invalid -filter %q: Nomad answered: %s; see Nomad's filter syntax (fields of an allocation, like TaskGroup == \"web\")", filter, oneLineErr(err))
}

func onNode(a *restart.Alloc, nodes []string) bool {
	for _, n := range nodes {
		if strings.HasPrefix(a.NodeID, n) || (a.NodeName != "" && a.NodeName == n) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// orderUnhealthyFirst moves the allocations out of service to the front, keeping Nomad's
// order otherwise.
func orderUnhealthyFirst(spec restart.Spec, allocs []*restart.Alloc) []*restart.Alloc {
	if !spec.UnhealthyFirst {
		return allocs
	}
	sort.SliceStable(allocs, func(i, j int) bool { return !restart.Serving(allocs[i]) && restart.Serving(allocs[j]) })
	return allocs
}

func oneLineErr(err error) string {
	s := strings.TrimSpace(err.Error())
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}
