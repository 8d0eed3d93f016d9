package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestCtrlCDetachesAndResumeFinishesExactlyOnce interrupts a driving `run` (as Ctrl-C or
// SIGTERM do through the context), then resumes the restart from another command: every
// allocation is restarted exactly once.
func TestCtrlCDetachesAndResumeFinishesExactlyOnce(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{TimeScale: 5}, simpleJob("web", api.JobTypeService, 5))
	ctx := testCtx(t)
	runCtx, interrupt := context.WithCancel(ctx)
	done := e.start(runCtx, "run", "-on-error=fail", "web")
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.CurrentBatch >= 2 })
	interrupt()
	r := <-done
	if r.code != 1 || !regexp.MustCompile("Detached from restart [0-9a-f]{8}; it is not running now. Resume it with `nomad-restart resume [0-9a-f]{8}`").MatchString(r.err) {
		t.Fatalf("detach: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	id, _ := createdID(t, r.out)
	rec := statusOf(t, ctx, e, id)
	if rec.Status.Terminal() {
		t.Fatalf("detached restart is %s", rec.Status)
	}
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: %d\n%s\n%s", code, out, errOut)
	}
	assertRestartedOnce(t, c, "web")
}

// TestAttachCtrlCStopsOnlyTheViewer checks that interrupting attach leaves the restart alone.
func TestAttachCtrlCStopsOnlyTheViewer(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 2))
	ctx := testCtx(t)
	id, _ := e.runDetached(t, ctx, "web")
	attachCtx, stop := context.WithCancel(ctx)
	var aout, aerr syncBuffer
	a := newApp(strings.NewReader(""), &aout, &aerr, func(k string) string { return map[string]string{"NOMAD_ADDR": e.addr}[k] })
	a.backend = nomadBackend{localDir: e.localDir}
	done := make(chan int, 1)
	go func() { done <- a.run(attachCtx, []string{"attach", id}) }()
	simtest.WaitFor(t, ctx, "attach to say no process drives the restart", func() bool {
		return strings.Contains(aout.String(), "No process drives this restart")
	})
	stop()
	if code := <-done; code != 1 || !strings.Contains(aerr.String(), "Stopped following restart "+id) {
		t.Fatalf("attach interrupted: exit %d: %s", code, aerr.String())
	}
	if rec := statusOf(t, ctx, e, id); rec.Status != restart.StatusPending {
		t.Fatalf("the viewer changed the restart: %s", rec.Status)
	}
}

func TestVerboseShowsSkippedAllocations(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, testJob("example", api.JobTypeService))
	code, out, errOut := e.run(testCtx(t), "run", "-verbose", "-on-error=fail", "-batch-size=100%", "-group=single_task", "example")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if n := strings.Count(out, "Skipping allocation"); n != 2 {
		t.Fatalf("want 2 skipped allocations of group multiple_tasks, got %d:\n%s", n, out)
	}
	if !regexp.MustCompile(`Restart [0-9a-f-]{36} of job`).MatchString(out) {
		t.Fatalf("-verbose must print full IDs:\n%s", out)
	}
}
