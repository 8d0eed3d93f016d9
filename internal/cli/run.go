package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// runCommand is `nomad-restart run`.
type runCommand struct{}

// Run is `nomad-restart run [options] <job>`.
func (runCommand) Run(ctx context.Context, a *app, args []string) error {
	o, err := parseRunArgs(args, a.interactive)
	if err != nil {
		return err
	}
	if o.sched.scheduled() {
		return a.runSchedule(ctx, o) // -at / -every: store a schedule (schedule.go)
	}
	if o.fleet.selected() {
		return a.runFleet(ctx, o) // -jobs: a fleet restart (fleet_run.go)
	}
	return a.runRestart(ctx, o, nil)
}

// Help is `nomad-restart run -help`.
func (runCommand) Help() string {
	return `Usage: nomad-restart run [options] <job>
       nomad-restart run -jobs '<filter>' [options]

  Restart every allocation of a job, in batches, as "nomad job restart" does,
  with a durable record: the restart gets an ID, can be followed, paused,
  resumed and canceled from any terminal, and a crashed or detached run is
  resumed without restarting any allocation twice. A batch is done only when
  the restarted tasks run again and, where the groups define checks, those
  checks pass ("-health auto").

  The job is an ID or a unique prefix. Ctrl-C detaches: the restart stops
  after the requests in flight are recorded; continue it with
  "nomad-restart resume <id>".

  With -jobs, restart a fleet: every job that Nomad's filter expression
  selects on its jobs list (e.g. 'Name matches "^api-"'), each through a
  restart of its own, under one fleet ID that status, attach, pause, resume,
  cancel and answer take. The per-job options below apply to every job; a
  job's own nomad-restart.* meta overrides them for that job. With
  -namespace '*' the jobs of every namespace the token may list are
  selected, and the fleet is recorded in namespace "default"; otherwise in
  the namespace named.

` + generalOptions + `
Restart Options (those of "nomad job restart"):

  -all-tasks
    Restart every task, including the ones that have already run, such as
    non-sidecar prestart tasks. Cannot be used with -task.

  -batch-size=<n|n%>
    Number of allocations to restart at once, or a percentage of the
    eligible allocations (rounded up). Progressive sizes such as 1,25%
    are accepted: the last one repeats. Default 1.

  -batch-wait=<duration|ask>
    Time to wait between batches. "ask" stops between batches for an
    answer (y, n, or a new wait duration). Default 0.

  -group=<name>
    Only restart allocations of this group. Repeatable.

  -no-shutdown-delay
    Ignore shutdown_delay when stopping allocations (-reschedule). Nomad's
    restart endpoint has no such option, so in-place restarts keep it.

  -on-error=<ask|fail>
    What to do when a batch has errors: ask, or stop. Default ask.

  -reschedule
    Stop each allocation and wait for its replacement to run, instead of
    restarting in place. Not for sysbatch jobs. Cannot be used with -task.

  -task=<name>
    Only restart this task (allocations without it are skipped).
    Repeatable. Cannot be used with -all-tasks or -reschedule.

  -yes
    Answer yes to every question: multi-region jobs are restarted in this
    region only, recoverable batch errors are ignored, no stop between
    batches.

  -verbose
    Full IDs, and the allocations skipped.

Our Options:

  -detach
    Record the restart, print its ID, and exit; drive it later with
    "nomad-restart resume <id>".

  -json
    Print one JSON event per line, then the final record.

  -health=<auto|checks|running|none>
    When a restarted allocation counts as done. "checks": every targeted
    task runs again after the restart (or the replacement runs) and every
    check that counts passes (Nomad-native checks of mode healthiness, and
    the Consul checks of the allocation's services), all continuously for
    the min healthy time. "running": the tasks run again. "none": as Nomad,
    when the restart request returned. "auto" (default): "checks" where the
    targeted groups define checks (and their update block does not say
    health_check = "task_states"), else "running".

  -healthy-deadline=<duration>
    How long an allocation may take to be healthy before it fails (then
    -on-error decides). Default: with checks, the group's update block, else
    5m; otherwise 5m.

  -min-healthy-time=<duration>
    How long it must stay healthy before it counts as done. Default: with
    checks, the group's update block, else 10s; otherwise 0.

  -dry-run
    Print the plan (batches with allocation IDs, names, groups and nodes,
    and what gates each batch) and change nothing. It asks nothing, so it
    runs without a terminal (a script, CI) and without -yes.

  -filter=<expression>
    Restart only the allocations that match Nomad's filter expression (on
    an allocation's fields, like 'TaskGroup == "web"'), evaluated by Nomad.

  -node=<id prefix or name>, -datacenter=<name>
    Restart only the allocations on these nodes, or in these datacenters.
    Repeatable. A node or datacenter that does not exist (or that the job
    does not run in) is refused.

  -unhealthy-first
    Put the allocations already out of service first in the plan.

  -stale-only
    Restart only the allocations that "nomad-restart stale" lists for the
    job: those running with a template that Nomad re-rendered after their
    tasks started, found when the restart is planned. When there is none,
    say so and exit 0 without recording a restart. Not with -jobs, -at or
    -every. Finding change_mode noop templates' renders needs the read-fs
    capability: without it the run is refused.

  -max-unavailable=<n|n%>
    How many allocations of a group may be out of service at once: those
    unhealthy for any reason plus those being restarted. A batch starts only
    within it; otherwise the restart waits, says why, and gives up at the
    healthy deadline (then -on-error decides). Default: the batch size.

  -surge=<n>
    Service jobs: before the first batch, scale each targeted group up by n
    allocations (Nomad's job scale endpoint), wait until they are healthy
    (the same gate as -health, and Nomad's deployment for the scale), then
    restart the planned allocations only, and scale each group back before
    the restart ends, whatever way it ends. So a one- or two-instance
    service keeps serving. A group with a scaling policy is refused unless
    -surge-ignore-scaling; the token needs the scale-job capability.

  -surge-ignore-scaling
    Surge even groups whose count a scaling policy (the autoscaler) manages.

  -drain=<duration|auto>
    Before each allocation's restart or stop, take its instances of the
    Consul services that Nomad stops with no delay (no shutdown_delay, or
    a task's service on an in-place restart) out of Consul's passing
    answers for this long, so that a load balancer reading them stops
    sending requests before the instance stops. It registers, through
    Consul's catalog, a critical check "nomad-restart-drain:<service ID>"
    on each instance and removes it once the request returned (the node's
    Consul agent removes it by itself at its next full sync, within two
    minutes, should nomad-restart die first). The token
    (-consul-token) needs service:write on the service; when Consul
    refuses, the restart goes on undrained and says so. Default auto,
    where the health gate reads Consul checks (not with -health none): as
    long as the balancer the service's tags name needs (traefik.* tags:
    Traefik, 15s refresh + 2s throttle = 17s; urlprefix- tags: Fabio, 2s),
    else 2s. 0: no drain. With -drain-until, the longest the drain waits
    for its evidence. Nomad's own service provider cannot be drained.

  -drain-until=<balancer>
    Where to see that the load balancer stopped sending to the instance,
    repeatable: the drain ends as soon as every one named dropped it, and
    at the latest after -drain (then a warning names the balancer that
    still sent to it). Checked every 250ms:
      traefik=http://HOST:8080      Traefik's API: /api/http/services no
                                    longer lists the instance's address
      haproxy=http://HOST:PORT/URI  HAProxy's stats (CSV): the instance's
      haproxy=unix:/PATH            server in MAINT or DRAIN, or gone
                                    (a stats page, or the runtime API)
      envoy=http://127.0.0.1:19000  Envoy's admin /clusters no longer
                                    lists the instance as healthy
      prometheus:<PromQL>           the query returns a series (as an
                                    alert fires); {{address}} {{host}}
                                    {{port}} {{alloc}} {{alloc_name}}
                                    {{service}} {{job}} {{namespace}}
                                    stand for the instance
    A balancer that does not answer when the restart is planned is refused
    before anything restarts. Job meta: nomad-restart.drain-until, one a
    line.

  -balancer-refresh=<name>=<duration>
    How often the balancer the services' tags name reads Consul, where it
    is not its documented default ("traefik=5s": our Traefik refreshes
    every 5s): -drain auto drains for it plus its throttle. Repeatable;
    names: traefik, fabio. Job meta: nomad-restart.balancer-refresh.

  -gate='<name>: <PromQL> <op> <number>'
    A metric gate, repeatable: after each batch is healthy, the query must
    hold before the next batch starts (and before the restart counts as
    succeeded), as Argo Rollouts' analysis judges. <op> is one of < <= > >=
    == !=; the comparison is the last operator and number of the value, the
    query before it is sent to Prometheus as it is after its template
    variables are filled in: {{job}}, {{namespace}}, {{group}}, {{batch}},
    {{allocs}} and {{alloc_names}} (regular expressions of the batch's
    allocation IDs and names). For example:
      -gate 'errors: sum(rate(http_requests_total{job="{{job}}",code=~"5.."}[30s]))
             / sum(rate(http_requests_total{job="{{job}}"}[30s])) < 0.02'
    The query must give one number (aggregate it). Each query is asked once
    before anything restarts: one that fails stops the run there. A failed
    gate acts as a batch with errors (-on-error); -yes does not wave it
    through: the restart stops. A job's meta nomad-restart.gate.<name> =
    "<PromQL> <op> <number>" gives it gates of its own (fleets, rollouts).

  -gate-delay=<duration>, -gate-interval=<duration>, -gate-count=<n>
    After a batch is healthy, wait -gate-delay (default 0s), then measure
    every gate -gate-count times (default 3), -gate-interval apart
    (default 10s). A query on the batch's own instances ({{allocs}}) wants
    a delay of at least its rate window's range: until then the window
    still holds the instance's traffic from before its restart.

  -gate-failure-limit=<n>, -gate-error-limit=<n>
    A gate fails when more than -gate-failure-limit measurements failed
    (default 0), or more than -gate-error-limit queries in a row got no
    answer (default 4; a failed query is retried at the next interval).

  -gate-no-data=<fail|pass>
    What a query that matches no series (or gives NaN, as a ratio of rates
    without traffic does) counts as: fail (the default: no traffic is no
    evidence) or pass.

  -gate-dry-run
    Measure and record the gates, never stop the restart for them.

  -prometheus-address=<url>, -prometheus-token-file=<path>,
  -prometheus-ca-cert=<path>, -prometheus-client-cert=<path>,
  -prometheus-client-key=<path>, -prometheus-tls-skip-verify
    Where Prometheus's HTTP API is, for -gate; unset values come from
    NOMAD_RESTART_PROMETHEUS_ADDR, NOMAD_RESTART_PROMETHEUS_TOKEN_FILE,
    NOMAD_RESTART_PROMETHEUS_CACERT, NOMAD_RESTART_PROMETHEUS_CLIENT_CERT and
    NOMAD_RESTART_PROMETHEUS_CLIENT_KEY; a bearer token may also be given in
    NOMAD_RESTART_PROMETHEUS_TOKEN. The address is kept in the restart's
    record (no token is), so that a driver resuming it asks the same one.

  -notify=<name>=<url>
    Send notifications of this restart to a sink: a generic webhook
    (http(s)://, the JSON body of docs/notifications.md), Slack's incoming
    webhook (slack+https://hooks.slack.com/services/...), a Teams workflow's
    webhook (teams+https://...), any shoutrrr service URL (discord://,
    telegram://, ntfy://, smtp://, ...), or nomadvar://<path>#<key>: the
    Nomad Variable that holds the URL, so that the secret stays in the
    cluster. Repeatable; NOMAD_RESTART_NOTIFY_<NAME>=<url> names one too.
    Sending never delays the restart; run waits up to 5s at its end for the
    last ones. A URL is never printed or logged whole.

  -notify-on=<trigger>[,<trigger>..]=<name>[,<name>..]
    Which triggers a sink hears (default: every one): started, question,
    batch-failed, gate-failed, paused, resumed, canceled, succeeded, failed,
    config-change, stale-found, schedule-fired, fleet-started,
    fleet-finished, or all.
    Kept in the record: an agent that adopts the restart honours them for
    the sinks of those names it has. Repeatable.

  -notify-min=<info|warning|error>
    Send only the notifications of this severity or above. Default info.

  -notify-page-url=<url>
    The agent's page as people reach it, for the links in messages.

  -at=<time>
    Do not restart now: store a schedule, print its ID and exit. The
    nomad-restart agent starts the restart at that time, as a detached
    restart planned from the allocations that exist then. An RFC 3339 time
    (2026-12-01T02:00:00Z), a local date and time ("2026-12-01 02:00"), or
    a time of day (02:00: the next one, today or tomorrow). Not with
    -detach, -dry-run or -state local. List schedules with
    "nomad-restart schedules", remove one with "nomad-restart unschedule".

  -every=<cron expression>
    As -at, for every time the cron expression names, with the semantics of
    Nomad's periodic block ("0 2 * * *", "@daily", and a seconds field when
    there are 6 or 7 fields). An occurrence due while the job has a restart
    in progress is skipped, not queued.

  -time-zone=<IANA name>
    The time zone of -every (default UTC, as Nomad's periodic time_zone)
    and of -at's local forms (default the local zone).

  -schedule-grace=<duration>
    How late an occurrence may still start (default 5m). One due longer ago
    when an agent could first start it (no agent was running) is reported
    as missed by "nomad-restart schedules", not run.

  -consul-address=<addr>, -consul-token=<token>, -consul-ca-cert=<path>,
  -consul-client-cert=<path>, -consul-client-key=<path>,
  -consul-tls-server-name=<name>, -consul-tls-skip-verify
    Where Consul's health API is, for the checks of Consul services; unset
    values come from CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, CONSUL_CACERT,
    CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY, CONSUL_TLS_SERVER_NAME,
    CONSUL_HTTP_SSL and CONSUL_HTTP_SSL_VERIFY. A job with Consul checks is
    refused before anything changes when Consul cannot be read, unless
    -health running.

Fleet Options:

  -jobs=<filter>
    Restart the jobs Nomad's filter expression selects on its jobs list
    (as "nomad job list -filter": Name, Type, NodePool, Datacenters, Meta,
    Status...), instead of one job. Periodic and parameterized jobs are left
    out (their launches are jobs of their own). The selection is fixed when
    the fleet is created. A bad expression, a selection of no job, or
    options that cannot apply to a selected job (-surge on a batch job) are
    refused before anything is written. Fleets are kept in Nomad Variables:
    not with -state local. With -at or -every, a scheduled fleet: checked
    now, then selected again at each occurrence by the agent, with its token.

  -max-parallel-jobs=<n>
    How many jobs restart at once. Default 1.

  -max-failed-jobs=<n>
    How many jobs may fail before no new job starts; the jobs restarting
    then finish, and -on-error decides: "fail" ends the fleet failed, "ask"
    waits for "nomad-restart answer <fleet-id> yes|no". Default 0.

  -order=<name|priority|listed>
    The order the jobs take their turn: by namespace and name (default), by
    Nomad priority (highest first), or as Nomad lists them.

  -busy=<wait|skip>
    What to do with a job that already has a restart in progress: wait for
    it to end, then restart the job (default), or skip the job.

  -after='<job>: <upstream>[, <upstream>...]'
    Restart the job only after its upstreams (repeatable; "namespace/job"
    names a job of another namespace). Merged with each job's meta
    nomad-restart.after = "<job>[,<job>...]". The jobs are sorted into
    waves; a job starts once each upstream's restart succeeded, its
    allocations are healthy by the -health rules, and its gates held for
    -wave-wait. An upstream outside the selection is not restarted but must
    be healthy. A cycle, or an upstream that does not exist, is refused.

  -after-outside=<wait|ignore>
    Whether an upstream outside the selection must be healthy before its
    downstream jobs start (wait, the default) or is not looked at.

  -wave-wait=<duration>
    How long an upstream's gates (-gate, its meta nomad-restart.gate.*)
    must hold after its restart, its allocations healthy, before the jobs
    after it start. Default 0.

  -dry-run prints the fleet's plan: the jobs in order with their type,
  allocations, batches, the options their meta overrides and any problem,
  and the limits. -detach records the fleet, prints its ID and exits; drive
  it with "nomad-restart resume <fleet-id>". Otherwise this process drives
  the fleet and its jobs' restarts (each line of a job starts with [job]),
  and exits 0 when every job was restarted (or skipped for a recorded
  reason), 1 otherwise. On a terminal, the questions of the fleet and of
  its jobs' restarts are asked here; elsewhere, answer them with
  "nomad-restart answer <fleet-id> yes|no". Ctrl-C detaches.
`
}

