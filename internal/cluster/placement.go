package cluster

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// WatchPlacementFailure blocks until an evaluation of the job created at or after
// sinceIndex is blocked with failed placements for group, as Nomad's command watches after
// a stop (monitorPlacementFailures: a blocking query on the job's evaluations from the
// stop's index), except that it asks Nomad for the job's blocked evaluations only
// (/v1/evaluations?job=&status=blocked), so each answer stays small however many
// evaluations the job has. It returns only then, or with an error (ctx's end included).
func (n *Nomad) WatchPlacementFailure(ctx context.Context, namespace, jobID, group string, sinceIndex uint64) (*PlacementFailure, error) {
	waitIndex := sinceIndex
	pace := pacer{policy: n.retry}
	for {
		r, err := read(ctx, n, "listing evaluations", func(ctx context.Context) (evalsAt, error) {
			q := queryOpts(ctx, namespace)
			q.WaitIndex = waitIndex
			// Short: the watch is canceled at the end of each batch, and Nomad holds a
			// canceled query's connection until its wait ends.
			q.WaitTime = min(n.watchWait(ctx), placementWait)
			release, err := n.holdBlocking(ctx)
			if err != nil {
				return evalsAt{}, err
			}
			defer release()
			// Only the job's blocked evaluations, filtered by Nomad: the job's whole list
			// grows with every stop of a -reschedule and would be read again per change.
			q.Params = map[string]string{"job": jobID, "status": api.EvalStatusBlocked}
			evals, qm, err := n.client.Evaluations().List(q)
			if err != nil {
				return evalsAt{}, err
			}
			return evalsAt{evals: evals, index: qm.LastIndex}, nil
		})
		if err != nil {
			return nil, fmt.Errorf("watching evaluations of job %q for placement failures: %w", jobID, classify(err, ErrJobNotFound))
		}
		if pf := findPlacementFailure(r.evals, group, sinceIndex); pf != nil {
			return pf, nil
		}
		progressed := r.index > waitIndex
		waitIndex = max(r.index, waitIndex)
		if !pace.next(ctx, progressed) {
			return nil, fmt.Errorf("watching evaluations of job %q for placement failures: %w", jobID, ctx.Err())
		}
	}
}

// placementWait is the wait of each query of WatchPlacementFailure.
const placementWait = 10 * time.Second

type evalsAt struct {
	evals []*api.Evaluation
	index uint64
}

// findPlacementFailure returns the first blocked evaluation created at or after
// sinceIndex with failed allocations for group.
func findPlacementFailure(evals []*api.Evaluation, group string, sinceIndex uint64) *PlacementFailure {
	for _, ev := range evals {
		if ev == nil || ev.CreateIndex < sinceIndex || ev.Status != api.EvalStatusBlocked {
			continue
		}
		if m := ev.FailedTGAllocs[group]; m != nil {
			return &PlacementFailure{EvalID: ev.ID, Group: group, Reasons: PlacementReasons(m)}
		}
	}
	return nil
}

// PlacementReasons formats a failed placement's metrics as Nomad's command does
// (formatAllocMetrics in command/monitor.go, without scores), one reason per line and
// without the "* " bullet: `No nodes were eligible for evaluation`,
// `Constraint "X": 1 nodes excluded by filter`, `Resources exhausted on 2 nodes`, ...
// Nomad walks maps in random order; here the keys of each kind are sorted.
func PlacementReasons(m *api.AllocationMetric) []string {
	if m == nil {
		return nil
	}
	var out []string
	if m.NodesEvaluated == 0 {
		out = append(out, "No nodes were eligible for evaluation")
	}
	for _, dc := range sortedKeys(m.NodesAvailable) {
		if m.NodesAvailable[dc] == 0 {
			out = append(out, fmt.Sprintf("No nodes are available in datacenter %q", dc))
		}
	}
	for _, class := range sortedKeys(m.ClassFiltered) {
		out = append(out, fmt.Sprintf("Class %q: %d nodes excluded by filter", class, m.ClassFiltered[class]))
	}
	for _, cs := range sortedKeys(m.ConstraintFiltered) {
		out = append(out, fmt.Sprintf("Constraint %q: %d nodes excluded by filter", cs, m.ConstraintFiltered[cs]))
	}
	if m.NodesExhausted > 0 {
		out = append(out, fmt.Sprintf("Resources exhausted on %d nodes", m.NodesExhausted))
	}
	for _, class := range sortedKeys(m.ClassExhausted) {
		out = append(out, fmt.Sprintf("Class %q exhausted on %d nodes", class, m.ClassExhausted[class]))
	}
	for _, dim := range sortedKeys(m.DimensionExhausted) {
		out = append(out, fmt.Sprintf("Dimension %q exhausted on %d nodes", dim, m.DimensionExhausted[dim]))
	}
	for _, dim := range m.QuotaExhausted {
		out = append(out, fmt.Sprintf("Quota limit hit %q", dim))
	}
	return out
}

// Error formats the failure as Nomad's command does (ErrJobRestartPlacementFailure):
// `Evaluation "<id>" has placement failures for group "<group>":` and one indented
// `* reason` line per reason. IDs are given in full; shortening is the caller's choice.
func (p *PlacementFailure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Evaluation %q has placement failures for group %q:", p.EvalID, p.Group)
	for _, r := range p.Reasons {
		b.WriteString("\n    * ")
		b.WriteString(r)
	}
	return b.String()
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
