package cli

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// childReaders bounds the children's records `status <fleet>` reads at once.
const childReaders = 8

// recentEvents is how many of a restart's latest events `status <id>` shows (all with -verbose).
const recentEvents = 10

// statusCommand is `nomad-restart status`.
type statusCommand struct{}

func (statusCommand) Run(ctx context.Context, a *app, args []string) error {
	var o idOptions
	var jsonOut bool
	var job string
	rest, err := a.parseIDFlags("status", &o, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&jsonOut, "json", false, "")
		fs.StringVar(&job, "job", "", "")
	})
	if err != nil {
		return err
	}
	if len(rest) > 1 {
		return usageErrorf("too many arguments %q: status takes at most one restart ID (options go before it)", strings.Join(rest, " "))
	}
	if len(rest) == 1 {
		if job != "" {
			return usageErrorf("-job and a restart ID cannot be used together: give one of them")
		}
		s, err := a.locate(ctx, "status", &o, rest)
		if err != nil {
			return err
		}
		if jsonOut {
			return output.WriteJSON(a.stdout, s.entry())
		}
		s.show(ctx, a, o.verbose)
		return nil
	}

	ses, err := a.openForIDs(&o)
	if err != nil {
		return err
	}
	stores, err := a.stores(ctx, ses, o.state)
	if err != nil {
		return err
	}
	ns := o.namespace
	if ns == "" {
		ns = "*"
	}
	recs, kinds, err := a.listAll(ctx, stores, store.Filter{Namespace: ns, JobID: job})
	if err != nil {
		return err
	}
	if len(recs) == 0 && o.state == stateAuto && !hasKind(stores, "nomad") {
		// Nomad could not be read (warned above) and nothing was found here: "No restarts"
		// would be a guess.
		return fmt.Errorf("no restarts could be listed: Nomad at %s could not be read and this machine's local store has none", ses.address())
	}
	fleets := a.listFleets(ctx, ses, stores, ns, job)
	if jsonOut {
		return output.WriteJSON(a.stdout, statusEntries(recs, fleets))
	}
	err = output.WriteList(a.stdout, recs, false, "restarts", job, "ID\tJob\tNamespace\tStatus\tProgress\tCreated\tState",
		func(r *restart.Record) string {
			pr := r.Progress(a.now())
			progress := fmt.Sprintf("%d/%d", pr.Done, pr.Total)
			if pr.Failed > 0 {
				progress += fmt.Sprintf(" (%d failed)", pr.Failed)
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", output.ShortID(r.ID, o.verbose), r.JobID, r.Namespace, r.Status, progress, output.FormatTime(r.CreateTime), kinds[r.ID])
		})
	if err != nil {
		return err
	}
	return a.printFleetList(fleets, o.verbose)
}

// Help is `nomad-restart status -help`.
func (statusCommand) Help() string {
	return `Usage: nomad-restart status [options] [id]

  Without an ID, list the restarts, newest first, and the fleets. With an ID
  (or a unique prefix), show one restart in detail: its allocations with
  their batch, state, replacement, error and what each waits for, and its
  latest events. A fleet's ID shows the fleet: its jobs done, running,
  pending, failed, skipped and canceled, the allocations of its started
  jobs, its jobs with their restart IDs, and its latest events.

  -json    Print the record (or an array of records) as JSON, each with its
           Kind: "restart" or "fleet" (a fleet's Jobs list each selected job
           with its Namespace, JobID, RestartID once started, and Status).
  -job=J   List only the restarts of job J.
` + idOptionsHelp
}

func (statusCommand) Synopsis() string { return "List restarts, or show one in detail" }