func (runCommand) Synopsis() string { return "Restart every allocation of a job, in batches" }

// runRestart is the flow of `run` (and `demo`): connect, plan, confirm, record, then drive
// or detach. Every refusal before Create leaves the cluster and the stores unchanged.
// opened, when not nil, is an already open session (the demo's).
func (a *app) runRestart(ctx context.Context, o *runOptions, opened session) error {
	setup, err := o.notify.setup(a.environment())
	if err != nil {
		return err
	}
	ses := opened
	if ses == nil {
		ses, err = a.connect(ctx, o.client)
	} else {
		err = ses.reachable(ctx)
	}
	if err != nil {
		return err
	}
	p := a.printer(o.verbose, o.json)
	if o.staleOnly {
		if err := a.selectStale(ctx, p, ses, o); err != nil {
			return err
		}
		if len(o.spec.OnlyAllocs) == 0 && !o.json {
			// One line, and no plan to print: -json prints the empty plan, as run does
			// when nothing is to be restarted.
			p.Plain(fmt.Sprintf("No allocation of job %q runs with a template re-rendered after its tasks started: nothing to restart", o.job))
			return nil
		}
	}
	plan, err := a.planRestart(ctx, p, ses, o)
	if err != nil {
		return err
	}
	rec := plan.Record
	if len(rec.Allocs) == 0 {
		if o.json {
			p.JSONLine(rec)
		} else {
			p.Plain("No allocations to restart")
		}
		return nil
	}
	if o.dryRun {
		a.printPlan(p, rec, o)
		if g := rec.Spec.Gates; g != nil {
			printGateValues(p, plan.Gates, g.Policy, o.json)
		}
		return gatesAnswered(plan.Gates)
	}
	if err := gatesAnswered(plan.Gates); err != nil {
		return err
	}
	if ok, err := a.confirmMultiRegion(ctx, p, plan, o, "Job restart canceled."); !ok || err != nil {
		return err
	}
	sinks, err := ses.notifySinks(ctx, setup)
	if err != nil {
		return err
	}
	if subs := setup.cfg.On.Record(); subs != nil {
		// Kept in the record: an agent that adopts the restart honours them for its sinks.
		rec.Notify = &restart.Notifications{Subscribe: subs}
	}
	eng, st, h, err := a.recordRestart(ctx, p, ses, rec, o)
	if err != nil {
		return err
	}
	if o.detach {
		a.printDetached(p, rec, o)
		return nil
	}
	box := ses.startOutbox(ctx, setup, sinks, st)
	defer a.flushNotifications(ctx, box)
	return a.drive(ctx, p, eng, st, rec, o.verbose, h.Drive)
}

