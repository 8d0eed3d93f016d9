package cli

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
)

// scheduleFlags are run's -at, -every, -time-zone and -schedule-grace: with -at or -every,
// run stores a schedule instead of restarting now (see runSchedule).
type scheduleFlags struct {
	at, every, timeZone, grace string

	// Set by validate.
	when     time.Time // -at's time
	cron     *schedule.Cron
	graceDur time.Duration
}

func (f *scheduleFlags) add(fs *flag.FlagSet) {
	fs.StringVar(&f.at, "at", "", "")
	fs.StringVar(&f.every, "every", "", "")
	fs.StringVar(&f.timeZone, "time-zone", "", "")
	fs.StringVar(&f.grace, "schedule-grace", "", "")
}

// scheduled says run stores a schedule.
func (f *scheduleFlags) scheduled() bool { return f.at != "" || f.every != "" }

// validate checks the schedule options and their combination with run's others, at now.
func (f *scheduleFlags) validate(o *runOptions, now time.Time) error {
	if !f.scheduled() {
		switch {
		case f.timeZone != "":
			return usageErrorf("-time-zone applies to -every (and -at): add -every \"<cron expression>\" or drop -time-zone")
		case f.grace != "":
			return usageErrorf("-schedule-grace applies to -at and -every: add one of them or drop -schedule-grace")
		}
		return nil
	}
	switch {
	case f.at != "" && f.every != "":
		return usageErrorf("-at and -every cannot be used together: give -at for one restart, or -every for a recurring one")
	case o.detach:
		return usageErrorf("-detach cannot be used with -at or -every: a scheduled restart is always detached (the nomad-restart agent starts and drives it); drop -detach")
	case o.dryRun:
		return usageErrorf("-dry-run cannot be used with -at or -every: see the plan with `nomad-restart run -dry-run` (without -at/-every), then schedule")
	case o.state == stateLocal:
		return usageErrorf("-state local cannot be used with -at or -every: schedules live in Nomad Variables, where the nomad-restart agent reads them; drop -state local")
	}
	f.graceDur = schedule.DefaultGrace
	if f.grace != "" {
		d, err := time.ParseDuration(f.grace)
		if err != nil || d <= 0 {
			return usageErrorf("Invalid -schedule-grace value %q: give a positive duration like 5m, how late an occurrence may still start", f.grace)
		}
		f.graceDur = d
	}
	if f.every != "" {
		c, err := schedule.ParseCron(f.every, f.timeZone, now)
		if err != nil {
			return usageErrorf("%s", capitalize(err.Error()))
		}
		f.cron = c
		return nil
	}
	loc := time.Local
	if f.timeZone != "" {
		l, err := schedule.LoadZone(f.timeZone)
		if err != nil {
			return usageErrorf("%s", capitalize(err.Error()))
		}
		loc = l
	}
	t, err := schedule.ParseAt(f.at, now, loc)
	if err != nil {
		return usageErrorf("%s", capitalize(err.Error()))
	}
	f.when = t
	return nil
}

func capitalize(s string) string {
	return strings.Replace(s, "invalid", "Invalid", 1)
}

// scheduleStore returns the schedules' store of a session on Nomad.
func scheduleStore(ses session) (*schedule.Store, error) {
	if ss := ses.schedules(); ss != nil {
		return ss, nil
	}
	return nil, errors.New("schedules need Nomad Variables, and this session has no Nomad client")
}

// runSchedule is `run -at` / `run -every`: everything run checks (the job, its groups and
// tasks, a plan), then a schedule is stored for the agent, and nothing else is written.
// With -jobs the schedule is a fleet's (runFleetSchedule).
func (a *app) runSchedule(ctx context.Context, o *runOptions) error {
	if o.fleet.selected() {
		return a.runFleetSchedule(ctx, o)
	}
	ss, ses, err := a.openSchedules(ctx, o.client)
	if err != nil {
		return err
	}
	plan, err := ses.engine(ses.nomadStore()).Plan(ctx, o.client.namespace, o.job, o.spec)
	if err != nil {
		return planError(err)
	}
	rec := plan.Record
	p := a.printer(o.verbose, o.json)
	// The agent cannot ask later: the operator confirms now, or with -yes.
	if ok, err := a.confirmMultiRegion(ctx, p, plan, o, "Scheduling canceled."); !ok || err != nil {
		return err
	}
	if plan.Job != nil && plan.Job.MultiRegion {
		o.spec.Yes = true // confirmed: each occurrence restarts this region without asking
	}

	now := a.now()
	sc, err := a.newSchedule(o, now)
	if err != nil {
		return err
	}
	sc.Namespace, sc.JobID = rec.Namespace, rec.JobID
	if err := storeSchedule(ctx, ss, sc); err != nil {
		return err
	}
	if o.json {
		return output.WriteJSON(a.stdout, sc)
	}
	p.Header(now, fmt.Sprintf("Schedule %s of job %q created: next due %s%s", output.ShortID(sc.ID, o.verbose), sc.JobID, output.FormatTime(sc.Next), cronSuffix(sc)))
	if len(rec.Allocs) == 0 {
		p.Plain("\nThe job has no allocations to restart now; each occurrence plans anew from the allocations that exist then.")
	}
	id := output.ShortID(sc.ID, o.verbose)
	p.Plain(fmt.Sprintf("\nThe nomad-restart agent starts each occurrence when due, as a detached restart. List schedules with\n`nomad-restart schedules`, remove this one with `nomad-restart unschedule %s`.", id))
	return nil
}