// printRecord shows one restart in detail: its fields, a table of its allocations, and its
// latest events. driver says whether a process drives r now (a dead driver's name stays in
// r.Driver, so it is shown only while the lease is held or unknown).
func (a *app) printRecord(r *restart.Record, kind string, verbose bool, driver leaseState) {
	w := a.stdout
	p := a.printer(verbose, false)
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "%s\t= %s\n", k, v) }
	field("ID", output.ShortID(r.ID, verbose))
	field("Job ID", r.JobID)
	field("Namespace", r.Namespace)
	if r.Region != "" {
		field("Region", r.Region)
	}
	field("Job Version", fmt.Sprint(r.JobVersion))
	field("Status", string(r.Status))
	if r.Reason != "" {
		field("Reason", output.OneLine(p.IDs(r.Reason)))
	}
	pr := r.Progress(a.now())
	if driver == leaseFree {
		pr.Estimate = 0 // nothing advances it: an estimate would be a guess
	}
	field("Progress", pr.String())
	field("Options", describeSpec(r.Spec))
	for _, t := range r.Triggers {
		field("Triggered By", t.String())
	}
	if r.Revert != nil {
		field("Reverts", fmt.Sprintf("rollout %s, which failed (`nomad-restart status %s`)", output.ShortID(r.Revert.Rollout, verbose), output.ShortID(r.Revert.Rollout, verbose)))
		for _, wb := range r.Revert.Writes {
			field("Written Back", fmt.Sprintf("%s from %s, check-and-set on index %d, now index %d", wb.Source, wb.KeptPath, wb.BadIndex, wb.WrittenIndex))
		}
	}
	if r.Fleet != "" {
		field("Fleet", fmt.Sprintf("%s (this restart is one job of that fleet: `nomad-restart status %s`)", output.ShortID(r.Fleet, verbose), output.ShortID(r.Fleet, verbose)))
	}
	if r.Question != nil && r.Status == restart.StatusWaiting {
		field("Question", output.OneLine(r.Question.Prompt())+fmt.Sprintf(" (answer with `nomad-restart answer %s yes|no|<duration>`)", output.ShortID(r.ID, verbose)))
	}
	if r.Control.Intent != "" {
		field("Intent", string(r.Control.Intent)+byWhom(r.Control.By))
	}
	switch {
	case driver == leaseFree && !r.Status.Terminal():
		field("Driver", fmt.Sprintf("none — resume it with `nomad-restart resume %s`", output.ShortID(r.ID, verbose)))
	case r.Driver != "" && !r.Status.Terminal():
		field("Driver", r.Driver)
	}
	field("State", kind)
	field("Created", output.FormatTime(r.CreateTime))
	field("Modified", output.FormatTime(r.ModifyTime))
	_ = tw.Flush()

	fmt.Fprintln(w, "\nAllocations")
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tGroup\tNode\tBatch\tState\tReplacement\tError\tWaiting For")
	for _, ap := range r.Allocs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			output.ShortID(ap.ID, verbose), ap.Name, ap.Group, output.OrDash(output.ShortID(ap.NodeID, verbose)), ap.Batch, ap.State,
			output.OrDash(output.ShortID(ap.Replacement, verbose)), output.OrDash(output.OneLine(p.IDs(ap.Error))), output.OrDash(output.OneLine(p.IDs(ap.Waiting))))
	}
	_ = tw.Flush()

	printSurge(w, p, r.Surge)
	printGateRuns(w, r.GateRuns)
	printNotifications(w, r.Notify)

	events := r.Events
	if !verbose && len(events) > recentEvents {
		events = events[len(events)-recentEvents:]
	}
	if len(events) > 0 {
		fmt.Fprintln(w, "\nRecent Events")
		for _, ev := range events {
			p.Event(ev)
		}
	}
}

// printNotifications shows what the record's outbox delivered: its counts, and each
// notification settled lately with its sink, trigger and outcome (a failure's reason
// names where it failed, never the sink's whole URL).
func printNotifications(w io.Writer, n *restart.Notifications) {
	if n == nil || (n.Sent == 0 && n.Failed == 0) {
		return
	}
	title := fmt.Sprintf("Notifications (%d sent, %d failed)", n.Sent, n.Failed)
	_ = output.WriteSection(w, title, n.Log, "Time\tSink\tEvent\tTrigger\tOutcome\tError", func(d restart.Delivery) string {
		return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s", output.FormatTime(d.Time), d.Sink, d.Seq, d.Trigger, d.Outcome, output.OrDash(output.OneLine(d.Error)))
	})
}