// printNotes says, once the plan stands, where a default adapted to where run is (no
// terminal: -on-error fail), ahead of the plan.
func (a *app) printNotes(p *output.Printer, o *runOptions) {
	if o.json {
		return
	}
	for _, n := range o.notes {
		p.Header(a.now(), "Note: "+n)
	}
}

// connect opens a session with the client options (the environment's where none are given)
// and checks that Nomad answers.
func (a *app) connect(ctx context.Context, cf clientFlags) (session, error) {
	logger, err := a.logger(cf.logLevel)
	if err != nil {
		return nil, err
	}
	ses, err := a.backend.open(cf.withEnv(a.env), logger, a.holder())
	if err != nil {
		return nil, err
	}
	if err := ses.reachable(ctx); err != nil {
		return nil, err
	}
	return ses, nil
}

// planRestart plans the restart and, with -verbose, says which allocations it skips.
// The plan reads the cluster only; it is made with the store Create will use when that is
// already known, so that nothing is written before the operator confirmed.
func (a *app) planRestart(ctx context.Context, p *output.Printer, ses session, o *runOptions) (*planned, error) {
	planStore, err := a.storeForPlan(ses, o.state)
	if err != nil {
		return nil, err
	}
	plan, err := ses.engine(planStore).Plan(ctx, o.client.namespace, o.job, o.spec)
	if err != nil {
		return nil, planError(err)
	}
	a.printNotes(p, o)
	if !o.json {
		for _, w := range plan.Warnings {
			p.Header(a.now(), "Warning: "+w)
		}
	}
	if o.verbose && !o.json {
		for _, s := range plan.Skipped {
			if s.Alloc != nil {
				p.Detail(a.now(), fmt.Sprintf("Skipping allocation %q because %s", output.ShortID(s.Alloc.ID, true), s.Reason))
			}
		}
	}
	return plan, nil
}