// runFleetSchedule is `run -jobs '<filter>' -at|-every`: the selection is checked now with
// the user's token, as `run -jobs` checks it (a bad expression, no job, options that
// cannot apply: one line, nothing written), then the schedule's member markers are written
// in the namespaces of the jobs selected now other than the home (the user's consent,
// which the agent checks at each occurrence), then a fleet schedule is stored in the
// fleet's home namespace. The jobs are selected again at each occurrence, by the agent
// with its token: a job created meanwhile that matches is restarted too.
func (a *app) runFleetSchedule(ctx context.Context, o *runOptions) error {
	ss, ses, err := a.openSchedules(ctx, o.client)
	if err != nil {
		return err
	}
	fs, err := fleetsOf(ses)
	if err != nil {
		return err
	}
	sel := fleet.Selection{Namespace: cmp.Or(o.client.withEnv(a.env).namespace, "default"), Filter: o.fleet.jobs}
	got, err := fleetrun.Select(ctx, fs.jobLister(), sel, o.spec, o.fleet.opts)
	if err != nil {
		return selectionError(err)
	}
	now := a.now()
	sc, err := a.newSchedule(o, now)
	if err != nil {
		return err
	}
	sc.ID = uuid.NewString() // the member markers name it
	sc.Namespace = fleetrun.HomeNamespace(sel.Namespace)
	sc.Fleet = &schedule.FleetTarget{Selection: sel, Options: o.fleet.opts}
	if err := putScheduleMembers(ctx, ss, sc, got.Jobs); err != nil {
		return err
	}
	if err := storeSchedule(ctx, ss, sc); err != nil {
		return err
	}
	if o.json {
		return output.WriteJSON(a.stdout, sc)
	}
	p := a.printer(o.verbose, o.json)
	p.Header(now, fmt.Sprintf("Schedule %s of a fleet created: %s selected by %s now; next due %s%s (recorded in Nomad Variables of namespace %q)",
		output.ShortID(sc.ID, o.verbose), output.Plural(len(got.Jobs), "job", "jobs"), describeSelection(sel), output.FormatTime(sc.Next), cronSuffix(sc), sc.Namespace))
	id := output.ShortID(sc.ID, o.verbose)
	p.Plain(fmt.Sprintf("\nThe nomad-restart agent starts each occurrence when due, as a fleet of the jobs the filter selects then\n"+
		"(listed with the agent's token). List schedules with `nomad-restart schedules`, remove this one with\n`nomad-restart unschedule %s`.", id))
	return nil
}

// newSchedule is the schedule run's options ask for, with its first due time after now;
// the caller names what it restarts.
func (a *app) newSchedule(o *runOptions, now time.Time) (*schedule.Schedule, error) {
	sc := &schedule.Schedule{Grace: o.sched.graceDur, CreateTime: now.UTC(), CreatedBy: a.by(), Status: schedule.StatusActive}
	spec := o.spec
	if g := spec.Gates; g != nil && g.PrometheusAddress == "" {
		// The agent that starts the occurrences asks the Prometheus given here; without
		// one, its own -prometheus-address.
		gates := *g
		gates.PrometheusAddress = o.client.withEnv(a.env).prometheusConfig.Address
		spec.Gates = &gates
	}
	sc.SetSpec(spec)
	if o.sched.cron != nil {
		sc.Cron, sc.TimeZone = strings.TrimSpace(o.sched.every), o.sched.timeZone
		next, err := o.sched.cron.Next(now)
		if err != nil || next.IsZero() {
			return nil, usageErrorf("Invalid -every value %q: it names no time after now", o.sched.every)
		}
		sc.Next = next
	} else {
		sc.At, sc.Next = o.sched.when, o.sched.when
	}
	sc.Next = sc.Next.UTC()
	sc.At = sc.At.UTC()
	return sc, nil
}

