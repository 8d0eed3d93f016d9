// Package nomadsim is a simulated Nomad cluster that speaks Nomad's HTTP API (and Consul's
// health API on a second listener), for end-to-end tests of Nomad clients without a Nomad
// agent. The official github.com/hashicorp/nomad/api client works against it unchanged:
// bodies are that module's types, errors are Nomad's plain-text answers with Nomad's codes,
// reads are blocking queries with the X-Nomad-* headers.
//
// A simulated scheduler places allocations on simulated client nodes in several
// datacenters; simulated clients run their tasks through Nomad's states and task events,
// on a simulated clock that runs Options.TimeScale times faster than real time. Faults
// (errors, latency, dropped connections, leader loss, failing task starts, nodes going
// down) are injected through the Go API, and every request is accounted per endpoint.
//
// # Scripting tasks
//
// Jobs script their simulated behaviour with Meta keys, looked up in the task's Meta,
// then the group's, then the job's. Durations use Go's syntax ("3s") and are simulated
// time.
//
//	nomadsim.start_delay    time the driver takes to start the task (default 500ms, like
//	                        raw_exec on a real agent): the task stays pending that long
//	                        before its Started event
//	nomadsim.run_for        the task exits by itself after this long (with exit_code);
//	                        batch and sysbatch tasks and lifecycle hooks without it exit 0
//	                        after 100ms, service tasks run until killed
//	nomadsim.exit_code      exit code of that exit (default 0)
//	nomadsim.fail_after     the task crashes (exit code 1, or exit_code) after this long;
//	                        the restart policy applies
//	nomadsim.ignore_signal  "true": the task ignores its kill signal, so a stop or restart
//	                        takes the full kill_timeout and ends with SIGKILL (exit 137)
//	nomadsim.bad_when       "nomad:<path>:<item>=<value>" (a variable of the allocation's
//	                        namespace) or "consul:<key>=<value>": a task that starts while
//	                        its source holds that value loaded a bad configuration, until
//	                        it starts again: its services' checks fail, and their instances
//	                        (Options.ServeInstances) answer a share of requests with 500.
//	                        The value is read as the task starts, as a task with
//	                        restart { render_templates = true } loads it
//	nomadsim.bad_errors     that share, from 0 to 1 (default 0.3)
//
// Health checks of services (either provider) follow a script given by the check's name:
//
//	nomadsim.check.<check name> = pass | fail | pass_after=D | fail_after=D | flap=D
//
// pass (the default) passes from the moment the task (for group services: all main tasks)
// last started; pass_after fails until D has elapsed since then; fail_after passes until D;
// flap alternates D passing and D failing. A check without a name is named as Nomad names
// it: service: "<service>" check. Cluster.ScriptCheck replaces a check's script at run time
// for every allocation of a job. Checks with on_update = "ignore" are readiness checks and
// do not count for deployment health.
//
// Nomad-provider checks are answered by /v1/client/allocation/:id/checks as Nomad's checks
// hook keeps them: pending until the first probe, half an interval after the allocation
// started on the client, then the result of the latest probe (one per interval, stamped
// with the second it began), which judged the workload as it was then: failure while it
// was down, the script's result while it ran. The result from before an in-place restart
// so stays until the check runs again, as on a real client; results are purged once the
// allocation is stopped. Consul-provider checks are registered in the Consul catalog served
// on ConsulAddr, under the service IDs Nomad gives allocations' services, at their
// initial_status (critical by default), and run as Consul's agent runs them: first after a
// random stagger within the interval, then every interval, each status holding until the
// next run. On an in-place restart group services are deregistered, the group
// shutdown_delay waited and they are registered anew (critical) before the tasks stop;
// task services are deregistered when their task is killed and registered anew once it
// runs again (as a real agent does; checked on Nomad 2.0 with Consul 1.20). On a stop, group
// services are deregistered and the group shutdown_delay waited before any task is killed;
// task services stay registered until their task is killed (Nomad's task service hook
// deregisters them in PreKilling). ConsulAddr serves the instances on Consul's health API
// (/v1/health/service/<name>, with ?passing) and its catalog (/v1/catalog/service/<name>,
// no health). ConsulAddr also serves Consul's KV store (/v1/kv/: reads with
// ?recurse, ?keys and ?raw, writes with ?cas and ?flags, blocking queries with Consul's
// index rules; no sessions, no ACLs). The Consul listener compresses answers of 1400 bytes
// or more with gzip for clients that accept it, as Consul's agent does.
//
// # Instances that answer
//
// With Options.ServeInstances, every port label an allocation's services use is backed by
// a real HTTP listener on 127.0.0.1, and the services are registered (in Nomad's service
// table, /v1/service/<name>, and in Consul) at 127.0.0.1 and that port instead of the
// node's address and a made-up port, so that a load balancer reading either catalog
// reaches the simulated workload. The port is the allocation's for its life (kept through
// in-place restarts, as Nomad keeps an allocation's ports), drawn from [20000, 32768),
// below the usual ephemeral ranges; static ports get one of their own too, since every
// instance shares one address.
//
// The listener answers GET (any path) as the workload would: 200 while the process of
// every service on the port runs (for group services: every main task) and each of those
// services' checks' scripts passes at that instant (pass_after=3s: 3 s after the process
// started; a service without checks: as soon as it runs); otherwise the port refuses
// connections: the listener is closed, and the connections it held with it. A process
// that exited has no socket, so a killed, restarting or stopped task refuses; a process
// that started but is not ready yet refuses too ("refuse until ready", as a server that
// binds its port once warmed up does; one that binds first and answers 503 would fail the
// same requests, differently). A request caught by the instance going down has its
// connection closed, or is answered 503. Readiness follows the process, not the catalog: the instance keeps
// answering through a group or task shutdown_delay and until its process exits (after
// kill_timeout for one that ignores its signal), whatever is registered, which is what a
// shutdown_delay is for. Scripts are judged on the simulated clock: at TimeScale 10,
// pass_after=3s answers 300 ms of real time after the start. Nomad's service table has no
// health: a balancer reading it sends to an instance as soon as it is registered again,
// while its process is restarted and warms up; Consul's registrations start critical and
// pass once a check run finds the script passing. Listeners close with the cluster.
//
// # Allocation directories and templates
//
// Each allocation has a simulated directory on its client, laid out as Nomad lays it out
// (client/allocdir), from the moment the client picks the allocation up: the shared alloc/
// with data/, logs/ and tmp/, and per task local/, tmp/, secrets/ and private/ (tmpfs, with
// their marker file), then, at the task's first prestart, its log files and task API
// socket. /v1/client/fs/ls and /v1/client/fs/stat answer about it with Nomad's shapes,
// codes and texts (checked on a real Nomad 2.0 client): read-fs in the allocation's
// namespace (the write policy has it, read does not), 404 with the OS's text for a
// missing path, 500 "Path escapes the alloc directory", 400 without a path; secrets/ may
// be listed. readat, cat, stream and logs are not simulated.
//
// Templates render into it as a task's template manager renders them
// (client/allocrunner/taskrunner/template): every template in the task's prestart, before
// it starts; then again whenever its content changes, which writes the file (its mode from
// perms, a new modification time) and applies its change_mode after a random wait within
// its splay: noop nothing more; signal one Signaling event per distinct signal ("Template
// skipped signal" if the task is down); script a "Task hook message" event of the script's
// success (the simulated exec always succeeds); restart an in-place restart of the task
// (Restart Signaled "Template with change_mode restart re-rendered", Terminated,
// Restarting, Started), which wins over signals and scripts rendered in the same pass
// (templates whose renders fall due at the same instant; a real client's passes are
// racier: one write changing a restart and a signal template was seen to signal, then
// restart). An in-place restart renders nothing, unless the restart block has
// render_templates = true: then the prestart writes what changed since the last write,
// between LastRestart and the new StartedAt. Templates are not evaluated: files hold no content, only a size (that of a
// stand-in text, not of what the template would render) and a version that changes when
// the template's data does. The data changes:
//
//   - when a Nomad variable is written and its items change (or it is created or deleted),
//     for templates whose text names it with a literal path in an action: nomadVar "<path>"
//     (on creation and new items), nomadVarExists "<path>" and nomadVarList or
//     nomadVarListSafe "<prefix>" (on creation and deletion under the prefix), with
//     consul-template's @namespace; the render comes after the template's wait (its wait
//     block's min, else the client's 5 s), snoozed by further changes up to the max. A
//     computed path (nomadVar (printf ...)) or a template from a source file is not seen:
//     the sim does not evaluate templates, so only RerenderTemplates changes those;
//   - when Cluster.RerenderTemplates or Cluster.RerenderAllocTemplate says so.
//
// Templates with once = true never re-render.
//
// # Behaviour
//
// Allocation and task states follow Nomad's client: Received, Task Setup, Started; an
// in-place restart is Restart Signaled, Terminated, Restarting, Started, and the restart
// call returns once the old process exited (group services are deregistered and the group
// shutdown_delay waited first; the task shutdown_delay is not applied on restart, as in
// Nomad). A stop is Killing, Terminated, Killed after the group and task shutdown delays,
// and an evaluation places a replacement linked by PreviousAllocation and NextAllocation.
// Service jobs with an update block get deployments with max_parallel, min_healthy_time,
// healthy_deadline, canaries (auto_promote or /v1/deployment/promote) and auto_revert.
// Failed allocations are rescheduled per the reschedule block; placements that do not fit
// leave a blocked evaluation with FailedTGAllocs, retried when capacity appears.
//
// Clients report to the servers as Nomad's do: a node sends its allocations' changes in
// one update per tick of Nomad's allocSyncIntv (200ms simulated; Options.AllocSyncInterval
// changes it, negative shows changes at once). Server reads, lists, blocking queries and
// the event stream see task states and client status only from the next tick, while the
// client endpoints (/v1/client/...) act on the client's own state: right after a restart
// call returns, a read may still show the task running with its old Restarts count, and a
// named-task restart sent while the task restarts fails with 500 "Task not running", as
// on a real agent. The simulated scheduler and deployment watcher react to the client's
// state as it changes (they do not wait for the tick).
//
// Options.MaxConnsPerClient enforces Nomad's limits.http_max_conns_per_client on the Nomad
// listener (cmd/nomadsim defaults it to Nomad's 100; the Go default 0 is no limit): every
// open TCP connection of a client IP counts, idle keep-alive ones included, and the one
// over the limit gets Nomad's raw 429 answer before any request is read, then is closed.
// As on Nomad, handlers other than the event stream do not end when their client goes
// away: a canceled blocking query keeps its connection, and its slot, until its wait ends.
// Cluster.ConnStats counts refusals and the peak of connections per client.
//
// Variable locks: TTLs and lock delays run in real time by default, because real clients
// renew on their own wall clock (the api's LockLeaser renews at TTL/2 of real time);
// Options.ScaleLockTTL runs them on the simulated clock. Cluster.ExpireLock ends a held
// lock's TTL at once, as if its holder had died; it is free again after the lock delay.
//
// # Go API beyond the HTTP API
//
// Start, Close, Addr, ConsulAddr, ConsulKVPut, ConsulKVGet, APIClient; ConnStats and ResetConnStats; RegisterJob, WaitJobRunning (which also
// waits for the job's deployment to end), WaitAllocsRunning (which does not) and
// WaitDeploymentDone; ExpireLock; Nodes,
// AddNode, DownNode, UpNode, SetNodeEligibility; FailTaskStarts; ScriptCheck; SetFault and
// LoseLeader; Stats and ResetStats; Now, TimeScale and RealDuration (the simulated clock);
// BootstrapToken and CreateToken (ACLs); RerenderTemplates and RerenderAllocTemplate
// (templates whose data changed).
//
// Known simplifications: deployment health follows check scripts continuously rather than
// the Consul checks' runs; the client learns of a stop at once (a real client, which pulls
// its allocations, may still accept a restart sent right after the stop); plan diffs
// detail tasks and their driver config only; no preemption, no drain, no periodic or
// parameterized dispatch, no HCL parsing (/v1/jobs/parse accepts JSON), a single region,
// and the event stream's replay buffer renders payloads with the state current when they
// are replayed; allocation directories have no driver files (raw_exec's executor.out)
// and their files no content. An instance's port is free while its process is down:
// another program that binds it then keeps the instance from listening again (it is
// logged).
package nomadsim