// recordRestart chooses the store (-state), records the restart there and says so; it
// returns the engine and store that drive it. Without -detach the restart is recorded with
// this process's lease on it (held), for this process to drive: an agent, which takes up
// every restart no process drives, never takes it up first. With -detach, held is nil and
// the restart waits for a driver.
func (a *app) recordRestart(ctx context.Context, p *output.Printer, ses session, rec *restart.Record, o *runOptions) (eng restarter, st store.Store, h held, err error) {
	st, why, err := a.chooseStore(ctx, ses, o.state, rec.Namespace, rec.JobID, o.verbose)
	if err != nil {
		return nil, nil, nil, err
	}
	eng = ses.engine(st)
	if o.detach {
		err = eng.Create(ctx, rec)
	} else {
		h, err = eng.CreateHeld(ctx, rec)
	}
	if err != nil {
		var busy *store.JobBusyError
		if errors.As(err, &busy) {
			return nil, nil, nil, errors.New(jobBusyMessage(busy))
		}
		return nil, nil, nil, fmt.Errorf("recording the restart of job %q in the %s store: %w", rec.JobID, st.Kind(), err)
	}
	if o.json {
		for _, ev := range rec.Events {
			p.JSONLine(ev)
		}
		return eng, st, h, nil
	}
	if why != "" {
		p.Detail(a.now(), why)
	}
	p.Header(a.now(), fmt.Sprintf("Restart %s of job %q created (state: %s)", output.ShortID(rec.ID, o.verbose), rec.JobID, st.Kind()))
	return eng, st, h, nil
}