// printSurge shows each group's surge (-surge), when the restart has one: how far it was
// scaled, where it stands, and the note that says why a count was left as it is or how to
// restore it.
func printSurge(w io.Writer, p *output.Printer, surge []restart.SurgeGroup) {
	_ = output.WriteSection(w, "Surge", surge, "Group\tFrom\tTo\tPhase\tNote", func(g restart.SurgeGroup) string {
		return fmt.Sprintf("%s\t%d\t%d\t%s\t%s", g.Group, g.From, g.To, g.Phase, output.OrDash(output.OneLine(p.IDs(g.Note))))
	})
}

func byWhom(by string) string {
	if by == "" {
		return ""
	}
	return " (by " + by + ")"
}

// hasKind says whether one of stores is of kind ("nomad" or "local").
func hasKind(stores []store.Store, kind string) bool {
	for _, st := range stores {
		if st.Kind() == kind {
			return true
		}
	}
	return false
}

// leaseState is what status knows of a restart's lease.
type leaseState int

const (
	leaseUnknown leaseState = iota // ended, or the store could not tell
	leaseHeld
	leaseFree
)

// printFleet shows one fleet in detail: its fields, the counts of its jobs by status, the
// allocations its started jobs restarted, its jobs that started or ended (every job with
// -verbose) with their restarts, and its latest events.
func (a *app) printFleet(ctx context.Context, ft *fleetSubject, verbose bool) {
	r := ft.rec
	p := a.printer(verbose, false)
	children := a.readChildren(ctx, ft)
	id := output.ShortID(r.ID, verbose)
	tw := tabwriter.NewWriter(a.stdout, 0, 8, 1, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "%s\t= %s\n", k, v) }
	field("ID", id)
	field("Kind", kindFleet)
	field("Namespace", r.Namespace)
	field("Selection", describeSelection(r.Selection))
	field("Status", string(r.Status))
	if r.Reason != "" {
		field("Reason", output.OneLine(p.IDs(r.Reason)))
	}
	field("Jobs", fleetCounts(r.Fleet))
	field("Allocations", fleetAllocations(r, children, a.now()))
	field("Options", describeSpec(r.Spec))
	field("Limits", describeFleetOptions(r.Options))
	if r.Question != nil && r.Status == restart.StatusWaiting {
		field("Question", output.OneLine(r.Question.Prompt())+fmt.Sprintf(" (answer with `nomad-restart answer %s yes|no`)", id))
	}
	if r.Control.Intent != "" {
		field("Intent", string(r.Control.Intent)+byWhom(r.Control.By))
	}
	if d := a.fleetDriverText(ctx, ft, verbose); d != "" {
		field("Driver", d)
	}
	field("State", "nomad")
	field("Created", output.FormatTime(r.CreateTime))
	field("Modified", output.FormatTime(r.ModifyTime))
	_ = tw.Flush()

	a.printFleetWaves(r.Fleet)
	a.printFleetJobs(p, r, children, verbose)
	events := r.Events
	if !verbose && len(events) > recentEvents {
		events = events[len(events)-recentEvents:]
	}
	if len(events) > 0 {
		fmt.Fprintln(a.stdout, "\nRecent Events")
		for _, ev := range events {
			p.Event(ev)
		}
	}
}

