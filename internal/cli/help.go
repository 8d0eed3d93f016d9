package cli

const generalOptions = `General Options:

  -address=<addr>
    The address of the Nomad server. Overrides the NOMAD_ADDR environment
    variable if set. Default = http://127.0.0.1:4646

  -region=<region>
    The region of the Nomad servers to forward commands to. Overrides the
    NOMAD_REGION environment variable if set.

  -namespace=<namespace>
    The target namespace for queries and actions bound to a namespace.
    Overrides the NOMAD_NAMESPACE environment variable if set.

  -token=<token>
    The SecretID of an ACL token to use to authenticate API requests with.
    Overrides the NOMAD_TOKEN environment variable if set.

  -ca-cert=<path>, -ca-path=<path>, -client-cert=<path>, -client-key=<path>
    TLS files, as for the nomad command (NOMAD_CACERT, NOMAD_CAPATH,
    NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY).

  -tls-server-name=<value>
    The server name to use as the SNI host when connecting via TLS
    (NOMAD_TLS_SERVER_NAME).

  -tls-skip-verify
    Do not verify TLS certificates. This is highly not recommended
    (NOMAD_SKIP_VERIFY).

  -request-timeout=<duration>
    How long a request to Nomad, Consul or Prometheus waits for its answer,
    and an answer for its next bytes, before it is given up with one line
    naming the address; a read is tried three times. Blocking queries wait
    their wait (and the server's jitter) on top; Nomad's event stream is
    reconnected when it stays silent well past Nomad's heartbeat; an
    in-place restart's answer, which comes once the tasks stopped, is
    bounded by the healthy deadline. Overrides the
    NOMAD_RESTART_REQUEST_TIMEOUT environment variable if set. Default = 10s

  -state=<auto|nomad|local>
    Where restart records live. "nomad" keeps them in Nomad Variables under
    nomad-restart/<job>/<id> in the job's namespace, so any machine can
    attach, steer or resume them; "local" keeps them in a file on this
    machine; "auto" (the default) uses Nomad Variables where the token may
    write them, else the local store.

  -log-level=<debug|info|warn|error>
    Write debug logs to stderr. Off by default.
`

const helpRun = `
Usage: nomad-restart run [options] <job>
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
    refuses, the restart goes on undrained and says so. Default auto: 2s
    where the health gate reads Consul checks, not with -health none. 0:
    no drain. Nomad's own service provider cannot be drained.

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

const idOptionsHelp = `
Options:

  -state=<auto|nomad|local>, -verbose, and Nomad's -address, -region,
  -namespace, -token and TLS options, and -request-timeout (see
  "nomad-restart run -help").
`

const helpStatus = `
Usage: nomad-restart status [options] [id]

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

const helpAttach = `
Usage: nomad-restart attach [options] <id>

  Follow a restart live, with the same output as "run". Exits 0 when the
  restart succeeded, 1 otherwise. Ctrl-C stops following; the restart goes
  on. On a terminal, questions the restart waits on are asked here. A
  fleet's ID follows the fleet and its running restarts until it ends.

  -json    Print one JSON event per line, then the final record.
` + idOptionsHelp

const helpPause = `
Usage: nomad-restart pause [options] <id>

  Hold a restart: the batch in flight finishes, then no new batch starts
  until "nomad-restart resume <id>". A fleet's ID holds the fleet: no new
  job starts, and its running restarts hold after their batch.
` + idOptionsHelp

const helpResume = `
Usage: nomad-restart resume [options] <id>

  Continue a paused, detached or abandoned restart. Unless another process
  drives it, this process becomes its driver, with live output (Ctrl-C
  detaches again). Allocations already restarted are not restarted again.
  A fleet's ID resumes the fleet and the restarts it paused, and drives
  them here; a job already restarted by the fleet is not restarted again.

  -detach  Only set the restart to run; do not drive it here.
  -json    Print one JSON event per line, then the final record.
` + idOptionsHelp