// printDetached says how to follow and drive a detached restart.
func (a *app) printDetached(p *output.Printer, rec *restart.Record, o *runOptions) {
	if o.json {
		p.JSONLine(rec)
		return
	}
	id := output.ShortID(rec.ID, o.verbose)
	p.Plain(fmt.Sprintf("\nRestart %s is recorded and waits for a driver. Drive it with `nomad-restart resume %s`,", id, id))
	p.Plain(fmt.Sprintf("watch it with `nomad-restart attach %s`, or cancel it with `nomad-restart cancel %s`.", id, id))
}

// planError keeps the engine's one-line refusals as they are.
func planError(err error) error {
	return output.Flat(err)
}

// confirmMultiRegion asks Nomad's multi-region question when the plan's job is
// multi-region and -yes was not given, and says canceled when the answer is no. Without a
// terminal it refuses,
// since there is nobody to answer (Nomad reads an empty answer and exits 0).
func (a *app) confirmMultiRegion(ctx context.Context, p *output.Printer, plan *planned, o *runOptions, canceled string) (bool, error) {
	if plan.Job == nil || !plan.Job.MultiRegion || o.spec.Yes {
		return true, nil
	}
	ok, err := a.askMultiRegion(ctx, p, plan.Record.JobID, o.json)
	if err == nil && !ok {
		p.Plain("\n" + canceled)
	}
	return ok, err
}

