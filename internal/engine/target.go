package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// errTargetingUnsupported is the answer for a cluster client that cannot evaluate -filter or
// list nodes.
var errTargetingUnsupported = errors.New("this cluster cannot evaluate -filter, -node or -datacenter; drop them")

// target narrows the selected allocations to -filter, -node and -datacenter, and puts
// those out of service first with -unhealthy-first. The allocations left out are skipped
// with the reason.
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
			return nil, nil, fmt.Errorf("invalid -filter %q: Nomad answered: %s; see Nomad's filter syntax (fields of an allocation, like TaskGroup == \"web\")", spec.Filter, oneLineErr(err))
		}
		matching = m
	}
	var dcOf map[string]string
	if len(spec.Datacenters) > 0 {
		m, err := e.cluster.NodeDatacenters(ctx)
		switch {
		case errors.Is(err, cluster.ErrNotSupported):
			return nil, nil, errTargetingUnsupported
		case err != nil:
			return nil, nil, fmt.Errorf("listing nodes for -datacenter: %w; the token needs node:read", err)
		}
		dcOf = m
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