const helpCancel = `
Usage: nomad-restart cancel [options] <id>

  Cancel a restart: requests in flight finish and are recorded, no more
  allocations are restarted. A fleet's ID cancels the fleet: no new job
  starts, and its running restarts are canceled.
` + idOptionsHelp

const helpAnswer = `
Usage: nomad-restart answer [options] <id> yes|no|<duration>

  Answer the question a restart waits on ("-batch-wait ask" or
  "-on-error ask"): yes proceeds, no stops the restart, and a duration
  (where the question offers one) proceeds and becomes the new wait
  between batches. A fleet's ID answers the fleet's own question (its
  -max-failed-jobs spent: yes starts the remaining jobs, no ends it), else
  the question each of its running restarts waits on.
` + idOptionsHelp

const helpDemo = `
Usage: nomad-restart demo [options]

  Start a simulated Nomad cluster (nomadsim) in this process with a sample
  service whose 4 instances need 3s to serve after they start, behind a health
  check. Restart it as "nomad job restart" does (-health none), then as
  nomad-restart does, probing every instance while a load balancer reading
  the catalog sends steady traffic, and print side by side the fewest
  instances serving, the share of time with none serving, the requests that
  failed through the balancer and the total time. Nothing real is restarted
  and nothing is asked.

  -json
    Print the figures as one JSON object: {"count": N, "nomad": {...},
    "nomad_restart": {...}}, each with min_serving, none_serving_share (0 to 1),
    seconds (until every instance serves again), restart_seconds,
    requests and failed_requests (sent through the balancer, and failed), and
    restart_id.

  -http-addr=<host:port>
    After the figures, keep the simulated cluster up and serve the agent's page
    of its restarts on this address until Ctrl-C.

  -time-scale=<n>
    Simulated seconds per real second (default 1); the figures are simulated
    seconds.

  -batch-size, -batch-wait, -health, -min-healthy-time, -max-unavailable,
  -surge, -reschedule, -group, -task, -all-tasks and -verbose shape
  nomad-restart's restart as in "run"; the first restart takes the same
  batches with Nomad's gate.
`

const helpWatches = `
Usage: nomad-restart watches [options]
       nomad-restart watches -explain [options] <job>

  Config-change rollouts: a job opts in with meta "nomad-restart.on-change"
  ("auto", or a comma-separated list of sources) at job or group level, and
  the agent restarts its allocations in health-gated batches when a Nomad
  variable or Consul key that its templates read changes. A template is also
  followed by its re-renders ("rendered": every template; "auto": those that
  read what cannot be watched by path, such as a Vault secret): when Nomad
  re-renders it after a task started, the allocations that run it stale are
  restarted ("nomad-restart stale" lists them). change_mode noop templates
  are followed by their file's modification time, read every
  "nomad-restart.render-interval" (default 30s, at least 5s); signal and
  script ones by their task events; restart ones are not followed. The options of
  "run" are read from the same meta under their flag's name
  ("nomad-restart.batch-size", ".health", ".max-unavailable", ".surge",
  ".batch-wait", ".on-error" (default fail), ".min-healthy-time",
  ".healthy-deadline"), plus "nomad-restart.debounce" (default 10s), and
  metric gates as "nomad-restart.gate.<name>" = "<PromQL> <op> <number>"
  (judged after each batch as run's -gate is, on the Prometheus of the
  agent's -prometheus-address).

  Without -explain, list the jobs of the namespace (every namespace with
  -namespace '*') that opt in, with each source of each opted-in group,
  watched or not and why. Jobs launched from a periodic or parameterized job
  are listed through their parent. Last Change is the newest modify index
  of what the source covers, and its time for Nomad variables: read from
  Nomad's variable listing (metadata only: no read of a secret is needed),
  where a variable missing and one the token may not list look alike ("none
  (missing, or not listable by this token)"), or from Consul (with no
  Consul address given, "unknown (no Consul configured)"). Last Rollout is
  the job's newest config-change rollout, its ID and status, from the
  records "nomad-restart status" lists.

  With -explain, show for one job (an ID or a unique prefix), before it opts
  in, what the agent would do: per group, whether it opted in and where, the
  options a rollout would use, each source it would watch (Nomad variable or
  Consul key or prefix, where it lives, and the task, template, function and
  change_mode that read it), what it would not watch and why, warnings (a
  template with change_mode restart, signal or script makes Nomad act on
  every allocation at once: use change_mode = "noop") and problems (invalid
  meta values: no rollout until they are fixed), the templates followed by
  their re-renders and how (file or task events), and those that cannot be
  and why. The last line says what a change would do. Problems are part of
  the explanation: the command still exits 0; it exits 1 only when the job
  cannot be read. Before that line, the last change of each source, the
  job's last rollout and, where a template is followed by its file, whether
  this token may read the allocations' files (tried once on one running
  allocation; the read-fs capability, which the agent's token needs too).

  Nothing is written: both forms only read jobs, variables' metadata,
  Consul keys and restart records.

General Options: Nomad's -address, -region, -namespace, -token and TLS
options, -request-timeout and -log-level (see "nomad-restart run -help").

Watches Options:

  -explain
    Explain one job instead of listing the opted-in jobs.

  -json
    Output the explanation (or the list of explanations of the opted-in
    jobs) in its JSON format, with per job Sources (each Source with its
    LastChange, {Index, Time} or null, and a Note saying why when null),
    LastRollout ({ID, Status} or null) and, where a template is followed
    by its file, FileAccess ("readable", "denied" or "unknown") and
    FileAccessNote; per group Followed, NotFollowed and RenderInterval.

  -consul-address=<addr>, -consul-token=<token>, -consul-ca-cert=<path>,
  -consul-client-cert=<path>, -consul-client-key=<path>,
  -consul-tls-server-name=<name>, -consul-tls-skip-verify
    Where Consul is, for the last change of Consul keys; unset values come
    from CONSUL_HTTP_ADDR and the other CONSUL_* variables, as for "run".
`