// askMultiRegion asks whether to restart a multi-region job in one region.
func (a *app) askMultiRegion(ctx context.Context, p *output.Printer, jobID string, jsonOut bool) (bool, error) {
	if !a.interactive || jsonOut {
		return false, usageErrorf("job %q is multi-region and only this region would be restarted; confirm with -yes", jobID)
	}
	q := &restart.Question{Text: fmt.Sprintf("Are you sure you want to restart multi-region job %q in a single region?", jobID), Options: "y/N", Default: "n"}
	for {
		fmt.Fprintf(a.stdout, "==> %s: %s ", output.FormatTime(a.now()), output.Indent(q.Prompt(), output.TimestampPrefixLen))
		line, ok := a.readLine(ctx)
		if !ok {
			fmt.Fprintln(a.stdout)
			return false, nil
		}
		ans, err := restart.ParseAnswer(q, restart.AtPrompt(q, line))
		if err != nil || ans.Wait != nil {
			p.Plain(strings.Repeat(" ", output.TimestampPrefixLen) + fmt.Sprintf("Invalid answer %q", strings.TrimSpace(line)))
			continue
		}
		return ans.Proceed, nil
	}
}

// storeForPlan picks a store for the planning engine without probing anything: Plan only
// reads the cluster.
func (a *app) storeForPlan(ses session, state string) (store.Store, error) {
	if state == stateLocal {
		return ses.localStore()
	}
	return ses.nomadStore(), nil
}

// chooseStore picks where the record lives (-state). With auto it is Nomad Variables when
// the token may write them, else the local store, and why says so.
func (a *app) chooseStore(ctx context.Context, ses session, state, namespace, jobID string, verbose bool) (st store.Store, why string, err error) {
	switch state {
	case stateLocal:
		st, err = ses.localStore()
		if err != nil {
			return nil, "", fmt.Errorf("opening the local state store: %w; fix the state directory or use -state nomad", err)
		}
		return st, "", nil
	case stateNomad:
		if err := ses.probeNomad(ctx, namespace, jobID); err != nil {
			return nil, "", fmt.Errorf("cannot keep the restart in Nomad Variables (-state nomad): %w", output.Flat(err))
		}
		return ses.nomadStore(), "", nil
	}
	if perr := ses.probeNomad(ctx, namespace, jobID); perr != nil {
		st, err = ses.localStore()
		if err != nil {
			return nil, "", fmt.Errorf("cannot keep the restart in Nomad Variables (%s) nor locally (%w); fix one of them", output.OneLine(perr.Error()), err)
		}
		why := fmt.Sprintf("Keeping the restart record on this machine: this token may not keep it in Nomad Variables of namespace %q (see -verbose, or use -state local)", namespace)
		if verbose {
			why = "Keeping the restart record on this machine: " + output.OneLine(perr.Error())
		}
		return st, why, nil
	}
	return ses.nomadStore(), "", nil
}

