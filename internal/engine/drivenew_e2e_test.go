package engine

import (
	"context"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// TestE2EDriveNew drives restarts just created: one runs to its end, restarting every
// allocation once; one canceled between its creation and its drive ends canceled, and one
// paused then pauses before its first batch, neither restarting anything.
func TestE2EDriveNew(t *testing.T) {
	env := startSim(t, true)
	env.register(t, "web", "service", map[string]int{"api": 3})
	env.register(t, "db", "service", map[string]int{"main": 2})
	env.register(t, "cache", "service", map[string]int{"main": 2})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	spec := restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}, Yes: true}

	rec := env.plan(t, "web", spec)
	var l eventLog
	final, err := env.e.DriveNew(ctx, rec, l.sink)
	if err != nil || final.Status != restart.StatusSucceeded {
		t.Fatalf("DriveNew: %v, status %s (%s)\n%s", err, final.Status, final.Reason, l.messages())
	}
	if rec.Status != restart.StatusPending {
		t.Errorf("DriveNew changed the caller's record: status %s", rec.Status)
	}
	env.checkOnce(t, final)

	canceled := env.plan(t, "db", spec)
	if _, err := env.e.Cancel(ctx, canceled.Namespace, canceled.ID, "tester"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	final, err = env.e.DriveNew(ctx, canceled, nil)
	if err != nil || final.Status != restart.StatusCanceled {
		t.Fatalf("DriveNew of a restart canceled since its creation: %v, status %s", err, final.Status)
	}
	noRestarts(ctx, t, env, "db")

	paused := env.plan(t, "cache", spec)
	if _, err := env.e.Pause(ctx, paused.Namespace, paused.ID, "tester"); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	dctx, detach := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = env.e.DriveNew(dctx, paused, nil)
	}()
	simtest.WaitFor(t, ctx, "the restart paused since its creation to pause", func() bool {
		r, err := env.store.Get(ctx, paused.Namespace, paused.ID)
		return err == nil && r.Status == restart.StatusPaused
	})
	detach()
	<-done
	noRestarts(ctx, t, env, "cache")
}

// noRestarts fails the test if Nomad's facts show an allocation of job restarted.
func noRestarts(ctx context.Context, t *testing.T, env *simEnv, job string) {
	t.Helper()
	counts, err := simtest.CountRestarts(ctx, env.client, "default", job)
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range counts.InPlace {
		t.Errorf("allocation %s of job %s was restarted %d times", id, job, n)
	}
}
