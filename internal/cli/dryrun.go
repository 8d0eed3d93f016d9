package cli

import (
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// printPlan prints what a restart would do (-dry-run): its batches with each allocation's
// ID, name, group and node, and what gates each batch; nothing is recorded or restarted.
func (a *app) printPlan(p *output.Printer, rec *restart.Record, o *runOptions) {
	if o.json {
		p.JSONLine(rec)
		return
	}
	s := rec.Spec
	driven := ""
	if o.detach {
		driven = ", recorded for an agent to drive (-detach)"
	}
	p.Header(a.now(), fmt.Sprintf("Dry run: restart of job %q would restart %s in %s%s; nothing is changed",
		rec.JobID, output.Plural(len(rec.Allocs), "allocation", "allocations"), output.Plural(rec.Batches, "batch", "batches"), driven))
	p.Plain(strings.Repeat(" ", output.TimestampPrefixLen) + "Options: " + describeSpec(s))
	if s.Surge > 0 {
		p.Plain(strings.Repeat(" ", output.TimestampPrefixLen) + fmt.Sprintf("Surge: before the 1st batch, scale each targeted group up by %d and wait until the new allocations are healthy; they are not restarted; scale each group back to its count before the restart ends", s.Surge))
	}
	if s.Drain > 0 {
		p.Plain(strings.Repeat(" ", output.TimestampPrefixLen) + fmt.Sprintf("Drain: before each allocation's request, take its instances of the Consul services stopped with no delay out of Consul's passing answers %s (a critical check through the catalog), then put them back", s.DrainText()))
	}
	for b := 1; b <= rec.Batches; b++ {
		idx := rec.BatchAllocs(b)
		groups := map[string]int{}
		var order []string
		for _, i := range idx {
			g := rec.Allocs[i].Group
			if groups[g] == 0 {
				order = append(order, g)
			}
			groups[g]++
		}
		p.Plain(fmt.Sprintf("\n%s batch, %s; %s", restart.Ordinal(b), output.Plural(len(idx), "allocation", "allocations"), gateText(s, len(idx), order, b == rec.Batches)))
		for _, i := range idx {
			ap := rec.Allocs[i]
			p.Plain(fmt.Sprintf("    %s  %s  group %s  node %s", output.ShortID(ap.ID, o.verbose), ap.Name, ap.Group, output.OrDash(output.ShortID(ap.NodeID, o.verbose))))
		}
	}
}

// gateText says what a batch waits for before it starts and before it counts as done, and
// what follows it: the batch wait, which comes between batches only (the restart ends after
// the last, as Nomad's command does).
func gateText(s restart.Spec, batchSize int, groups []string, last bool) string {
	var parts []string
	budget := fmt.Sprintf("starts while at most %d allocation(s) of its group are out of service", batchSize)
	if s.MaxUnavailable != nil {
		budget = "starts within -max-unavailable " + restart.FormatBatchSizes([]restart.BatchSize{*s.MaxUnavailable}) + " per group"
	}
	parts = append(parts, budget)
	switch s.Health {
	case restart.HealthNone:
		parts = append(parts, "done when the restart requests return")
	case restart.HealthChecks:
		for _, g := range groups {
			minH, dl := s.HealthTimes(g)
			parts = append(parts, fmt.Sprintf("group %s done when its tasks run and its checks pass for %s (deadline %s)", g, minH, dl))
		}
	default:
		what := "done when its tasks run again"
		if s.MinHealthyTime > 0 {
			what += fmt.Sprintf(" for %s", s.MinHealthyTime)
		}
		parts = append(parts, fmt.Sprintf("%s (deadline %s)", what, s.HealthyDeadline))
	}
	switch {
	case last:
	case s.BatchWaitAsk:
		parts = append(parts, "then asks before the next batch")
	case s.BatchWait > 0:
		parts = append(parts, fmt.Sprintf("then waits %s before the next batch", s.BatchWait))
	}
	return strings.Join(parts, "; ")
}
