package engine

// How the driver behaves, and where it differs from `nomad job restart` on purpose.
//
// Selection and batches are Nomad's: the allocations Nomad's filterAllocs keeps, newest
// first, in batches of -batch-size (a percentage of the eligible count, rounded up; progressive
// sizes use each entry once and repeat the last). Messages use Nomad's words.
//
// Steps. Every action is preceded by a persisted intent (the allocation's state becomes
// restarting, with an Observation of Nomad's facts and Attempts counted): a batch reads its
// allocations at once and writes all their intents in one step before any request goes out
// (takeup.go). What follows an action (the request went out, the allocation runs again, is
// healthy, failed, was replaced, what it waits for) is an observation that a later driver
// can find again in Nomad: it is written within lazyLinger (250 ms), grouped with the
// batch's other observations, or with the next step (lazy.go). Decisions (a batch started,
// the next one decided, a question, the end) are written before the driver goes on.
// A driver that finds an allocation in restarting state did not necessarily send the
// request: it asks Nomad's facts (restart counters and task event times against the
// Observation, or the allocation's desired status and NextAllocation) before sending it
// again, so each allocation is restarted exactly once whatever instant a driver died at,
// and an observation lost with a driver costs a read, never a second restart. Concurrent
// steps share writes (group commit); each step returns only once its change is stored.
// A batch of 100 allocations thus costs about four writes of the record, however many
// allocations the job has (the Nomad store rewrites only the chunks that changed).
//
// Differences from Nomad's command:
//   - An in-place restart counts as done when every targeted task runs again after the request
//     (Health running, the default) and, with MinHealthyTime, stayed so that long; Nomad counts
//     it done when the old process exited. Health none keeps Nomad's behaviour.
//   - Every wait has a deadline (Spec.HealthyDeadline, default 5m, counted from when a driver
//     takes the allocation up, so a resumed driver gives it a full period); Nomad has none.
//   - Transient failures of Nomad (5xx, no leader, connection refused) are retried with backoff
//     within the deadline, after checking the facts; Nomad fails the allocation at once.
//   - The deployment guard runs before each batch, not each allocation, so a batch is never
//     abandoned half-started; a deployment found then fails the restart with Nomad's message.
//   - -reschedule watches placement failures with one blocking query per group and batch
//     rather than one per allocation. Batch allocations whose replacement completes count.
//   - After the last batch's errors (Nomad never asks) the restart asks, with -on-error ask and
//     without -yes: "Ignore them and mark the restart as succeeded? [y/N]"; no (the default)
//     ends it failed. With -yes, or -on-error fail, errors of the last batch end it failed, as
//     Nomad exits 1.
//   - "no" at a question ends the restart canceled (Nomad: "Job restart canceled").
//   - Cancel stops starting new work; allocations already requested in the batch in flight
//     are followed to their end and recorded, then the restart is canceled. A restart that no
//     driver holds is canceled at once by the canceling process.
//   - Pause takes effect between batches: the batch in flight finishes, then the restart holds
//     (keeping its lease) until resumed or canceled. A batch wait is honoured across pauses and
//     drivers (NextBatchAt is persisted).
//   - A planned allocation that is no longer eligible when its batch comes (gone, replaced,
//     stopped) is skipped with the reason rather than failed.
//   - -group and -task names that no version of the job defines are refused at Plan (Nomad
//     silently restarts nothing).
//   - Health checks (health.go, gate.go): Plan resolves -health auto to checks or running from
//     the targeted groups' services (reading the full job through the Nomad client), takes
//     each group's min-healthy time and healthy deadline from its update block where the
//     flags did not set them (Spec.GroupHealth), and probes Consul when Consul checks count,
//     refusing before anything changes when it cannot be read. Once an allocation's tasks
//     run again (or its replacement runs), the health gate follows it with a blocking query
//     and its check sources (Nomad's checks endpoint, polled; Consul, blocking queries) and
//     judges it on Nomad's clock (HealthConfig.Clock, else an estimate from Nomad's
//     timestamps). Ephemeral lifecycle tasks are not waited for. AllocProgress.Waiting says
//     what the gate waits for, written when the kind of wait changes (with an alloc-health
//     event) and at most every two seconds otherwise.
//   - Availability budget (budget.go): before a batch starts, each of its groups' allocations
//     out of service plus the batch's must stay within -max-unavailable (default: the batch
//     size). The job's summary answers the common case in one read; otherwise the job's
//     allocations are watched until the batch fits, or its allocations are recorded failed
//     at the healthy deadline and -on-error decides.
//   - Targeting (target.go): -filter is evaluated by Nomad on its allocations list; -node and
//     -datacenter narrow the plan; -unhealthy-first orders the allocations out of service
//     first.
//   - Surge (surge.go): with -surge n, each targeted group of a service job is scaled up by
//     n through Nomad's job scale endpoint before the first batch, and the batches start once
//     the new allocations pass the same health gate (and Nomad's deployment for the scale
//     ended); the availability budget grows by n while the surge is up. Every end of the
//     restart scales the groups back first (finish), including a cancel of a restart that no
//     process drives, which the canceling process ends under the restart's lease
//     (cancel_surge.go). Each scale request is preceded by a persisted intent holding the
//     job's JobModifyIndex and is sent with it as Nomad's check-and-set, so a later driver
//     decides from the group's count whether it took effect; a count someone else changed is
//     left as it is. Nomad's command has no surge: a one-instance service is down while its
//     only allocation restarts.