const helpStale = `
Usage: nomad-restart stale [options] [job...]

  List the running allocations that run with a stale render: Nomad re-rendered
  one of their templates after their tasks last started, so the tasks still
  run with what the template held before (the environment of an env = true
  template, a file the application reads once at its start). Each is listed
  with the template, when it was re-rendered, when its task started, and for
  how long it has been stale (by this machine's clock). Restart exactly those
  allocations with "nomad-restart run -stale-only <job>".

  Without jobs, every job of the namespace that has a template is read (every
  namespace the token may list with -namespace '*'); otherwise the jobs named,
  each an ID or a unique prefix, as "run" takes them. Every template is judged
  whatever the job's meta says:

    - change_mode noop: by its destination file's modification time, read
      through Nomad's allocation filesystem API (one listing per allocation
      and template directory). Nomad writes the file only when its content
      changed.
    - change_mode signal or script: by the task events Nomad records after
      the re-render.
    - change_mode restart is not followed: Nomad restarts the task itself at
      each re-render. Nor is a destination outside the allocation directory,
      which the filesystem API cannot read. Both are listed as not followed.

  Reading the files needs the namespace's read-fs capability. When the token
  lacks it everywhere it was needed, stale says so in one line and exits 1
  rather than call the allocations up to date; when some jobs' files were
  read, the others are named in a warning on stderr (and FilesDenied in
  -json) and the command goes on.

  Exits 0 whether or not allocations are stale (count them with -json); 1
  when a job cannot be read or found, or on bad input. Nothing is written.

General Options: Nomad's -address, -region, -namespace, -token and TLS
options, -request-timeout and -log-level (see "nomad-restart run -help").

Stale Options:

  -json
    Output an array of the jobs read, each with its Namespace, JobID, Allocs
    (each stale allocation's ID, Name, Group, StaleSince, StaleFor in
    nanoseconds, and Templates: Task, Destination, By "file" or "events",
    RenderedAt, TaskStartedAt), NotFollowed (Group, Task, Template,
    Destination, Reason) and FilesDenied. See docs/json.md.

  -verbose
    Full allocation IDs.
`
