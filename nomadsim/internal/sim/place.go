package sim

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Placement: feasibility (datacenters, node pool, status, eligibility, constraints) and a
// simple ranking (fewest allocations of the same job first, as job anti-affinity does,
// then the least used node).

// tgNeeds is the CPU and memory a group's allocation reserves.
func tgNeeds(tg *api.TaskGroup) (cpu, mem int) {
	for _, t := range tg.Tasks {
		if t.Resources != nil {
			cpu += Deref(t.Resources.CPU)
			mem += Deref(t.Resources.MemoryMB)
		}
	}
	return cpu, mem
}

// placer ranks nodes for one task group during one evaluation.
type placer struct {
	c        *Cluster
	job      *api.Job
	tg       *api.TaskGroup
	cpu, mem int
	feasible []*simNode
	perNode  map[string]int // allocations of this job's group per node
	metric   *api.AllocationMetric
}

func (c *Cluster) newPlacer(j *JobEntry, job *api.Job, tg *api.TaskGroup) *placer {
	p := &placer{c: c, job: job, tg: tg, perNode: map[string]int{}}
	p.cpu, p.mem = tgNeeds(tg)
	m := &api.AllocationMetric{NodePool: Deref(job.NodePool), NodesAvailable: map[string]int{}}
	if m.NodePool == "" {
		m.NodePool = "default"
	}
	constraints := append(append([]*api.Constraint{}, job.Constraints...), tg.Constraints...)
	for _, t := range tg.Tasks {
		constraints = append(constraints, t.Constraints...)
	}
	for _, n := range c.NodeList {
		if !dcMatch(job.Datacenters, n.Node.Datacenter) || (m.NodePool != "all" && n.Node.NodePool != m.NodePool) {
			continue
		}
		if n.Node.Status != api.NodeStatusReady {
			continue
		}
		m.NodesInPool++
		m.NodesAvailable[n.Node.Datacenter]++
		if n.Node.SchedulingEligibility != api.NodeSchedulingEligible {
			continue
		}
		m.NodesEvaluated++
		if failed := failingConstraint(n.Node, constraints); failed != "" {
			m.NodesFiltered++
			if m.ConstraintFiltered == nil {
				m.ConstraintFiltered = map[string]int{}
			}
			m.ConstraintFiltered[failed]++
			continue
		}
		if !driversPresent(n.Node, tg) {
			m.NodesFiltered++
			if m.ConstraintFiltered == nil {
				m.ConstraintFiltered = map[string]int{}
			}
			m.ConstraintFiltered["missing drivers"]++
			continue
		}
		p.feasible = append(p.feasible, n)
	}
	for _, ar := range j.Allocs {
		if ar.Alloc.TaskGroup == *tg.Name && !ar.Terminal() {
			p.perNode[ar.Node.Node.ID]++
		}
	}
	p.metric = m
	return p
}

// pick chooses a node with room, or nil, recording exhaustion in the metric.
func (p *placer) pick(avoid string) *simNode {
	var best *simNode
	bestCount, bestFree := 0, 0
	exhausted := 0
	for _, n := range p.feasible {
		if n.usedCPU+p.cpu > nodeCPU || n.usedMem+p.mem > nodeMemory {
			exhausted++
			continue
		}
		cnt := p.perNode[n.Node.ID]
		if n.Node.ID == avoid {
			cnt += 1000
		}
		free := nodeMemory - n.usedMem
		if best == nil || cnt < bestCount || (cnt == bestCount && free > bestFree) {
			best, bestCount, bestFree = n, cnt, free
		}
	}
	if best == nil {
		p.metric.NodesExhausted = exhausted
		if exhausted > 0 {
			if p.metric.DimensionExhausted == nil {
				p.metric.DimensionExhausted = map[string]int{}
			}
			p.metric.DimensionExhausted["memory"] = exhausted
		}
		return nil
	}
	p.perNode[best.Node.ID]++
	return best
}

func dcMatch(dcs []string, dc string) bool {
	if len(dcs) == 0 {
		return true
	}
	for _, pat := range dcs {
		if glob(pat, dc) {
			return true
		}
	}
	return false
}

