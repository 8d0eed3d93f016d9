package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// childReaders bounds the children's records `status <fleet>` reads at once.
const childReaders = 8

// showFleet is `status <fleet-id>`: the fleet as JSON, or in detail.
func (a *app) showFleet(ctx context.Context, ft *fleetTarget, verbose, jsonOut bool) error {
	if jsonOut {
		return writeJSON(a.stdout, newFleetEntry(ft.rec))
	}
	a.printFleet(ctx, ft, verbose)
	return nil
}

// printFleet shows one fleet in detail: its fields, the counts of its jobs by status, the
// allocations its started jobs restarted, its jobs that started or ended (every job with
// -verbose) with their restarts, and its latest events.
func (a *app) printFleet(ctx context.Context, ft *fleetTarget, verbose bool) {
	r := ft.rec
	p := a.printer(verbose, false)
	children := a.readChildren(ctx, ft)
	id := shortID(r.ID, verbose)
	tw := tabwriter.NewWriter(a.stdout, 0, 8, 1, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "%s\t= %s\n", k, v) }
	field("ID", id)
	field("Kind", kindFleet)
	field("Namespace", r.Namespace)
	field("Selection", describeSelection(r.Selection))
	field("Status", string(r.Status))
	if r.Reason != "" {
		field("Reason", oneLine(p.ids(r.Reason)))
	}
	field("Jobs", fleetCounts(r.Fleet))
	field("Allocations", fleetAllocations(r, children, a.now()))
	field("Options", describeSpec(r.Spec))
	field("Limits", describeFleetOptions(r.Options))
	if r.Question != nil && r.Status == restart.StatusWaiting {
		field("Question", oneLine(r.Question.Prompt())+fmt.Sprintf(" (answer with `nomad-restart answer %s yes|no`)", id))
	}
	if r.Control.Intent != "" {
		field("Intent", string(r.Control.Intent)+byWhom(r.Control.By))
	}
	if d := a.fleetDriverText(ctx, ft, verbose); d != "" {
		field("Driver", d)
	}
	field("State", "nomad")
	field("Created", formatTime(r.CreateTime))
	field("Modified", formatTime(r.ModifyTime))
	_ = tw.Flush()

	a.printFleetJobs(p, r, children, verbose)
	events := r.Events
	if !verbose && len(events) > recentEvents {
		events = events[len(events)-recentEvents:]
	}
	if len(events) > 0 {
		fmt.Fprintln(a.stdout, "\nRecent Events")
		for _, ev := range events {
			p.event(ev)
		}
	}
}

// fleetCounts says how many of a fleet's jobs stand where: "6 selected: 2 done, ...".
func fleetCounts(f fleet.Fleet) string {
	c := f.Counts()
	return fmt.Sprintf("%d selected: %d done, %d running, %d pending, %d failed, %d skipped, %d canceled",
		len(f.Jobs), c[fleet.JobSucceeded], c[fleet.JobRunning], c[fleet.JobPending], c[fleet.JobFailed], c[fleet.JobSkipped], c[fleet.JobCanceled])
}

// fleetAllocations sums the allocations of the started jobs' restarts.
func fleetAllocations(r *fleet.Record, children map[string]*restart.Record, now time.Time) string {
	var done, total, failed, started, unread int
	for _, j := range r.Jobs {
		if j.RestartID == "" {
			continue
		}
		started++
		child, ok := children[j.RestartID]
		if !ok {
			unread++
			continue
		}
		pr := child.Progress(now)
		done, total, failed = done+pr.Done, total+pr.Total, failed+pr.Failed
	}
	out := fmt.Sprintf("%d/%d restarted in the %s started", done, total, plural(started, "job", "jobs"))
	if failed > 0 {
		out += fmt.Sprintf(", %d failed", failed)
	}
	if unread > 0 {
		out += fmt.Sprintf(" (%s could not be read)", plural(unread, "restart", "restarts"))
	}
	return out
}