// printFleetWaves prints a fleet's waves, each with its jobs and state, and what each of its
// held jobs waits for.
func (a *app) printFleetWaves(f fleet.Fleet) {
	waves := f.WaveSummaries()
	if len(waves) == 0 {
		return
	}
	fmt.Fprintf(a.stdout, "\nWaves (reached %d of %d)\n", f.WaveReached(), len(waves))
	for _, w := range waves {
		fmt.Fprintf(a.stdout, "  %d  %-8s %s\n", w.Wave, w.State, strings.Join(w.Jobs, ", "))
		for _, why := range w.Waits {
			fmt.Fprintf(a.stdout, "              %s\n", why)
		}
	}
	for _, o := range f.Outside {
		state := cmp.Or(o.Evidence.Waits, "not measured yet")
		switch {
		case o.Evidence.Ready:
			state = "healthy"
		case o.Evidence.Unready != "":
			state = o.Evidence.Unready
		}
		fmt.Fprintf(a.stdout, "  outside  %s/%s: %s\n", o.Namespace, o.JobID, state)
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
	out := fmt.Sprintf("%d/%d restarted in the %s started", done, total, output.Plural(started, "job", "jobs"))
	if failed > 0 {
		out += fmt.Sprintf(", %d failed", failed)
	}
	if unread > 0 {
		out += fmt.Sprintf(" (%s could not be read)", output.Plural(unread, "restart", "restarts"))
	}
	return out
}

// readChildren reads the restarts of the fleet's started jobs, a few at a time: those are
// the only ones with allocations to count. A child that cannot be read is left out.
func (a *app) readChildren(ctx context.Context, ft *fleetSubject) map[string]*restart.Record {
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
func (a *app) printFleetJobs(p *output.Printer, r *fleet.Record, children map[string]*restart.Record, verbose bool) {
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", j.JobID, j.Namespace, j.Status, output.OrDash(output.ShortID(j.RestartID, verbose)), allocs, output.OrDash(output.OneLine(p.IDs(j.Reason))))
	}
	_ = tw.Flush()
	if hidden < len(r.Jobs) {
		fmt.Fprint(a.stdout, "\nJobs\n"+b.String())
	}
	if hidden > 0 {
		fmt.Fprintf(a.stdout, "\n%s waiting for their turn (list them with -verbose)\n", output.Plural(hidden, "job", "jobs"))
	}
}

// fleetDriverText says who drives the fleet now, "" for an ended fleet.
func (a *app) fleetDriverText(ctx context.Context, s *fleetSubject, verbose bool) string {
	r := s.rec
	if r.Status.Terminal() {
		return ""
	}
	l := s.lease()
	switch l.state(ctx, a.by()) {
	case leaseUnknown:
		return r.Driver
	case leaseFree:
		return fmt.Sprintf("none — resume it with `nomad-restart resume %s`", output.ShortID(r.ID, verbose))
	}
	holder, _ := l.holder(ctx)
	return cmp.Or(holder, r.Driver)
}

// listFleets lists the fleets beside the restarts for `status`: none for a listing of one
// job's restarts, or without Nomad's store. A fleet listing that fails is a warning: the
// restarts are still worth showing.
func (a *app) listFleets(ctx context.Context, ses session, stores []store.Store, namespace, job string) []*fleet.Record {
	fs, err := fleetsOf(ses)
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
	return output.WriteSection(a.stdout, "Fleets", fleets, "ID\tJobs Filter\tNamespace\tStatus\tJobs\tCreated", func(f *fleet.Record) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", output.ShortID(f.ID, verbose), f.Selection.Filter, f.Selection.Namespace, f.Status, fleetJobsShort(f.Fleet), output.FormatTime(f.CreateTime))
	})
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

// The kinds of record `status -json` lists.
const (
	kindRestart = "restart"
	kindFleet   = "fleet"
)

// fleetEntry is a fleet as `status -json` and the fleet commands' -json print it: the
// record with its Kind, so that scripts tell it from a restart in one list.
type fleetEntry struct {
	Kind string
	*fleet.Record
	// WaveReached and Waves show a fleet in waves: the latest wave started, and each wave's
	// jobs and what they wait for.
	WaveReached int                 `json:",omitempty"`
	Waves       []fleet.WaveSummary `json:",omitempty"`
}

func newFleetEntry(rec *fleet.Record) fleetEntry {
	return fleetEntry{Kind: kindFleet, Record: rec, WaveReached: rec.WaveReached(), Waves: rec.WaveSummaries()}
}

// restartEntry is a restart as `status -json` prints it: the record with its Kind.
type restartEntry struct {
	Kind string
	*restart.Record
}

func newRestartEntry(rec *restart.Record) restartEntry {
	return restartEntry{Kind: kindRestart, Record: rec}
}