// runFleet is `run -jobs '<filter>'`: select the jobs, then print the plan (-dry-run), or
// record the fleet and drive it here or leave it to a driver (-detach). Every refusal
// leaves the cluster unchanged: no variable written (the fleet's member markers are
// removed when the fleet cannot be recorded after them), no allocation restarted.
func (a *app) runFleet(ctx context.Context, o *runOptions) error {
	setup, err := o.notify.setup(a.environment())
	if err != nil {
		return err
	}
	ses, err := a.connect(ctx, o.client)
	if err != nil {
		return err
	}
	fs, err := fleetsOf(ses)
	if err != nil {
		return err
	}
	p := a.printer(o.verbose, o.json)
	sel := fleet.Selection{Namespace: cmp.Or(o.client.withEnv(a.env).namespace, "default"), Filter: o.fleet.jobs}
	got, err := fleetrun.Select(ctx, fs.jobLister(), sel, o.spec, o.fleet.opts)
	if err != nil {
		return selectionError(err)
	}
	a.printNotes(p, o)
	drv := fs.fleetDriver(o.fleet.opts.MaxParallelJobs, true)
	rec := fleetrun.NewRecord(uuid.NewString(), fleetrun.HomeNamespace(sel.Namespace), sel, o.spec, o.fleet.opts, got.Jobs, got.Outside, ses.address(), a.now())
	if o.dryRun {
		a.printFleetPlan(p, rec, drv.Plan(ctx, rec), got.LeftOut)
		return nil
	}
	if err := probeChildNamespaces(ctx, ses, rec); err != nil {
		return err
	}
	sinks, err := ses.notifySinks(ctx, setup)
	if err != nil {
		return err
	}
	if subs := setup.cfg.On.Record(); subs != nil {
		rec.Notify = &restart.Notifications{Subscribe: subs} // for an agent that adopts the fleet
	}
	if err := putFleetMembers(ctx, fs.fleetStore(), rec); err != nil {
		return err
	}
	// Driven here, the fleet is recorded with this process's lease on it: an agent, which
	// takes up the fleets no process drives, never takes it up first.
	var lease store.Lease
	if o.detach {
		err = fs.fleetStore().Create(ctx, rec)
	} else {
		lease, err = drv.CreateHeld(ctx, rec)
	}
	if err != nil {
		deleteFleetMembers(ctx, fs.fleetStore(), rec.ID, sortedKeys(store.MembershipsOf(rec)))
		return fleetCreateError(err, rec)
	}
	a.printFleetCreated(p, rec, got.LeftOut)
	if o.detach {
		a.printFleetDetached(p, rec)
		return nil
	}
	box := ses.startOutbox(ctx, setup, sinks, ses.nomadStore())
	defer a.flushNotifications(ctx, box)
	return a.driveFleet(ctx, p, fs, drv, rec, lease)
}

// selectionError is one line for a selection Select refused: a bad expression, no job,
// options that cannot apply to a selected job, or Nomad refusing the listing.
func selectionError(err error) error {
	var fe *cluster.FilterError
	var empty *fleetrun.EmptySelectionError
	switch {
	case errors.As(err, &fe):
		return usageErrorf("Invalid -jobs expression %q: %s; fix it (Nomad's filter syntax, as for `nomad job list -filter`)", fe.Expr, output.OneLine(fe.Message))
	case errors.As(err, &empty):
		return usageErrorf("%s", empty.Error())
	case errors.Is(err, cluster.ErrPermissionDenied):
		return fmt.Errorf("listing the jobs -jobs selects: %s; the token needs list-jobs in the namespace (or -namespace naming one it may list)", output.OneLine(err.Error()))
	case errors.Is(err, context.Canceled):
		return err
	}
	return usageErrorf("%s", output.OneLine(err.Error()))
}

// probeChildNamespaces checks, without writing anything, that the token may keep each
// selected job's restart record in Nomad Variables: a fleet whose children cannot be
// recorded would fail job after job.
func probeChildNamespaces(ctx context.Context, ses session, rec *fleet.Record) error {
	firstJob := map[string]string{}
	for _, j := range rec.Jobs {
		if _, ok := firstJob[j.Namespace]; !ok {
			firstJob[j.Namespace] = j.JobID
		}
	}
	namespaces := make([]string, 0, len(firstJob))
	for ns := range firstJob {
		namespaces = append(namespaces, ns)
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		if err := ses.probeNomad(ctx, ns, firstJob[ns]); err != nil {
			return fmt.Errorf("cannot keep the restarts of the fleet's jobs in namespace %q: %s", ns, fleetStoreErrorText(err))
		}
	}
	return nil
}

// fleetCreateError is one line for a fleet the store refused to create.
func fleetCreateError(err error, rec *fleet.Record) error {
	var tooLarge *store.FleetTooLargeError
	if errors.As(err, &tooLarge) {
		return usageErrorf("%s", tooLarge.Error())
	}
	return fmt.Errorf("recording the fleet in namespace %q: %s", rec.Namespace, fleetStoreErrorText(err))
}

// fleetStoreErrorText is a store error's text, a denial worded for fleets: they have no
// local store to fall back on, so the fix is the policy alone.
func fleetStoreErrorText(err error) string {
	var perm *store.PermissionError
	if errors.As(err, &perm) {
		denied := &nomadvars.PermissionError{Capability: perm.Capability, Namespace: perm.Namespace, Path: perm.Path}
		return fmt.Sprintf("%s: fleets keep their records and their jobs' restarts in Nomad Variables, and the token's ACL policy needs %s",
			denied.Error(), denied.Policy(perm.Prefix))
	}
	return output.OneLine(err.Error())
}

