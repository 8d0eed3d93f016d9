package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The campaign's verdicts are only as good as its checks: these tests break exactly-once
// by hand, through Nomad's API, and expect the checks to say so.

func TestCheckInPlaceCatchesDoubleAndMissedRestarts(t *testing.T) {
	client, pre := startWithJob(t, 3, "twice")
	ids := sortedBefore(pre)
	restartOnce := func(id string) {
		t.Helper()
		// Nomad refuses to restart a task that is not running ("Task not running").
		waitTaskRunning(t, client, id, "main")
		a, _, err := client.Allocations().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The task may show running a moment before the client takes restarts again; a
		// refused restart changed nothing, so it is simply asked again.
		for try := 0; ; try++ {
			err := client.Allocations().Restart(a, "main", nil)
			if err == nil {
				break
			}
			if try == 100 || !strings.Contains(err.Error(), "Task not running") {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The servers learn of the restart at the client's next sync: wait for the counter,
		// not only for "running", which a stale read still shows.
		waitRestarted(t, client, id, "main", a.TaskStates["main"].Restarts)
	}
	restartOnce(ids[0].ID) // exactly once: fine
	restartOnce(ids[1].ID) // twice: a breach
	restartOnce(ids[1].ID)
	// ids[2] never restarted: a breach

	bad, err := checkInPlace(client, "twice", pre, []string{"main"})
	text := checksSay(t, bad, err,
		"alloc "+ids[1].ID[:8]+" task main: Restarts 2, want 1",
		"alloc "+ids[1].ID[:8]+" task main: 2 \"Restart Signaled\" events",
		"alloc "+ids[2].ID[:8]+" task main: Restarts 0, want 1",
		"alloc "+ids[2].ID[:8]+" task main: 0 \"Restart Signaled\" events",
	)
	if strings.Contains(text, ids[0].ID[:8]) {
		t.Errorf("checks blamed the allocation restarted once:\n%s", text)
	}
}

func TestCheckRescheduledCatchesReplacedReplacements(t *testing.T) {
	client, pre := startWithJob(t, 4, "chain")
	ids := sortedBefore(pre)
	stop := func(id string) string {
		t.Helper()
		a, _, err := client.Allocations().Info(id, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Allocations().Stop(a, nil); err != nil {
			t.Fatal(err)
		}
		return waitReplacement(t, client, id)
	}
	stop(ids[0].ID)       // once: fine
	stop(stop(ids[1].ID)) // its replacement stopped too: a breach
	// ids[2] never stopped: a breach. The job then has 6 allocations, as many as a correct
	// run leaves, so only the chain checks can catch the first breach.

	bad, err := checkRescheduled(client, "chain", pre)
	text := checksSay(t, bad, err,
		"of "+ids[1].ID[:8]+" was itself replaced",
		"alloc "+ids[2].ID[:8]+": desired status run, want stop",
		"alloc "+ids[2].ID[:8]+": 0 replacements, want 1",
	)
	if strings.Contains(text, "alloc "+ids[0].ID[:8]) {
		t.Errorf("checks blamed the allocation replaced once:\n%s", text)
	}
}

func waitTaskRunning(t *testing.T, client *api.Client, allocID, task string) {
	t.Helper()
	simtest.WaitWithin(t, 20*time.Second, fmt.Sprintf("task %s of %s to run again", task, allocID), func() bool {
		a, _, err := client.Allocations().Info(allocID, nil)
		return err == nil && a.TaskStates[task] != nil && a.TaskStates[task].State == "running"
	})
}

// waitRestarted waits until the task's restart counter is above before and it runs again.
func waitRestarted(t *testing.T, client *api.Client, allocID, task string, before uint64) {
	t.Helper()
	simtest.WaitWithin(t, 20*time.Second, fmt.Sprintf("task %s of %s to be restarted", task, allocID), func() bool {
		a, _, err := client.Allocations().Info(allocID, nil)
		return err == nil && a.TaskStates[task] != nil && a.TaskStates[task].Restarts > before && a.TaskStates[task].State == "running"
	})
}

// waitReplacement waits until the stopped allocation's replacement runs and returns its ID.
func waitReplacement(t *testing.T, client *api.Client, allocID string) string {
	t.Helper()
	var replacement string
	simtest.WaitWithin(t, 20*time.Second, "a running replacement of "+allocID, func() bool {
		a, _, err := client.Allocations().Info(allocID, nil)
		if err != nil || a.NextAllocation == "" {
			return false
		}
		n, _, err := client.Allocations().Info(a.NextAllocation, nil)
		if err != nil || n.ClientStatus != api.AllocClientStatusRunning {
			return false
		}
		replacement = n.ID
		return true
	})
	return replacement
}

// startWithJob starts a cluster (driverScale, seed) with service job id of 3 allocations
// running, and returns a client and the job's allocations as they were before anything
// restarted them.
func startWithJob(t *testing.T, seed int64, id string) (*api.Client, map[string]before) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{TimeScale: driverScale, Seed: seed})
	client := apiClient(t, c)
	if err := register(context.Background(), c, newJob(id, "service", 3)); err != nil {
		t.Fatal(err)
	}
	pre, err := snapshot(client, id)
	if err != nil {
		t.Fatal(err)
	}
	return client, pre
}

// checksSay fails the test unless the checks' findings bad (err: they could not check)
// say each of wants; it returns them, one a line.
func checksSay(t *testing.T, bad []string, err error, wants ...string) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(bad, "\n")
	for _, want := range wants {
		if !strings.Contains(text, want) {
			t.Errorf("checks missed %q; they said:\n%s", want, text)
		}
	}
	return text
}
