package engine

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

func TestE2ETasks(t *testing.T) {
	cases := []struct {
		name string
		spec restart.Spec
		want map[string]bool // tasks expected to get a restart request
	}{
		{"-task main", restart.Spec{Tasks: []string{"main"}, Yes: true}, map[string]bool{"main": true}},
		{"-task main -task side", restart.Spec{Tasks: []string{"main", "side"}, Yes: true}, map[string]bool{"main": true, "side": true}},
		{"-all-tasks", restart.Spec{AllTasks: true, Yes: true}, map[string]bool{"main": true, "side": true}},
		{"running tasks", restart.Spec{Yes: true}, map[string]bool{"main": true, "side": true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := startSim(t, false)
			env.register(t, "web", "service", map[string]int{"web": 2}, "main", "side")
			final := drive(t, env.e, env.plan(t, "web", tc.spec), nil)
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)", final.Status, final.Reason)
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c, err := simtest.CountRestarts(ctx, env.client, "default", "web")
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range c.Allocs {
				for name, ts := range a.TaskStates {
					signaled := 0
					for _, e := range ts.Events {
						if e.Type == api.TaskRestartSignal {
							signaled++
						}
					}
					want := 0
					if tc.want[name] {
						want = 1
					}
					if signaled != want {
						t.Errorf("alloc %s task %s: %d restarts, want %d", a.ID[:8], name, signaled, want)
					}
				}
			}
		})
	}
}

func TestE2EPauseResumeCancel(t *testing.T) {
	env := startSim(t, true) // the Nomad store: steering through Variables and blocking queries
	env.register(t, "web", "service", map[string]int{"web": 4})
	rec := env.plan(t, "web", restart.Spec{Yes: true, BatchWait: 200 * time.Millisecond})
	if _, err := env.e.Pause(context.Background(), rec.Namespace, rec.ID, "op"); err != nil {
		t.Fatal(err)
	}
	wait, _ := driveAsync(env.e, rec)
	waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.Status == restart.StatusPaused })
	if _, err := env.e.Resume(context.Background(), rec.Namespace, rec.ID, "op"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.CurrentBatch >= 2 })
	if _, err := env.e.Cancel(context.Background(), rec.Namespace, rec.ID, "op"); err != nil {
		t.Fatal(err)
	}
	final, err := wait()
	if err != nil || final.Status != restart.StatusCanceled {
		t.Fatalf("final %v err %v", final.Status, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := simtest.CountRestarts(ctx, env.client, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	done := 0
	for _, a := range final.Allocs {
		switch a.State {
		case restart.AllocDone:
			done++
			if c.InPlace[a.ID] != 1 {
				t.Errorf("done allocation %s restarted %d times", a.ID, c.InPlace[a.ID])
			}
		case restart.AllocPending:
			if c.InPlace[a.ID] != 0 {
				t.Errorf("pending allocation %s restarted %d times", a.ID, c.InPlace[a.ID])
			}
		default:
			t.Errorf("allocation %s left %s in a canceled restart", a.ID, a.State)
		}
	}
	if done < 2 || done == 4 {
		t.Errorf("%d allocations done, want at least 2 and not all", done)
	}
}

// TestE2ENodeLost loses a node after the plan: its allocations are replaced by the scheduler
// before their batch comes, and are skipped with the reason rather than restarted or failed.
func TestE2ENodeLost(t *testing.T) {
	env := startSim(t, false)
	env.register(t, "web", "service", map[string]int{"web": 4})
	rec := env.plan(t, "web", restart.Spec{Yes: true, BatchSizes: []restart.BatchSize{{N: 2}}})
	lost := rec.Allocs[len(rec.Allocs)-1].NodeID
	env.sim.DownNode(lost)
	final := drive(t, env.e, rec, nil)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	var restarted []string
	for _, a := range final.Allocs {
		switch {
		case a.NodeID == lost && a.State != restart.AllocSkipped:
			t.Errorf("allocation %s on the lost node is %s, want skipped", a.ID, a.State)
		case a.NodeID != lost && a.State != restart.AllocDone:
			t.Errorf("allocation %s is %s (%s), want done", a.ID, a.State, a.Error)
		case a.NodeID != lost:
			restarted = append(restarted, a.ID)
		}
	}
	simtest.CheckOnce(t, env.client, "default", "web", restarted, false, testTimeout)
}