// storeSchedule stores a new schedule; a denial is one line naming the policy to grant.
func storeSchedule(ctx context.Context, ss *schedule.Store, sc *schedule.Schedule) error {
	err := ss.Create(ctx, sc)
	var perm *schedule.PermissionError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &perm):
		return errors.New(perm.Error())
	case sc.IsFleet():
		return fmt.Errorf("storing the schedule of the fleet of %s: %w", describeSelection(sc.Fleet.Selection), output.Flat(err))
	}
	return fmt.Errorf("storing the schedule of job %q: %w", sc.JobID, output.Flat(err))
}

// cronSuffix is " (<cron> (<zone>))" for an -every schedule, "" for an -at one.
func cronSuffix(sc *schedule.Schedule) string {
	if sc.Cron == "" {
		return ""
	}
	return " (" + sc.When() + ")"
}

// scheduleTarget names what a schedule restarts in sentences: job "web", or the fleet of
// -namespace '*' -jobs '<filter>'.
func scheduleTarget(sc *schedule.Schedule) string {
	if sc.IsFleet() {
		return "the fleet of " + describeSelection(sc.Fleet.Selection)
	}
	return fmt.Sprintf("job %q", sc.JobID)
}

// schedulesCommand is `nomad-restart schedules`.
type schedulesCommand struct{}

// Run is `nomad-restart schedules [-job j] [-json] [-namespace ns]`.
func (schedulesCommand) Run(ctx context.Context, a *app, args []string) error {
	var cf clientFlags
	var jsonOut, verbose bool
	var job string
	fs := newFlagSet("schedules")
	cf.add(fs)
	fs.BoolVar(&jsonOut, "json", false, "")
	fs.BoolVar(&verbose, "verbose", false, "")
	fs.StringVar(&job, "job", "", "")
	if err := parseFlags(fs, "schedules", args); err != nil {
		return err
	}
	if rest := fs.Args(); len(rest) > 0 {
		return usageErrorf("too many arguments %q: schedules takes options only, like -job <job>", strings.Join(rest, " "))
	}
	ns := cf.namespace // only as given: schedule IDs are unique, so list every namespace by default
	if ns == "" {
		ns = "*"
	}
	ss, _, err := a.openSchedules(ctx, cf)
	if err != nil {
		return err
	}
	list, err := ss.List(ctx, ns, job)
	if err != nil {
		return fmt.Errorf("listing schedules: %w", output.Flat(err))
	}
	return output.WriteList(a.stdout, list, jsonOut, "schedules", job, "ID\tJob\tNamespace\tWhen\tNext Due\tLast\tMissed",
		func(s *schedule.Schedule) string {
			next := output.FormatTime(s.Next)
			if s.Status == schedule.StatusDone {
				next = "done"
			}
			ns := s.Namespace
			if s.IsFleet() {
				ns = s.Fleet.Selection.Namespace // where its jobs are selected ("*": every namespace)
			}
			return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", output.ShortID(s.ID, verbose), s.Target(), ns, s.When(), next, lastRun(s, verbose), missedSummary(s))
		})
}

// Help is `nomad-restart schedules -help`.
func (schedulesCommand) Help() string {
	return `Usage: nomad-restart schedules [options]

  List the scheduled restarts (nomad-restart run -at / -every) that the token
  may read: ID, job, namespace, the time or cron expression, the next due
  time, the last occurrence (started with its restart ID, skipped, failed)
  and how many occurrences were missed (due while no agent ran). A scheduled
  fleet (run -jobs '<filter>' -at / -every) shows "fleet: <filter>" as its
  job, the namespace its jobs are selected in, and the fleet it last started.

General Options: Nomad's -address, -region, -namespace (default: every
namespace), -token and TLS options, -request-timeout and -log-level (see
"nomad-restart run -help").

Schedules Options:

  -job=<job>
    Only the schedules of this job (its full ID); scheduled fleets are left
    out.

  -json
    Output the schedules in their JSON format.

  -verbose
    Show full IDs.
`
}

func (schedulesCommand) Synopsis() string { return "List scheduled restarts (run -at, run -every)" }

