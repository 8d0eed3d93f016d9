package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// ghostDriver takes the lease of restart id as a driver that then dies without a word: die
// ends its lock's TTL in the simulated Nomad, which frees it after a short lock delay.
func ghostDriver(t *testing.T, ctx context.Context, c *nomadsim.Cluster, id string) (full string, die func()) {
	t.Helper()
	client := adminClient(t, c)
	st, rec := findInNomad(t, ctx, client, id, store.NomadOptions{LockDelay: 100 * time.Millisecond})
	lease, err := st.AcquireLease(ctx, rec.Namespace, rec.ID, "ghost@gone")
	if err != nil {
		t.Fatalf("ghost lease: %v", err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })
	vars, _, err := client.Variables().PrefixList("", nil)
	if err != nil {
		t.Fatal(err)
	}
	path := ""
	for _, v := range vars {
		if strings.Contains(v.Path, rec.ID) && strings.HasSuffix(v.Path, "/lease") {
			path = v.Path
		}
	}
	if path == "" {
		t.Fatalf("no lease variable for restart %s among %d variables", rec.ID, len(vars))
	}
	return rec.ID, func() {
		if !c.ExpireLock(rec.Namespace, path) {
			t.Errorf("ExpireLock(%s): no lock was running", path)
		}
	}
}

// findInNomad finds restart id in the Nomad store that opts configure.
func findInNomad(t *testing.T, ctx context.Context, client *api.Client, id string, opts store.NomadOptions) (*store.Nomad, *restart.Record) {
	t.Helper()
	st := store.NewNomad(client, opts)
	rec, err := st.Find(ctx, "", id)
	if err != nil {
		t.Fatalf("finding restart %s: %v", id, err)
	}
	return st, rec
}

// detachedWithGhost records a detached restart of a running job "web" of count allocations,
// driven by a ghost (ghostDriver); die ends the ghost's lease.
func detachedWithGhost(t *testing.T, ctx context.Context, count int) (c *nomadsim.Cluster, e cliEnv, id string, die func()) {
	t.Helper()
	c, e = startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, count))
	id, _ = e.runDetached(t, ctx, "web")
	_, die = ghostDriver(t, ctx, c, id)
	return c, e, id, die
}

// TestResumeTakesOverFromDeadDriver: resume of a restart whose driver died waits for the
// lease, says so once, then drives the restart to its end.
func TestResumeTakesOverFromDeadDriver(t *testing.T) {
	ctx := testCtx(t)
	c, e, id, die := detachedWithGhost(t, ctx, 2)
	done := e.start(ctx, "resume", id)
	// Resume must still wait while the ghost holds the lease.
	select {
	case r := <-done:
		t.Fatalf("resume ended while the lease was held: exit %d\n%s\n%s", r.code, r.out, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	die()
	r := <-done
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	for _, want := range []string{"is driven by ghost@gone; waiting for it, or for its lease to expire", "its lease is free; taking over", "Job restarted successfully!"} {
		if strings.Count(r.out, want) != 1 {
			t.Errorf("resume output has %q %d times, want once:\n%s", want, strings.Count(r.out, want), r.out)
		}
	}
	assertRestartedOnce(t, c, "web")
}

// TestPendingCancelNotOverridden: a cancel recorded while a dead driver holds the lease is
// said to wait for that driver; resume refuses to override it; once the lease is free, cancel
// ends the restart.
func TestPendingCancelNotOverridden(t *testing.T) {
	ctx := testCtx(t)
	c, e, id, die := detachedWithGhost(t, ctx, 2)

	code, out, errOut := e.run(ctx, "cancel", id)
	if code != 0 || !strings.Contains(out, "The cancel is recorded; it takes effect when its driver") {
		t.Fatalf("cancel while held: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = e.run(ctx, "resume", id)
	if code != 1 || !strings.Contains(errOut, "is being canceled") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("resume of a canceling restart: exit %d, want 1 and one line\n%s\n%s", code, out, errOut)
	}
	if rec := statusOf(t, ctx, e, id); rec.Control.Intent != restart.IntentCancel {
		t.Fatalf("intent after the refused resume: %q, want cancel", rec.Control.Intent)
	}
	if code, out, _ := e.run(ctx, "status", id); code != 0 || strings.Contains(out, "Driver = none") {
		t.Fatalf("status while the ghost holds the lease: exit %d, says no driver:\n%s", code, out)
	}
	die()
	simtest.WaitFor(t, ctx, "status to say nobody drives the restart", func() bool {
		_, out, _ := e.run(ctx, "status", id)
		return strings.Contains(out, "Driver      = none — resume it with `nomad-restart resume "+id+"`")
	})
	simtest.WaitFor(t, ctx, "the cancel to end the restart", func() bool {
		code, _, _ := e.run(ctx, "cancel", id)
		return code == 0 && statusOf(t, ctx, e, id).Status == restart.StatusCanceled
	})
	assertMainRestarted(t, c, "web", 0) // by a canceled restart
}

// TestAttachToOrphanSaysNobodyDrives: a viewer leaving a restart nobody drives does not claim
// that it goes on.
func TestAttachToOrphanSaysNobodyDrives(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 1))
	ctx := testCtx(t)
	id, _ := e.runDetached(t, ctx, "web")
	// Its driver wrote its name, then died.
	st, rec := findInNomad(t, ctx, adminClient(t, c), id, store.NomadOptions{})
	if _, err := store.Mutate(ctx, st, rec.Namespace, rec.ID, func(r *restart.Record) error { r.Driver = "dead@host"; return nil }); err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	code, out, errOut := e.run(actx, "attach", id)
	if !strings.Contains(out, "was driven by dead@host, but no process drives it now") {
		t.Errorf("attach does not say the named driver is gone:\n%s", out)
	}
	if code != 1 || !strings.Contains(errOut, "no process drives it now") || strings.Contains(errOut, "goes on without this viewer") {
		t.Fatalf("attach to an orphan, stopped: exit %d\n%s\n%s", code, out, errOut)
	}
}
