// Package health is the readiness gate of a restart: it decides, from Nomad's facts and the
// results of the allocation's service checks, whether a restarted allocation is healthy
// again, still pending (and why), or failed its healthy deadline.
//
// The rules follow Nomad's own allocation health tracker (the client's allochealth
// package): every task running, every check that counts passing, all continuously for
// min_healthy_time; Nomad-native checks of mode readiness (on_update = "ignore") do not
// count when failing; Consul checks count unless on_update says otherwise (warnings pass
// with "ignore_warnings", anything passes with "ignore"); a check that fails again restarts
// the min-healthy timer. Unlike Nomad's deployment tracker, which watches either Consul or
// Nomad checks, the gate requires both providers' checks when a group mixes them, and it
// never reports healthy on missing data (a check not yet seen, a source that cannot be read).
//
// Times are Nomad's: the moment the restart took effect, task start times and the times
// at which check results were observed all come from Nomad's clock (or an estimate of it,
// see Clock), never from a comparison with the local clock.
//
// The package has three parts: the gate (Readiness, pure logic, no I/O), the expectations
// derived from the job (Defaults, GroupChecks, AllocChecks), and the check sources
// (NomadChecks, which polls Nomad's allocation checks endpoint, and Consul, which runs
// blocking queries on Consul's health API).
package health
