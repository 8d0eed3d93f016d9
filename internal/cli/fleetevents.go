package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// fleetSink prints the events of a fleet and of its children as they come: the fleet's
// own as headers, a child's prefixed with its job. prompting says that this terminal asks
// the questions (prompt.go): no need to say how to answer them elsewhere.
func (a *app) fleetSink(p *output.Printer, rec *fleet.Record, prompting bool) func(fleetrun.Event) {
	across := rec.Selection.Namespace == "*"
	return func(e fleetrun.Event) { a.printFleetEvent(p, e, across, !prompting) }
}

// printFleetEvent prints one event of a fleet (JobID empty) or of one of its children.
// across names each job with its namespace (a selection across namespaces); hint says how
// to answer a question.
func (a *app) printFleetEvent(p *output.Printer, e fleetrun.Event, across, hint bool) {
	if p.JSON {
		p.JSONLine(e)
		return
	}
	fid := output.ShortID(e.Fleet, p.Verbose)
	if !hint && e.Type == restart.EventQuestion {
		return // this terminal asks it (prompt.go), and its answer's event repeats it
	}
	if e.JobID == "" {
		p.Header(e.Time, e.Message)
		if hint && e.Type == restart.EventQuestion {
			p.Detail(a.now(), fmt.Sprintf("Answer with `nomad-restart answer %s yes|no`", fid))
		}
		return
	}
	label := e.JobID
	if across {
		label = e.Namespace + "/" + e.JobID
	}
	msg := fmt.Sprintf("[%s] %s", label, e.Message)
	if e.AllocID != "" {
		p.Detail(e.Time, msg)
	} else {
		p.Header(e.Time, msg)
	}
	if hint && e.Type == restart.EventQuestion {
		p.Detail(a.now(), fmt.Sprintf("[%s] Answer with `nomad-restart answer %s yes|no|<duration>` (every waiting job of the fleet), or `nomad-restart answer %s ...` (this job alone)",
			label, fid, output.ShortID(e.RestartID, p.Verbose)))
	}
}

// fleetPlanOutput is a fleet's dry run as -json prints it.
type fleetPlanOutput struct {
	DryRun    bool
	Selection fleet.Selection
	// Namespace is where the fleet would be recorded.
	Namespace string
	Options   fleet.Options
	Spec      restart.Spec
	Jobs      []fleetPlanJob
	LeftOut   []string `json:",omitempty"`
	// Outside are the upstreams outside the selection, which must be healthy.
	Outside []fleet.Upstream `json:",omitempty"`
}

// fleetPlanJob is one job's part of a fleet's dry run.
type fleetPlanJob struct {
	Namespace, JobID, Type string
	Priority               int
	Meta                   map[string]string `json:",omitempty"`
	// Spec is the options the job's restart would take: the fleet's, with its meta's.
	Spec            restart.Spec
	Allocs, Batches int
	Problem         string `json:",omitempty"`
	// Wave, After and Waits place the job in the fleet's waves: its wave, its upstreams,
	// and what it would wait for when the fleet starts.
	Wave  int      `json:",omitempty"`
	After []string `json:",omitempty"`
	Waits string   `json:",omitempty"`
}

// printFleetPlan prints what a fleet would do (-dry-run): the jobs in order with their
// type, allocations, batches, the options their meta overrides, and their problems; and
// the fleet's limits. Nothing is recorded or restarted.
func (a *app) printFleetPlan(p *output.Printer, rec *fleet.Record, plans []fleetrun.JobPlan, leftOut []string) {
	if p.JSON {
		out := fleetPlanOutput{DryRun: true, Selection: rec.Selection, Namespace: rec.Namespace, Options: rec.Options, Spec: rec.Spec, LeftOut: leftOut, Outside: rec.Outside}
		for i, jp := range plans {
			out.Jobs = append(out.Jobs, fleetPlanJob{Namespace: jp.Job.Namespace, JobID: jp.Job.JobID, Type: jp.Job.Type, Priority: jp.Job.Priority,
				Meta: jp.Job.Meta, Spec: jp.Spec, Allocs: jp.Allocs, Batches: jp.Batches, Problem: jp.Problem,
				Wave: jp.Job.Wave, After: upstreamNames(jp.Job.After), Waits: rec.GateOf(i).Waits})
		}
		p.JSONLine(out)
		return
	}
	allocs, problems := 0, 0
	for _, jp := range plans {
		allocs += jp.Allocs
		if jp.Problem != "" {
			problems++
		}
	}
	p.Header(a.now(), fmt.Sprintf("Dry run: a fleet of %s selected by %s would restart %s; nothing is changed",
		output.Plural(len(plans), "job", "jobs"), describeSelection(rec.Selection), output.Plural(allocs, "allocation", "allocations")))
	pad := strings.Repeat(" ", output.TimestampPrefixLen)
	p.Plain(pad + "Options: " + describeSpec(rec.Spec))
	p.Plain(pad + "Limits: " + describeFleetOptions(rec.Options))
	p.Plain(pad + fmt.Sprintf("Would be recorded in: Nomad Variables of namespace %q", rec.Namespace))
	if problems > 0 {
		p.Plain(pad + fmt.Sprintf("%s would not restart now (see Problem)", output.Plural(problems, "job", "jobs")))
	}
	if len(leftOut) > 0 {
		p.Plain(pad + "Left out (periodic or parameterized, their launches are jobs of their own): " + joinFew(leftOut, 5))
	}
	if n := rec.Waves(); n > 0 {
		p.Plain(pad + fmt.Sprintf("In %s: a job starts once each upstream's restart succeeded, its allocations are healthy and its gates held for -wave-wait %s", output.Plural(n, "wave", "waves"), rec.Options.WaveWait))
		for _, o := range rec.Outside {
			p.Plain(pad + fmt.Sprintf("Upstream outside the fleet, not restarted, must be healthy: %s/%s", o.Namespace, o.JobID))
		}
	}
	p.Plain("\n" + fleetPlanTable(rec.Fleet, plans))
}

// upstreamNames names upstreams as namespace/job.
func upstreamNames(refs []fleet.Ref) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.String())
	}
	return out
}

// fleetPlanTable is the dry run's table of jobs, in the fleet's order.
func fleetPlanTable(f fleet.Fleet, plans []fleetrun.JobPlan) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	waves := f.HasWaves()
	head := "Order\tJob\tNamespace\tType\tPriority\tAllocations\tBatches\tOptions From Meta\tProblem"
	if waves {
		head = "Wave\t" + head + "\tWaits For"
	}
	fmt.Fprintln(tw, head)
	for i, jp := range plans {
		if waves {
			fmt.Fprintf(tw, "%d\t", jp.Job.Wave)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s", i+1, jp.Job.JobID, jp.Job.Namespace, jp.Job.Type, jp.Job.Priority,
			jp.Allocs, jp.Batches, output.OrDash(metaOptions(jp.Job.Meta)), output.OrDash(jp.Problem))
		if waves {
			fmt.Fprintf(tw, "\t%s", output.OrDash(f.GateOf(i).Waits))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// metaOptions shows a job's nomad-restart.* meta as the options they set: "batch-size=2".
func metaOptions(meta map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(meta) {
		parts = append(parts, strings.TrimPrefix(k, onchange.MetaPrefix)+"="+meta[k])
	}
	return strings.Join(parts, " ")
}
