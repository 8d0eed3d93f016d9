// Package conformance holds nomadsim's conformance suite: one set of cases, written against
// the official Nomad API client and plain HTTP, that runs against a simulated cluster always
// and also against a real Nomad agent when NOMAD_CONFORMANCE_ADDR names one.
//
// The package has no code of its own; everything lives in its tests:
//
//	go test ./nomadsim/conformance/...
//	NOMAD_CONFORMANCE_ADDR=http://127.0.0.1:4646 go test ./nomadsim/conformance/...
//
// NOMAD_CONFORMANCE_TOKEN gives a management token for an agent that enforces ACLs; the ACL
// cases run against a real agent only when it is set. A real agent must offer the raw_exec
// driver (for example `nomad agent -dev` with `plugin "raw_exec" { config { enabled = true } }`).
// The cases create jobs, variables and namespaces under unique names and remove them
// afterwards, except TestReferenceExchanges, which replays testdata/nomad-http (exchanges
// recorded from a real agent) under the recording's own names (jobs sleepy, web and
// impossible, variables under nomad-restart/; skip it with -skip TestReferenceExchanges on
// an agent whose own jobs bear those names) and needs python3 on the agent's host for its
// web job's HTTP check.
// TestVariableLockExpiry waits out a 10 s lock TTL (Nomad's minimum): about 23 s on a real
// agent.
//
// The TestConsulKV cases check the sim's Consul KV store the same way, against a real Consul
// agent (no ACLs, datacenter dc1, such as `consul agent -dev`) when CONSUL_CONFORMANCE_ADDR
// names one; they write only under a key prefix unique to the run. TestConsulDNS checks the
// sim's Consul DNS interface against the real agent's when CONSUL_CONFORMANCE_DNS names it
// too (127.0.0.1:8600 for `consul agent -dev`); it registers nodes under a unique prefix
// and removes them.
package conformance
