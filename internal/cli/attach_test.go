package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

func TestAttachFollowsToTheEnd(t *testing.T) {
	_, e, ctx := startWebEnv(t, 3)
	id, _ := e.runDetached(t, ctx, "web")

	attached := e.start(ctx, "attach", id)
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: %d\n%s\n%s", code, out, errOut)
	}
	r := <-attached
	if r.code != 0 {
		t.Fatalf("attach: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	for _, s := range []string{"Attached to restart " + id, "Restarting 3 allocations", "Job restart finished", "Job restarted successfully!"} {
		if !strings.Contains(r.out, s) {
			t.Errorf("attach output lacks %q:\n%s", s, r.out)
		}
	}
	// attach on an ended restart prints it and exits with its result.
	code, out, _ = e.run(ctx, "attach", id)
	if code != 0 || !strings.Contains(out, "Job restart finished") {
		t.Fatalf("attach after the end: %d\n%s", code, out)
	}
}

// TestAttachCtrlCStopsOnlyTheViewer checks that interrupting attach leaves the restart alone.
func TestAttachCtrlCStopsOnlyTheViewer(t *testing.T) {
	_, e, ctx := startWebEnv(t, 2)
	id, _ := e.runDetached(t, ctx, "web")
	code, _, errOut := attachUntil(t, ctx, e, id, "No process drives this restart")
	if code != 1 || !strings.Contains(errOut, "Stopped following restart "+id) {
		t.Fatalf("attach interrupted: exit %d: %s", code, errOut)
	}
	if rec := statusOf(t, ctx, e, id); rec.Status != restart.StatusPending {
		t.Fatalf("the viewer changed the restart: %s", rec.Status)
	}
}

// TestAttachToOrphanSaysNobodyDrives: a viewer leaving a restart nobody drives does not claim
// that it goes on.
func TestAttachToOrphanSaysNobodyDrives(t *testing.T) {
	c, e, ctx := startWebEnv(t, 1)
	id, _ := e.runDetached(t, ctx, "web")
	// Its driver wrote its name, then died.
	st, rec := findInNomad(t, ctx, adminClient(t, c), id, 0)
	if _, err := store.Mutate(ctx, st, rec.Namespace, rec.ID, func(r *restart.Record) error { r.Driver = "dead@host"; return nil }); err != nil {
		t.Fatal(err)
	}
	// The lease's probe may take a while on a loaded machine: the viewer is stopped once it
	// said so.
	code, out, errOut := attachUntil(t, ctx, e, id, "was driven by dead@host, but no process drives it now")
	if code != 1 || !strings.Contains(errOut, "no process drives it now") || strings.Contains(errOut, "goes on without this viewer") {
		t.Fatalf("attach to an orphan, stopped: exit %d\n%s\n%s", code, out, errOut)
	}
}

// attachUntil runs `attach id` until its output says want, then stops it as Ctrl-C does,
// and returns its exit code and output.
func attachUntil(t *testing.T, ctx context.Context, e cliEnv, id, want string) (code int, out, errOut string) {
	t.Helper()
	actx, stop := context.WithCancel(ctx)
	defer stop()
	var aout, aerr simtest.SyncBuffer
	a := newApp(strings.NewReader(""), &aout, &aerr, func(k string) string { return map[string]string{"NOMAD_ADDR": e.addr}[k] })
	a.backend = nomadBackend{localDir: e.localDir}
	done := make(chan int, 1)
	go func() { done <- a.run(actx, []string{"attach", id}) }()
	simtest.WaitFor(t, ctx, "attach to say "+want, func() bool { return strings.Contains(aout.String(), want) })
	stop()
	return <-done, aout.String(), aerr.String()
}