// glob is how Nomad matches a job's datacenter against a node's (structs.Node.IsInAnyDC with
// github.com/ryanuber/go-glob): "*" matches any run of characters, nothing else is special.
func glob(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return s == pattern
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

func driversPresent(n *api.Node, tg *api.TaskGroup) bool {
	// Nomad filters on driver fingerprints; the simulated nodes run any driver name, so
	// only drivers explicitly reported unhealthy filter a node.
	for _, t := range tg.Tasks {
		if d, ok := n.Drivers[t.Driver]; ok && !d.Healthy {
			return false
		}
	}
	return true
}

// resolveTarget interpolates a constraint target against a node.
func resolveTarget(n *api.Node, target string) (string, bool) {
	if !strings.HasPrefix(target, "${") || !strings.HasSuffix(target, "}") {
		return target, true
	}
	key := target[2 : len(target)-1]
	switch {
	case key == "node.datacenter":
		return n.Datacenter, true
	case key == "node.class":
		return n.NodeClass, true
	case key == "node.unique.name":
		return n.Name, true
	case key == "node.unique.id":
		return n.ID, true
	case key == "node.pool":
		return n.NodePool, true
	case strings.HasPrefix(key, "attr."):
		v, ok := n.Attributes[strings.TrimPrefix(key, "attr.")]
		return v, ok
	case strings.HasPrefix(key, "meta."):
		v, ok := n.Meta[strings.TrimPrefix(key, "meta.")]
		return v, ok
	}
	return "", false
}

// failingConstraint returns the first constraint the node fails, in Nomad's
// "<ltarget> <operand> <rtarget>" form, or "".
func failingConstraint(n *api.Node, cs []*api.Constraint) string {
	for _, con := range cs {
		if con == nil || constraintMet(n, con) {
			continue
		}
		return strings.TrimSpace(fmt.Sprintf("%s %s %s", con.LTarget, con.Operand, con.RTarget))
	}
	return ""
}

func constraintMet(n *api.Node, con *api.Constraint) bool {
	l, lok := resolveTarget(n, con.LTarget)
	r, rok := resolveTarget(n, con.RTarget)
	switch con.Operand {
	case "", "=", "==", "is":
		return lok && rok && l == r
	case "!=", "not":
		return !lok || !rok || l != r
	case "is_set":
		return lok
	case "is_not_set":
		return !lok
	case "regexp":
		re, err := regexp.Compile(r)
		return lok && err == nil && re.MatchString(l)
	case "set_contains", "set_contains_all":
		have := map[string]bool{}
		for _, s := range strings.Split(l, ",") {
			have[strings.TrimSpace(s)] = true
		}
		for _, s := range strings.Split(r, ",") {
			if !have[strings.TrimSpace(s)] {
				return false
			}
		}
		return lok
	case "set_contains_any":
		for _, s := range strings.Split(r, ",") {
			for _, h := range strings.Split(l, ",") {
				if strings.TrimSpace(s) == strings.TrimSpace(h) {
					return true
				}
			}
		}
		return false
	}
	// distinct_hosts, distinct_property, version, semver and others are accepted.
	return true
}

// sortByName orders allocations by their name index, then ID.
func sortByName(as []*AllocRun) {
	sort.Slice(as, func(i, j int) bool {
		ni, nj := nameIndex(as[i].Alloc.Name), nameIndex(as[j].Alloc.Name)
		if ni != nj {
			return ni < nj
		}
		return as[i].Alloc.ID < as[j].Alloc.ID
	})
}

// nameIndex extracts i from "job.group[i]".
func nameIndex(name string) int {
	open := strings.LastIndexByte(name, '[')
	if open < 0 || !strings.HasSuffix(name, "]") {
		return -1
	}
	n := 0
	for _, ch := range name[open+1 : len(name)-1] {
		if ch < '0' || ch > '9' {
			return -1
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

func allocName(jobID, group string, i int) string { return fmt.Sprintf("%s.%s[%d]", jobID, group, i) }
