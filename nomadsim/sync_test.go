package nomadsim

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

// TestClientSyncLag: as on a real agent, the servers see a restart only at the client's
// next sync tick, and a named-task restart sent while the client still restarts the task
// fails with 500 "Task not running".
func TestClientSyncLag(t *testing.T) {
	// A long sync interval (60s simulated, 3s real) makes the stale window wide enough to
	// observe on a loaded machine, where a test may stall for a second.
	c, cl := startCluster(t, Options{TimeScale: 20, AllocSyncInterval: 60 * time.Second})
	job := serviceJob("web", 1)
	// A task that takes 60 s simulated (3 s real) to start again keeps it "not running"
	// long enough for the named restart below to meet it so on a loaded machine.
	job.TaskGroups[0].Tasks[0].Meta = map[string]string{"nomadsim.start_delay": "60s"}
	a := runningAlloc(t, c, cl, job)
	if err := cl.Allocations().Restart(a, "", nil); err != nil {
		t.Fatal(err)
	}
	stale, _, err := cl.Allocations().Info(a.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ts := stale.TaskStates["main"]; ts.State != sim.TaskRunning || ts.Restarts != 0 {
		t.Errorf("server view right after the restart: state %s, restarts %d; want the stale running, 0", ts.State, ts.Restarts)
	}
	err = cl.Allocations().Restart(a, "main", nil)
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "Task not running") {
		t.Errorf("named restart while the client restarts the task: %v, want 500 Task not running", err)
	}
	waitFor(t, "the restart synced", func() bool {
		x, _, err := cl.Allocations().Info(a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		return x.TaskStates["main"].Restarts == 1 && x.ModifyIndex > stale.ModifyIndex
	})
}

// TestClientSyncImmediate: a negative AllocSyncInterval shows client changes at once.
func TestClientSyncImmediate(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 20, AllocSyncInterval: -1})
	// The task takes 20 s of the simulation's time (1 s of real time) to start, so that a
	// loaded machine still reads it pending right after the restart.
	job := serviceJob("web", 1)
	job.Meta = map[string]string{sim.MetaStartDelay: "20s"}
	a := runningAlloc(t, c, cl, job)
	if err := cl.Allocations().Restart(a, "", nil); err != nil {
		t.Fatal(err)
	}
	x, _, err := cl.Allocations().Info(a.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ts := x.TaskStates["main"]; ts.Restarts != 1 || ts.State != sim.TaskPending {
		t.Errorf("state %s, restarts %d right after the restart; want pending, 1", ts.State, ts.Restarts)
	}
}

// TestSyncTickBatches: changes of several allocations on one node reach the servers under
// one index, as one Node.UpdateAlloc does.
func TestSyncTickBatches(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 20, Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
	// A batch job: no deployment, whose health updates would give each allocation an index.
	job := serviceJob("web", 3)
	job.Type = ptr("batch")
	job.TaskGroups[0].Update = nil
	job.TaskGroups[0].Tasks[0].Meta = map[string]string{sim.MetaRunFor: "1h"}
	registerRunning(t, c, cl, job)
	stubs, _, err := cl.Jobs().Allocations("web", false, nil)
	if err != nil || len(stubs) != 3 {
		t.Fatalf("allocations: %v (%d)", err, len(stubs))
	}
	for _, s := range stubs {
		if s.ModifyIndex != stubs[0].ModifyIndex {
			t.Errorf("alloc %s modify index %d, want the batch's %d", s.ID, s.ModifyIndex, stubs[0].ModifyIndex)
		}
	}
}
