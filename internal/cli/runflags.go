package cli

import (
	"flag"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// State store choices for -state.
const (
	stateAuto  = "auto"
	stateNomad = "nomad"
	stateLocal = "local"
)

// runOptions are the parsed options of `run` (and `demo`, which shares them).
type runOptions struct {
	client  clientFlags
	job     string
	spec    restart.Spec
	verbose bool
	detach  bool
	json    bool
	state   string
	// dryRun prints the plan and changes nothing.
	dryRun bool
	// sched is -at, -every, -time-zone and -schedule-grace (schedule.go): store a schedule.
	sched scheduleFlags
	// fleet is -jobs and the fleet's options (fleet_flags.go): restart the jobs it selects.
	fleet fleetFlags
	// staleOnly is -stale-only: restart only the allocations that `stale` lists, found
	// when the restart is planned (stale.go).
	staleOnly bool
	// notify is -notify, -notify-on and -notify-min (notify.go).
	notify notifyFlags
	// notes say where a default adapted to where run is (no terminal: -on-error fail); the
	// plan shows them.
	notes []string
}

// runFlagValues holds the raw values as typed, before validation.
type runFlagValues struct {
	batchSize, batchWait, onError, health string
	healthyDeadline, minHealthyTime       string
	maxUnavailable, filter                string
	nodes, datacenters                    stringsFlag
	unhealthyFirst                        bool
	groups, tasks                         stringsFlag
	allTasks, reschedule, noShutdown      bool
	yes                                   bool

	// surge is -surge as typed; surgeIgnoreScaling is -surge-ignore-scaling.
	surge              string
	surgeIgnoreScaling bool

	// drain is -drain as typed: "auto" (the default), or a duration (0 for none).
	drain string
	// drainUntil are -drain-until (repeatable), balancerRefresh -balancer-refresh.
	drainUntil, balancerRefresh stringsFlag

	// gates are -gate and its options.
	gates gateFlags
}

// addRunFlags registers the restart options of `nomad job restart` and ours on fs.
func addRunFlags(fs *flag.FlagSet, raw *runFlagValues, o *runOptions) {
	fs.StringVar(&raw.batchSize, "batch-size", "1", "")
	fs.StringVar(&raw.batchWait, "batch-wait", "0s", "")
	fs.Var(&raw.groups, "group", "")
	fs.Var(&raw.tasks, "task", "")
	fs.BoolVar(&raw.allTasks, "all-tasks", false, "")
	fs.BoolVar(&raw.reschedule, "reschedule", false, "")
	fs.BoolVar(&raw.noShutdown, "no-shutdown-delay", false, "")
	fs.StringVar(&raw.onError, "on-error", string(restart.OnErrorAsk), "")
	fs.BoolVar(&raw.yes, "yes", false, "")
	fs.BoolVar(&o.verbose, "verbose", false, "")
	fs.BoolVar(&o.detach, "detach", false, "")
	fs.BoolVar(&o.json, "json", false, "")
	fs.StringVar(&o.state, "state", stateAuto, "")
	fs.StringVar(&raw.health, "health", string(restart.HealthAuto), "")
	// Empty: not given; the group's update block (or Nomad's default) then decides.
	fs.StringVar(&raw.healthyDeadline, "healthy-deadline", "", "")
	fs.StringVar(&raw.minHealthyTime, "min-healthy-time", "", "")
	o.client.consul.add(fs)
	fs.StringVar(&raw.maxUnavailable, "max-unavailable", "", "")
	fs.BoolVar(&o.dryRun, "dry-run", false, "")
	fs.StringVar(&raw.filter, "filter", "", "")
	fs.Var(&raw.nodes, "node", "")
	fs.Var(&raw.datacenters, "datacenter", "")
	fs.BoolVar(&raw.unhealthyFirst, "unhealthy-first", false, "")
	fs.StringVar(&raw.surge, "surge", "", "")
	fs.BoolVar(&raw.surgeIgnoreScaling, "surge-ignore-scaling", false, "")
	fs.StringVar(&raw.drain, "drain", restart.DrainAuto, "")
	fs.Var(&raw.drainUntil, "drain-until", "")
	fs.Var(&raw.balancerRefresh, "balancer-refresh", "")
	raw.gates.add(fs)
	o.client.prometheus.add(fs)
	o.notify.add(fs)
}

// parseRunArgs parses and validates `run` arguments without touching the cluster.
// interactive says whether questions can be asked on this terminal.
func parseRunArgs(args []string, interactive bool) (*runOptions, error) {
	o := &runOptions{}
	var raw runFlagValues
	fs := newFlagSet("run")
	o.client.add(fs)
	addRunFlags(fs, &raw, o)
	o.sched.add(fs)
	o.fleet.add(fs)
	fs.BoolVar(&o.staleOnly, "stale-only", false, "")
	if err := parseFlags(fs, "run", args); err != nil {
		return nil, err
	}
	o.fleet.parsed(fs)
	rest := fs.Args()
	switch {
	case o.fleet.selected() && len(rest) > 0:
		return nil, usageErrorf("-jobs and a job argument %q cannot be used together: give the job, or -jobs '<filter>' to restart the jobs it selects", strings.Join(rest, " "))
	case o.fleet.selected():
	case len(rest) == 0:
		return nil, usageErrorf("missing job: give the job ID or a unique prefix, as in `nomad-restart run [options] <job>`, or -jobs '<filter>' to restart the jobs a filter selects")
	case len(rest) > 1:
		return nil, usageErrorf("too many arguments %q: run takes one job (options go before it), as in `nomad-restart run [options] <job>`", strings.Join(rest, " "))
	}
	if err := o.validateStaleOnly(); err != nil {
		return nil, err
	}
	if !o.fleet.selected() {
		o.job = strings.TrimSpace(rest[0])
		if o.job == "" {
			return nil, usageErrorf("empty job: give the job ID or a unique prefix")
		}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if err := raw.validate(o, given, interactive); err != nil {
		return nil, err
	}
	if err := o.fleet.validate(o); err != nil {
		return nil, err
	}
	if err := o.sched.validate(o, time.Now()); err != nil {
		return nil, err
	}
	return o, nil
}

// validateStaleOnly refuses -stale-only where the stale allocations could not be those of
// the moment the restart is planned: a fleet plans each job when its turn comes, a
// schedule at each occurrence.
func (o *runOptions) validateStaleOnly() error {
	switch {
	case !o.staleOnly:
	case o.fleet.selected():
		return usageErrorf("-stale-only cannot be used with -jobs: restart each job's stale allocations with `nomad-restart run -stale-only <job>` (`nomad-restart stale` lists them)")
	case o.sched.scheduled():
		return usageErrorf("-stale-only cannot be used with -at or -every: the stale allocations are those found when run plans; run `nomad-restart run -stale-only <job>` at that time, or drop -stale-only")
	}
	return nil
}

// validate turns the raw values into o.spec through restart.Options.Resolve, the one place
// where a restart's options get their defaults and checks (the page and job meta go through
// it too): one line naming the problem and the fix, always the same one for a command line
// with several mistakes. given names the flags the command line set.
func (raw *runFlagValues) validate(o *runOptions, given map[string]bool, interactive bool) error {
	res, err := raw.options(given).Resolve(o.filing(interactive))
	if err != nil {
		return usageErrorf("%s", capitalInvalid(err))
	}
	o.spec, o.notes = res.Spec, res.Notes
	if err := o.client.consul.validate(); err != nil {
		return err
	}
	if err := o.client.prometheus.validate(); err != nil {
		return err
	}
	return validState(o.state)
}

// filing says where the restart is filed from, which decides whether its questions can be
// answered: a detached or scheduled restart's with `nomad-restart answer`, a foreground
// one's only at a terminal (-json prints lines for a program, which answers nothing). A dry
// run is planned as the run it previews.
func (o *runOptions) filing(interactive bool) restart.Filing {
	switch {
	case o.detach || o.sched.scheduled():
		return restart.Detached
	case interactive && !o.json:
		return restart.AtTerminal
	}
	return restart.NoTerminal
}

// options are the values as typed, those the command line set only: Resolve gives the
// others their defaults.
func (raw *runFlagValues) options(given map[string]bool) restart.Options {
	val := func(flag, v string) restart.Value {
		if !given[flag] {
			return restart.Value{}
		}
		return restart.Given(v)
	}
	g := raw.gates
	return restart.Options{
		BatchSize:          val("batch-size", raw.batchSize),
		BatchWait:          val("batch-wait", raw.batchWait),
		Groups:             raw.groups,
		Tasks:              raw.tasks,
		AllTasks:           raw.allTasks,
		Reschedule:         raw.reschedule,
		NoShutdownDelay:    raw.noShutdown,
		OnError:            val("on-error", raw.onError),
		Yes:                raw.yes,
		Health:             val("health", raw.health),
		HealthyDeadline:    val("healthy-deadline", raw.healthyDeadline),
		MinHealthyTime:     val("min-healthy-time", raw.minHealthyTime),
		MaxUnavailable:     val("max-unavailable", raw.maxUnavailable),
		Filter:             val("filter", raw.filter),
		Nodes:              raw.nodes,
		Datacenters:        raw.datacenters,
		UnhealthyFirst:     raw.unhealthyFirst,
		Surge:              val("surge", raw.surge),
		SurgeIgnoreScaling: raw.surgeIgnoreScaling,
		Drain:              val("drain", raw.drain),
		DrainUntil:         raw.drainUntil,
		BalancerRefresh:    raw.balancerRefresh,
		Gates:              g.gates,
		GateDelay:          val("gate-delay", g.delay),
		GateInterval:       val("gate-interval", g.interval),
		GateCount:          val("gate-count", g.count),
		GateFailureLimit:   val("gate-failure-limit", g.failureLimit),
		GateErrorLimit:     val("gate-error-limit", g.errorLimit),
		GateNoData:         val("gate-no-data", g.noData),
		GateDryRun:         g.dryRun,
	}
}

// capitalInvalid is the first line of a parse error of package restart, as a sentence of
// our own: restart's errors start "invalid", ours "Invalid".
func capitalInvalid(err error) string {
	return strings.Replace(firstLine(err.Error()), "invalid", "Invalid", 1)
}

func validState(s string) error {
	switch s {
	case stateAuto, stateNomad, stateLocal:
		return nil
	}
	return usageErrorf("Invalid -state value %q: valid options are \"auto\" (Nomad Variables where the token may write them, else local), \"nomad\" and \"local\"", s)
}

// describeSpec is a short human summary of a restart's options, for status.
func describeSpec(s restart.Spec) string {
	var parts []string
	parts = append(parts, "batch-size="+restart.FormatBatchSizes(s.BatchSizes))
	if s.BatchWaitAsk {
		parts = append(parts, "batch-wait=ask")
	} else if s.BatchWait > 0 {
		parts = append(parts, "batch-wait="+s.BatchWait.String())
	}
	parts = appendEach(parts, "group=", s.Groups)
	parts = appendEach(parts, "task=", s.Tasks)
	if s.AllTasks {
		parts = append(parts, "all-tasks")
	}
	if s.Reschedule {
		parts = append(parts, "reschedule")
	}
	if s.NoShutdownDelay {
		parts = append(parts, "no-shutdown-delay")
	}
	parts = append(parts, fmt.Sprintf("on-error=%s", s.OnError))
	if s.Yes {
		parts = append(parts, "yes")
	}
	if s.Health != "" {
		parts = append(parts, "health="+string(s.Health))
	}
	for _, g := range sortedKeys(s.GroupHealth) {
		h := s.GroupHealth[g]
		parts = append(parts, fmt.Sprintf("%s:min-healthy-time=%s,healthy-deadline=%s", g, h.MinHealthyTime, h.HealthyDeadline))
	}
	if s.MaxUnavailable != nil {
		parts = append(parts, "max-unavailable="+restart.FormatBatchSizes([]restart.BatchSize{*s.MaxUnavailable}))
	}
	if s.Filter != "" {
		parts = append(parts, fmt.Sprintf("filter=%q", s.Filter))
	}
	parts = appendEach(parts, "node=", s.Nodes)
	parts = appendEach(parts, "datacenter=", s.Datacenters)
	if s.UnhealthyFirst {
		parts = append(parts, "unhealthy-first")
	}
	if s.Surge > 0 {
		parts = append(parts, fmt.Sprintf("surge=%d", s.Surge))
	}
	if s.SurgeIgnoreScaling {
		parts = append(parts, "surge-ignore-scaling")
	}
	if s.Drain > 0 {
		parts = append(parts, "drain="+s.Drain.String())
	}
	for _, ev := range s.DrainUntil {
		parts = append(parts, fmt.Sprintf("drain-until=%q", ev.String()))
	}
	if g := s.Gates; g != nil {
		for _, spec := range g.Specs {
			parts = append(parts, fmt.Sprintf("gate=%q", spec))
		}
		parts = append(parts, "gates-measure="+describeGatePolicy(g.Policy))
	}
	if !s.StartedBefore.IsZero() {
		parts = append(parts, "started-before="+s.StartedBefore.UTC().Format(time.RFC3339))
	}
	if s.OnlyAllocs != nil {
		parts = append(parts, fmt.Sprintf("stale-only=%d allocation(s)", len(s.OnlyAllocs)))
	}
	if s.CreatedBeforeIndex > 0 {
		parts = append(parts, fmt.Sprintf("created-before-index=%d", s.CreatedBeforeIndex))
	}
	return strings.Join(parts, " ")
}

// appendEach appends prefix+v for each of values, as a repeated flag is shown.
func appendEach(parts []string, prefix string, values []string) []string {
	for _, v := range values {
		parts = append(parts, prefix+v)
	}
	return parts
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fleetFlags are the options of `run -jobs`: a fleet restart of the jobs a filter selects.
type fleetFlags struct {
	// jobs is -jobs, Nomad's filter expression on its jobs list; given, run restarts a fleet.
	jobs string
	// maxParallel and maxFailed are the numbers as typed, read by validate.
	maxParallel, maxFailed string
	order, busy            string
	// after, afterOutside and waveWait are -after (repeated), -after-outside and
	// -wave-wait as typed: the order of the fleet's jobs in waves.
	after                  stringsFlag
	afterOutside, waveWait string
	// given names the fleet options set on the command line, to refuse them without -jobs.
	given []string
	// opts is the validated options (validate).
	opts fleet.Options
}

// fleetOnlyFlags are the options that mean something only with -jobs.
var fleetOnlyFlags = []string{"max-parallel-jobs", "max-failed-jobs", "order", "busy", "after", "after-outside", "wave-wait"}

func (f *fleetFlags) add(fs *flag.FlagSet) {
	d := fleet.DefaultOptions()
	fs.StringVar(&f.jobs, "jobs", "", "")
	fs.StringVar(&f.maxParallel, "max-parallel-jobs", strconv.Itoa(d.MaxParallelJobs), "")
	fs.StringVar(&f.maxFailed, "max-failed-jobs", strconv.Itoa(d.MaxFailedJobs), "")
	fs.StringVar(&f.order, "order", string(d.Order), "")
	fs.StringVar(&f.busy, "busy", string(d.Busy), "")
	fs.Var(&f.after, "after", "")
	fs.StringVar(&f.afterOutside, "after-outside", string(d.AfterOutside), "")
	fs.StringVar(&f.waveWait, "wave-wait", d.WaveWait.String(), "")
}

// parsed notes which fleet options the command line set (fs is parsed).
func (f *fleetFlags) parsed(fs *flag.FlagSet) {
	fs.Visit(func(fl *flag.Flag) {
		for _, name := range fleetOnlyFlags {
			if fl.Name == name {
				f.given = append(f.given, "-"+name)
			}
		}
	})
	f.jobs = strings.TrimSpace(f.jobs)
}

// selected says whether the command line asks for a fleet (-jobs given).
func (f *fleetFlags) selected() bool { return f.jobs != "" }

// validate checks the fleet's options against the rest of the command line, in a fixed
// order, before anything is read or written: one line naming the problem and the fix.
func (f *fleetFlags) validate(o *runOptions) error {
	if !f.selected() {
		if len(f.given) > 0 {
			return usageErrorf("%s applies to fleet restarts only: add -jobs '<filter>' to select the jobs, or drop %s", f.given[0], f.given[0])
		}
		return nil
	}
	if o.state == stateLocal {
		return usageErrorf("-state local cannot keep a fleet: fleets and their restarts are recorded in Nomad Variables; drop -state local")
	}
	parallel, err := wholeNumber("max-parallel-jobs", f.maxParallel)
	if err != nil {
		return err
	}
	failed, err := wholeNumber("max-failed-jobs", f.maxFailed)
	if err != nil {
		return err
	}
	opts := fleet.Options{MaxParallelJobs: parallel, MaxFailedJobs: failed,
		Order: fleet.OrderBy(f.order), Busy: fleet.Busy(f.busy), OnError: o.spec.OnError, AfterOutside: fleet.AfterOutside(f.afterOutside)}
	if err := f.parseWaves(&opts); err != nil {
		return usageErrorf("%s", capitalInvalid(err))
	}
	if err := opts.Validate(); err != nil {
		return usageErrorf("%s", capitalInvalid(err))
	}
	f.opts = opts
	return nil
}

// parseWaves reads -after and -wave-wait into opts.
func (f *fleetFlags) parseWaves(opts *fleet.Options) error {
	for _, v := range f.after {
		d, err := fleet.ParseAfter(v)
		if err != nil {
			return err
		}
		opts.After = append(opts.After, d)
	}
	wait, err := fleet.ParseWaveWait(f.waveWait)
	opts.WaveWait = wait
	return err
}

// wholeNumber reads the value of a flag that takes a number of jobs.
func wholeNumber(flagName, v string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, usageErrorf("Invalid -%s value %q: give a whole number of jobs, like 2", flagName, v)
	}
	return n, nil
}

// describeFleetOptions is a short human summary of a fleet's own options, for status and
// the dry run.
func describeFleetOptions(o fleet.Options) string {
	return strings.Join([]string{
		"max-parallel-jobs=" + strconv.Itoa(o.MaxParallelJobs),
		"max-failed-jobs=" + strconv.Itoa(o.MaxFailedJobs),
		"order=" + string(o.Order),
		"busy=" + string(o.Busy),
		"on-error=" + string(o.OnError),
	}, " ") + describeWaveOptions(o)
}

// describeWaveOptions is the order options of a fleet in waves, "" for one without.
func describeWaveOptions(o fleet.Options) string {
	var parts []string
	for _, d := range o.After {
		parts = append(parts, fmt.Sprintf("after=%q", d.String()))
	}
	if o.AfterOutside == fleet.AfterOutsideIgnore {
		parts = append(parts, "after-outside=ignore")
	}
	if o.WaveWait > 0 {
		parts = append(parts, "wave-wait="+o.WaveWait.String())
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, " ")
}
