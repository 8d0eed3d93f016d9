package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// recentEvents is how many of a restart's latest events `status <id>` shows (all with -verbose).
const recentEvents = 10

func (a *app) cmdStatus(ctx context.Context, args []string) error {
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
		t, err := a.locate(ctx, "status", &o, rest)
		if err != nil {
			return err
		}
		if t.fleet != nil {
			return a.showFleet(ctx, t.fleet, o.verbose, jsonOut)
		}
		if jsonOut {
			return writeJSON(a.stdout, newRestartEntry(t.rec))
		}
		a.printRecord(t.rec, t.st.Kind(), o.verbose, a.driverOf(ctx, t.st, t.rec))
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
		return writeJSON(a.stdout, statusEntries(recs, fleets))
	}
	err = writeList(a.stdout, recs, false, "restarts", job, "ID\tJob\tNamespace\tStatus\tProgress\tCreated\tState",
		func(r *restart.Record) string {
			pr := r.Progress(a.now())
			progress := fmt.Sprintf("%d/%d", pr.Done, pr.Total)
			if pr.Failed > 0 {
				progress += fmt.Sprintf(" (%d failed)", pr.Failed)
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", shortID(r.ID, o.verbose), r.JobID, r.Namespace, r.Status, progress, formatTime(r.CreateTime), kinds[r.ID])
		})
	if err != nil {
		return err
	}
	return a.printFleetList(fleets, o.verbose)
}

// writeJSON writes v as indented JSON, with the format's version (marshalJSON).
func writeJSON(w io.Writer, v any) error {
	b, err := marshalJSON(v)
	if err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "    "); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	out.WriteByte('\n')
	if _, err := out.WriteTo(w); err != nil {
		return fmt.Errorf("writing JSON: %w", err)
	}
	return nil
}

// printRecord shows one restart in detail: its fields, a table of its allocations, and its
// latest events. driver says whether a process drives r now (a dead driver's name stays in
// r.Driver, so it is shown only while the lease is held or unknown).
func (a *app) printRecord(r *restart.Record, kind string, verbose bool, driver leaseState) {
	w := a.stdout
	p := a.printer(verbose, false)
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "%s\t= %s\n", k, v) }
	field("ID", shortID(r.ID, verbose))
	field("Job ID", r.JobID)
	field("Namespace", r.Namespace)
	if r.Region != "" {
		field("Region", r.Region)
	}
	field("Job Version", fmt.Sprint(r.JobVersion))
	field("Status", string(r.Status))
	if r.Reason != "" {
		field("Reason", oneLine(p.ids(r.Reason)))
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
	if r.Fleet != "" {
		field("Fleet", fmt.Sprintf("%s (this restart is one job of that fleet: `nomad-restart status %s`)", shortID(r.Fleet, verbose), shortID(r.Fleet, verbose)))
	}
	if r.Question != nil && r.Status == restart.StatusWaiting {
		field("Question", oneLine(r.Question.Prompt())+fmt.Sprintf(" (answer with `nomad-restart answer %s yes|no|<duration>`)", shortID(r.ID, verbose)))
	}
	if r.Control.Intent != "" {
		field("Intent", string(r.Control.Intent)+byWhom(r.Control.By))
	}
	switch {
	case driver == leaseFree:
		field("Driver", fmt.Sprintf("none — resume it with `nomad-restart resume %s`", shortID(r.ID, verbose)))
	case r.Driver != "" && !r.Status.Terminal():
		field("Driver", r.Driver)
	}
	field("State", kind)
	field("Created", formatTime(r.CreateTime))
	field("Modified", formatTime(r.ModifyTime))
	_ = tw.Flush()

	fmt.Fprintln(w, "\nAllocations")
	tw = tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tName\tGroup\tNode\tBatch\tState\tReplacement\tError\tWaiting For")
	for _, ap := range r.Allocs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n",
			shortID(ap.ID, verbose), ap.Name, ap.Group, orDash(shortID(ap.NodeID, verbose)), ap.Batch, ap.State,
			orDash(shortID(ap.Replacement, verbose)), orDash(oneLine(p.ids(ap.Error))), orDash(oneLine(p.ids(ap.Waiting))))
	}
	_ = tw.Flush()

	printSurge(w, p, r.Surge)

	events := r.Events
	if !verbose && len(events) > recentEvents {
		events = events[len(events)-recentEvents:]
	}
	if len(events) > 0 {
		fmt.Fprintln(w, "\nRecent Events")
		for _, ev := range events {
			p.event(ev)
		}
	}
}

// printSurge shows each group's surge (-surge), when the restart has one: how far it was
// scaled, where it stands, and the note that says why a count was left as it is or how to
// restore it.
func printSurge(w io.Writer, p *printer, surge []restart.SurgeGroup) {
	if len(surge) == 0 {
		return
	}
	fmt.Fprintln(w, "\nSurge")
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Group\tFrom\tTo\tPhase\tNote")
	for _, g := range surge {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\n", g.Group, g.From, g.To, g.Phase, orDash(oneLine(p.ids(g.Note))))
	}
	_ = tw.Flush()
}

func byWhom(by string) string {
	if by == "" {
		return ""
	}
	return " (by " + by + ")"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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

// driverOf probes whether some process drives rec: the record's Driver is only who last
// said so, and a driver that died cannot take its name back.
func (a *app) driverOf(ctx context.Context, st store.Store, rec *restart.Record) leaseState {
	if rec.Status.Terminal() {
		return leaseUnknown
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	free, err := store.LeaseFree(pctx, st, rec.Namespace, rec.ID, a.by())
	switch {
	case err != nil:
		return leaseUnknown
	case free:
		return leaseFree
	}
	return leaseHeld
}
