package nomadsim

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

func runningAlloc(t *testing.T, c *Cluster, cl *api.Client, job *api.Job) *api.Allocation {
	t.Helper()
	registerRunning(t, c, cl, job)
	stubs, _, err := cl.Jobs().Allocations(*job.ID, false, nil)
	if err != nil || len(stubs) == 0 {
		t.Fatalf("allocations: %v (%d)", err, len(stubs))
	}
	a, _, err := cl.Allocations().Info(stubs[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func eventTypes(ts *api.TaskState) []string {
	var out []string
	for _, e := range ts.Events {
		out = append(out, e.Type)
	}
	return out
}

func TestRestartInPlace(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	job.TaskGroups[0].Tasks[0].Meta = map[string]string{sim.MetaIgnoreSignal: "true"}
	job.TaskGroups[0].Tasks[0].KillTimeout = ptr(5 * time.Second)
	a := runningAlloc(t, c, cl, job)
	before := c.Now()
	if err := cl.Allocations().Restart(a, "", nil); err != nil {
		t.Fatalf("restart: %v", err)
	}
	// The call returns once the old process exited: after the kill timeout, since the task
	// ignores the signal.
	if got := c.Now().Sub(before); got < 5*time.Second {
		t.Errorf("restart returned after %v simulated, want at least the 5s kill timeout", got)
	}
	var ts *api.TaskState
	waitFor(t, "task running again", func() bool {
		a2, _, err := cl.Allocations().Info(a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		ts = a2.TaskStates["main"]
		return ts.State == "running" && ts.Restarts == 1
	})
	got := strings.Join(eventTypes(ts), ",")
	want := "Received,Task Setup,Started,Restart Signaled,Terminated,Restarting,Started"
	if got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	if ts.LastRestart.IsZero() || ts.StartedAt.Before(ts.LastRestart) {
		t.Errorf("LastRestart %v StartedAt %v", ts.LastRestart, ts.StartedAt)
	}
	term := ts.Events[4]
	if term.ExitCode != 137 || term.Signal != 9 || term.DisplayMessage != "Exit Code: 137, Signal: 9" {
		t.Errorf("terminated event %+v", term)
	}
}

func TestRestartErrors(t *testing.T) {
	c, cl := startCluster(t, Options{})
	a := runningAlloc(t, c, cl, serviceJob("web", 1))
	err := cl.Allocations().Restart(a, "nosuch", nil)
	if err == nil || !strings.Contains(err.Error(), "500") || !strings.Contains(err.Error(), "Could not find task runner for task: nosuch") {
		t.Errorf("unknown task: %v", err)
	}
	_, err = cl.Allocations().Stop(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "alloc complete", func() bool {
		a2, _, _ := cl.Allocations().Info(a.ID, nil)
		return a2.ClientStatus == "complete"
	})
	err = cl.Allocations().Restart(a, "", nil)
	if err == nil || !strings.Contains(err.Error(), "restart of an alloc that should not run") {
		t.Errorf("terminal alloc: %v", err)
	}
	err = cl.Allocations().Restart(a, "main", nil)
	if err == nil || !strings.Contains(err.Error(), "Task not running") {
		t.Errorf("named task not running: %v", err)
	}
}

func TestStopAndReplacement(t *testing.T) {
	c, cl := startCluster(t, Options{})
	a := runningAlloc(t, c, cl, serviceJob("web", 2))
	resp, err := cl.Allocations().Stop(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.EvalID == "" || resp.LastIndex == 0 {
		t.Fatalf("stop response %+v", resp)
	}
	var old *api.Allocation
	waitFor(t, "old alloc complete", func() bool {
		old, _, _ = cl.Allocations().Info(a.ID, nil)
		return old.ClientStatus == "complete" && old.NextAllocation != ""
	})
	if old.DesiredStatus != "stop" || old.DesiredDescription != "alloc is being migrated" || !*old.DesiredTransition.Migrate {
		t.Errorf("old alloc: desired %s %q %+v", old.DesiredStatus, old.DesiredDescription, old.DesiredTransition)
	}
	ts := old.TaskStates["main"]
	if got := strings.Join(eventTypes(ts), ","); got != "Received,Task Setup,Started,Killing,Terminated,Killed" {
		t.Errorf("old events %s", got)
	}
	waitFor(t, "replacement running", func() bool {
		n, _, _ := cl.Allocations().Info(old.NextAllocation, nil)
		return n.ClientStatus == "running"
	})
	n, _, _ := cl.Allocations().Info(old.NextAllocation, nil)
	if n.PreviousAllocation != a.ID || n.Name != a.Name || n.ID == a.ID {
		t.Errorf("replacement %s prev %s name %s", n.ID, n.PreviousAllocation, n.Name)
	}
}
