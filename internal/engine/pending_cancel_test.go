package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// TestPendingCancelAppliedByNextDriver: a cancel recorded while another (dead) driver holds
// the lease is not overridden by Resume or Pause, and the next driver to take the lease ends
// the restart as canceled without restarting anything.
func TestPendingCancelAppliedByNextDriver(t *testing.T) {
	env := startSim(t, false)
	env.register(t, "web", "service", map[string]int{"web": 2}, "main")
	rec := env.plan(t, "web", restart.Spec{Yes: true})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	ghost, err := env.store.AcquireLease(ctx, rec.Namespace, rec.ID, "ghost")
	if err != nil {
		t.Fatal(err)
	}
	got, err := env.e.Cancel(ctx, rec.Namespace, rec.ID, "op")
	if err != nil || got.Status.Terminal() || got.Control.Intent != restart.IntentCancel {
		t.Fatalf("Cancel while held: %v, status %v intent %v; want a pending cancel", err, got.Status, got.Control.Intent)
	}
	for name, do := range map[string]func(context.Context, string, string, string) (*restart.Record, error){
		"Resume": env.e.Resume, "Pause": env.e.Pause,
	} {
		var ce *steer.CancelingError
		if _, err := do(ctx, rec.Namespace, rec.ID, "other"); !errors.As(err, &ce) {
			t.Errorf("%s of a canceling restart: %v, want *steer.CancelingError", name, err)
		}
	}
	if err := ghost.Release(ctx); err != nil { // the ghost's lease ends (died, expired)
		t.Fatal(err)
	}
	final := drive(t, env.e, rec, nil)
	if final.Status != restart.StatusCanceled {
		t.Fatalf("next driver left status %s (%s), want canceled", final.Status, final.Reason)
	}
	c, err := simtest.CountRestarts(ctx, env.client, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Allocs {
		for task, ts := range a.TaskStates {
			for _, ev := range ts.Events {
				if ev.Type == api.TaskRestartSignal {
					t.Errorf("alloc %s task %s restarted by a canceled restart", a.ID[:8], task)
				}
			}
		}
	}
}
