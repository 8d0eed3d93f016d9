package nomadsim

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

func acquire(t *testing.T, cl *api.Client, path, delay string) error {
	t.Helper()
	v := &api.Variable{Namespace: "default", Path: path, Items: api.VariableItems{"k": "v"},
		Lock: &api.VariableLock{TTL: "10s", LockDelay: delay}}
	_, _, err := cl.Variables().AcquireLock(v, nil)
	return err
}

// TestScaleLockTTL: with ScaleLockTTL an unrenewed lock is free again after 2×TTL plus the
// lock delay of simulated time (23 s, about 46 ms real at scale 500).
func TestScaleLockTTL(t *testing.T) {
	_, cl := startCluster(t, Options{TimeScale: 500, ScaleLockTTL: true})
	if err := acquire(t, cl, "locks/a", "3s"); err != nil {
		t.Fatal(err)
	}
	if err := acquire(t, cl, "locks/a", "3s"); err == nil {
		t.Fatal("second acquire of a held lock succeeded")
	}
	waitFor(t, "the lock to expire", func() bool { return acquire(t, cl, "locks/a", "3s") == nil })
}

// TestExpireLock: ExpireLock frees a held lock after its lock delay (200ms, real time here),
// though its real-time TTL has long to run.
func TestExpireLock(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 1})
	if err := acquire(t, cl, "locks/b", "200ms"); err != nil {
		t.Fatal(err)
	}
	if c.ExpireLock("", "locks/none") {
		t.Error("ExpireLock of an unknown variable reported true")
	}
	if !c.ExpireLock("", "locks/b") {
		t.Fatal("ExpireLock of a held lock reported false")
	}
	if err := acquire(t, cl, "locks/b", "200ms"); err == nil {
		t.Error("acquired during the lock delay")
	}
	waitFor(t, "the lock delay to pass", func() bool { return acquire(t, cl, "locks/b", "200ms") == nil })
}
