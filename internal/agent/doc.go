// Package agent is the long-running adopter of restarts: it finds restarts whose lease is
// free (started with `run -detach`, or whose driver died) in the namespaces its token may
// see, and drives each with the engine, many at once. Several agents share the work through
// the per-restart leases, with no leader: a lease held elsewhere is simply skipped, and one
// that is released or expires is taken by whichever agent tries first.
//
// Work is found with one blocking list query on the store's variables prefix across
// namespaces (it wakes when a record or a lease changes, including a lock released by
// Nomad when its TTL ran out), at most once per MinListGap, with a slow resync as a safety
// net. The local store has no such watch; its records are listed every PollEvery.
//
// The web page (package page, which Handler serves beside /healthz and /metrics) reads what
// the agent sees through pageSource and follows the same watch: each discovery pass wakes
// its server-sent event streams (pageHub). Its actions (pause, resume, cancel, answer,
// filing a restart) run through Config.Actions with the Nomad token the browser sent, never
// the agent's own.
//
// Fleets (fleet_runner.go: many jobs restarted under one ID, filed with `run -jobs ...
// -detach`) are driven the same way, each under its own lease, at most FleetConcurrency at
// once: the fleet's driver files each job's restart when its turn comes, and those restarts
// are ordinary detached restarts that the agents adopt as any other.
//
// On cancellation every drive detaches at its next step: the record stays consistent and
// each lease is released, so another agent takes over at once.
package agent
