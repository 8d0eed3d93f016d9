// Package e2e holds nomad-restart's end-to-end campaigns against nomadsim: the crash
// campaign (drivers SIGKILLed at random instants and resumed from new processes, checked
// for exactly-once from Nomad's own facts), runs under injected faults, and the
// benchmarks whose figures docs/benchmarks.md reports. It has no code of its own beyond
// test helpers.
package e2e