// readChildren reads the restarts of the fleet's started jobs, a few at a time: those are
// the only ones with allocations to count. A child that cannot be read is left out.
func (a *app) readChildren(ctx context.Context, ft *fleetTarget) map[string]*restart.Record {
	st := ft.ses.nomadStore()
	out := map[string]*restart.Record{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, childReaders)
	for _, j := range ft.rec.Jobs {
		if j.RestartID == "" {
			continue
		}
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			child, err := st.Get(ctx, j.Namespace, j.RestartID)
			if err != nil {
				return
			}
			mu.Lock()
			out[j.RestartID] = child
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// printFleetJobs prints the table of the fleet's jobs that started or ended, in the fleet's
// order (every job with -verbose).
func (a *app) printFleetJobs(p *printer, r *fleet.Record, children map[string]*restart.Record, verbose bool) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Job\tNamespace\tStatus\tRestart\tAllocations\tReason")
	hidden := 0
	for _, j := range r.Jobs {
		if j.Status == fleet.JobPending && j.BusyWith == "" && !verbose {
			hidden++
			continue
		}
		allocs := "-"
		if child, ok := children[j.RestartID]; ok {
			pr := child.Progress(a.now())
			allocs = fmt.Sprintf("%d/%d", pr.Done, pr.Total)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.JobID, j.Namespace, j.Status, orDash(shortID(j.RestartID, verbose)), allocs, orDash(oneLine(p.ids(j.Reason))))
	}
	_ = tw.Flush()
	if hidden < len(r.Jobs) {
		fmt.Fprint(a.stdout, "\nJobs\n"+b.String())
	}
	if hidden > 0 {
		fmt.Fprintf(a.stdout, "\n%s waiting for their turn (list them with -verbose)\n", plural(hidden, "job", "jobs"))
	}
}

// fleetDriverText says who drives the fleet now, "" for an ended fleet.
func (a *app) fleetDriverText(ctx context.Context, ft *fleetTarget, verbose bool) string {
	r := ft.rec
	if r.Status.Terminal() {
		return ""
	}
	switch holder, state := a.fleetLease(ctx, ft); state {
	case leaseUnknown:
		return r.Driver
	case leaseFree:
		return fmt.Sprintf("none — resume it with `nomad-restart resume %s`", shortID(r.ID, verbose))
	default:
		return holder
	}
}

// fleetLease probes whether some process drives the fleet, and which.
func (a *app) fleetLease(ctx context.Context, ft *fleetTarget) (string, leaseState) {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	holder, err := ft.ses.fleetStore().LeaseHolder(pctx, ft.rec.Namespace, ft.rec.ID)
	switch {
	case err != nil:
		return "", leaseUnknown
	case holder == "":
		return "", leaseFree
	}
	return holder, leaseHeld
}

// listFleets lists the fleets beside the restarts for `status`: none for a listing of one
// job's restarts, or without Nomad's store. A fleet listing that fails is a warning: the
// restarts are still worth showing.
func (a *app) listFleets(ctx context.Context, ses session, stores []store.Store, namespace, job string) []*fleet.Record {
	fs, err := asFleetSession(ses)
	if err != nil || job != "" || !hasKind(stores, "nomad") {
		return nil
	}
	fleets, err := fs.fleetStore().List(ctx, namespace, false)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(a.stderr, "Warning: the fleets could not be listed: %s\n", fleetStoreErrorText(err))
		}
		return nil
	}
	return fleets
}

// statusEntries is `status -json`'s list: restarts and fleets, each with its Kind, newest
// first.
func statusEntries(recs []*restart.Record, fleets []*fleet.Record) []any {
	type entry struct {
		created time.Time
		v       any
	}
	entries := make([]entry, 0, len(recs)+len(fleets))
	for _, r := range recs {
		entries = append(entries, entry{r.CreateTime, newRestartEntry(r)})
	}
	for _, f := range fleets {
		entries = append(entries, entry{f.CreateTime, newFleetEntry(f)})
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].created.After(entries[j].created) })
	out := make([]any, len(entries))
	for i, e := range entries {
		out[i] = e.v
	}
	return out
}

// printFleetList prints the fleets' table after the restarts', when there are fleets.
func (a *app) printFleetList(fleets []*fleet.Record, verbose bool) error {
	if len(fleets) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout, "\nFleets")
	tw := tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tJobs Filter\tNamespace\tStatus\tJobs\tCreated")
	for _, f := range fleets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", shortID(f.ID, verbose), f.Selection.Filter, f.Selection.Namespace, f.Status, fleetJobsShort(f.Fleet), formatTime(f.CreateTime))
	}
	return tw.Flush()
}

// fleetJobsShort is a fleet's progress in a list: "2/6 done, 1 running, 1 failed".
func fleetJobsShort(f fleet.Fleet) string { return jobCounts(f.Counts(), len(f.Jobs)) }

// jobCounts says how many of a fleet's total jobs are done, and how many are in each other
// status but pending: "3/6 done, 2 running, 1 failed".
func jobCounts(c map[fleet.JobStatus]int, total int) string {
	out := fmt.Sprintf("%d/%d done", c[fleet.JobSucceeded], total)
	for _, s := range []fleet.JobStatus{fleet.JobRunning, fleet.JobFailed, fleet.JobSkipped, fleet.JobCanceled} {
		if c[s] > 0 {
			out += fmt.Sprintf(", %d %s", c[s], s)
		}
	}
	return out
}

// describeSelection is a fleet's selection as the options that made it.
func describeSelection(sel fleet.Selection) string {
	return fmt.Sprintf("-namespace '%s' -jobs '%s'", sel.Namespace, sel.Filter)
}