// printFleetCreated says the fleet is recorded, and which matching jobs it left out.
func (a *app) printFleetCreated(p *output.Printer, rec *fleet.Record, leftOut []string) {
	if p.JSON {
		for _, ev := range rec.Events {
			p.JSONLine(fleetrun.Event{Fleet: rec.ID, Event: ev})
		}
		return
	}
	p.Header(a.now(), fmt.Sprintf("Fleet %s created: %s selected by %s, at most %d at once (recorded in Nomad Variables of namespace %q)",
		output.ShortID(rec.ID, p.Verbose), output.Plural(len(rec.Jobs), "job", "jobs"), describeSelection(rec.Selection), rec.Options.MaxParallelJobs, rec.Namespace))
	if len(leftOut) > 0 {
		p.Detail(a.now(), fmt.Sprintf("Left out %s matching the filter, whose launches are jobs of their own: %s",
			output.Plural(len(leftOut), "periodic or parameterized job", "periodic or parameterized jobs"), joinFew(leftOut, 5)))
	}
}

// printFleetDetached says how to drive, follow and steer a detached fleet.
func (a *app) printFleetDetached(p *output.Printer, rec *fleet.Record) {
	if p.JSON {
		p.JSONLine(newFleetEntry(rec))
		return
	}
	id := output.ShortID(rec.ID, p.Verbose)
	p.Plain(fmt.Sprintf("\nFleet %s is recorded and waits for a driver. Drive it with `nomad-restart resume %s`,", id, id))
	p.Plain(fmt.Sprintf("watch it with `nomad-restart attach %s`, pause it with `nomad-restart pause %s`, or cancel it with `nomad-restart cancel %s`.", id, id, id))
}

// driveFleet drives the fleet in this process, with its children, printing the fleet's
// events and its children's, until it ends or ctx ends (Ctrl-C: a detach), with the lease
// its creation took.
func (a *app) driveFleet(ctx context.Context, p *output.Printer, fs session, drv *fleetrun.Driver, rec *fleet.Record, lease store.Lease) error {
	ended, err := a.runFleetHere(ctx, p, fs.fleetStore(), drv, rec, lease)
	return a.fleetFinish(ctx, p, rec.ID, ended, err)
}

// fleetFinish prints the end of a driven fleet and returns its exit status.
func (a *app) fleetFinish(ctx context.Context, p *output.Printer, id string, rec *fleet.Record, err error) error {
	sid := output.ShortID(id, p.Verbose)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			if p.JSON && rec != nil {
				p.JSONLine(newFleetEntry(rec))
			}
			fmt.Fprintf(a.stderr, "Detached from fleet %s; neither it nor its running restarts are driven now. Resume it with `nomad-restart resume %s`\n", sid, sid)
			return &exitError{code: 1}
		case errors.Is(err, store.ErrLeaseHeld):
			return fleetLeaseHeldError(id, p.Verbose)
		}
		return fmt.Errorf("driving fleet %s: %s; resume it with `nomad-restart resume %s`", sid, output.OneLine(errorText(err)), sid)
	}
	return a.fleetReport(p, rec)
}

// fleetLeaseHeldError says another process drives the fleet; it matches store.ErrLeaseHeld.
func fleetLeaseHeldError(id string, verbose bool) error {
	sid := output.ShortID(id, verbose)
	return fmt.Errorf("fleet %s is driven by another process; follow it with `nomad-restart attach %s`: %w", sid, sid, store.ErrLeaseHeld)
}

// fleetReport prints a finished fleet's outcome: 0 when it succeeded, 1 otherwise (as `run`
// for a restart that did not restart every allocation).
func (a *app) fleetReport(p *output.Printer, rec *fleet.Record) error {
	if p.JSON {
		p.JSONLine(newFleetEntry(rec))
	} else if rec.Status == restart.StatusSucceeded {
		p.Plain(fmt.Sprintf("\nFleet restarted %s successfully!", output.Plural(len(rec.Jobs), "job", "jobs")))
	} else {
		a.printFleetFailure(p, rec)
	}
	if rec.Status == restart.StatusSucceeded {
		return nil
	}
	return &exitError{code: 1}
}

// printFleetFailure names, on stderr, how the fleet ended and the jobs that were not
// restarted.
func (a *app) printFleetFailure(p *output.Printer, rec *fleet.Record) {
	msg := fmt.Sprintf("\nFleet %s %s", output.ShortID(rec.ID, p.Verbose), rec.Status)
	if rec.Reason != "" {
		msg += ": " + p.IDs(rec.Reason)
	}
	fmt.Fprintln(a.stderr, msg)
	for _, j := range rec.Jobs {
		if j.Status == fleet.JobFailed || j.Status == fleet.JobCanceled {
			line := fmt.Sprintf("* job %q (namespace %q) %s", j.JobID, j.Namespace, j.Status)
			if j.Reason != "" {
				line += ": " + p.IDs(j.Reason)
			}
			fmt.Fprintln(a.stderr, line)
		}
	}
}

// joinFew joins at most n of items, saying how many more there are.
func joinFew(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}