// lastRun is the latest occurrence's outcome: "started <due> (restart 1a2b3c4d)" (a fleet
// schedule's: "(fleet 1a2b3c4d)"), "skipped <due>: <why>", "starting <due>" while
// claimed, "-" before the first.
func lastRun(s *schedule.Schedule, verbose bool) string {
	started := "restart"
	if s.IsFleet() {
		started = "fleet"
	}
	if s.Pending != nil {
		return fmt.Sprintf("starting %s (%s %s)", output.FormatTime(s.Pending.Due), started, output.ShortID(s.Pending.RestartID, verbose))
	}
	switch s.LastResult {
	case "":
		return "-"
	case schedule.ResultStarted:
		return fmt.Sprintf("started %s (%s %s)", output.FormatTime(s.LastDue), started, output.ShortID(s.LastRestartID, verbose))
	}
	out := fmt.Sprintf("%s %s", s.LastResult, output.FormatTime(s.LastDue))
	if s.LastReason != "" {
		out += ": " + output.OneLine(s.LastReason)
	}
	return out
}

func missedSummary(s *schedule.Schedule) string {
	if s.Missed == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (last due %s)", s.Missed, output.FormatTime(s.LastMissed))
}

// unscheduleCommand is `nomad-restart unschedule`.
type unscheduleCommand struct{}

// Run is `nomad-restart unschedule <schedule-id-or-prefix>`.
func (unscheduleCommand) Run(ctx context.Context, a *app, args []string) error {
	var cf clientFlags
	var verbose bool
	rest, err := parseClientFlags("unschedule", &cf, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&verbose, "verbose", false, "")
	})
	if err != nil {
		return err
	}
	switch {
	case len(rest) == 0:
		return usageErrorf("missing schedule ID: give the ID or a unique prefix, as in `nomad-restart unschedule <id>` (list them with `nomad-restart schedules`)")
	case len(rest) > 1:
		return usageErrorf("too many arguments %q: unschedule takes one schedule ID (options go before it)", strings.Join(rest, " "))
	case strings.TrimSpace(rest[0]) == "":
		return usageErrorf("empty schedule ID: give the ID or a unique prefix")
	}
	prefix := strings.TrimSpace(rest[0])
	ns := cf.namespace
	if ns == "" {
		ns = "*"
	}
	ss, _, err := a.openSchedules(ctx, cf)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		sc, err := ss.Find(ctx, ns, prefix)
		var amb *schedule.AmbiguousIDError
		switch {
		case errors.As(err, &amb):
			return errors.New(amb.Error())
		case errors.Is(err, schedule.ErrNotFound):
			return fmt.Errorf("no schedule matches ID %q; list schedules with `nomad-restart schedules`", prefix)
		case err != nil:
			return fmt.Errorf("finding schedule %q: %w", prefix, output.Flat(err))
		}
		err = ss.Delete(ctx, sc)
		if errors.Is(err, schedule.ErrConflict) && attempt < 10 {
			continue // an agent recorded an occurrence meanwhile: read it again
		}
		if err != nil {
			return fmt.Errorf("removing schedule %s: %w", output.ShortID(sc.ID, verbose), output.Flat(err))
		}
		started := "restarts"
		if sc.IsFleet() {
			started = "fleets"
			// Best effort: a marker left where the token may not delete consents only to a
			// schedule that no longer exists (a new one gets a new ID).
			_ = ss.DeleteMembers(ctx, sc.ID)
		}
		fmt.Fprintf(a.stdout, "Schedule %s of %s removed (%s); %s it already started are not affected\n", output.ShortID(sc.ID, verbose), scheduleTarget(sc), sc.When(), started)
		return nil
	}
}

// Help is `nomad-restart unschedule -help`.
func (unscheduleCommand) Help() string {
	return `Usage: nomad-restart unschedule [options] <schedule-id>

  Remove a scheduled restart, by its ID or a unique prefix. No further
  occurrence starts; a restart it already started is not affected (cancel it
  with "nomad-restart cancel <restart-id>").

General Options: Nomad's -address, -region, -namespace (default: every
namespace), -token and TLS options, -request-timeout and -log-level (see
"nomad-restart run -help").

Unschedule Options:

  -verbose
    Show full IDs.
`
}

func (unscheduleCommand) Synopsis() string { return "Remove a scheduled restart" }

// openSchedules connects for the schedule commands.
func (a *app) openSchedules(ctx context.Context, cf clientFlags) (*schedule.Store, session, error) {
	ses, err := a.connect(ctx, cf)
	if err != nil {
		return nil, nil, err
	}
	ss, err := scheduleStore(ses)
	if err != nil {
		return nil, nil, err
	}
	return ss, ses, nil
}
