package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestFleetIDs checks how commands resolve IDs among restarts and fleets: a prefix
// matching both is ambiguous, a longer one picks the fleet; attach follows a fleet to its
// end; answer refuses a fleet with nothing to answer; a child restart is steered alone.
func TestFleetIDs(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "id", 2, 2)
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-detach", "-jobs", `Name matches "^id-"`, "-on-error=fail")
	if code != 0 {
		t.Fatalf("run -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	id := fleetIDIn(t, out)

	// A restart in the local store whose ID shares the fleet's first 4 characters.
	twin := id[:4] + "0000-0000-4000-8000-000000000000"
	if twin[:8] == id {
		twin = id[:4] + "1111-0000-4000-8000-000000000000"
	}
	rec := &restart.Record{ID: twin, Namespace: "default", JobID: "elsewhere", Status: restart.StatusPending, CreateTime: time.Now()}
	if err := e.localStore(t).Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := e.run(ctx, "status", id[:4]); code != 1 || !strings.Contains(errOut, "matches restart "+twin[:8]+" and fleet "+id) {
		t.Errorf("status of a prefix of both: exit %d: %s", code, errOut)
	}
	if code, out, _ := e.run(ctx, "status", id); code != 0 || !strings.Contains(out, "Kind        = fleet") || !strings.Contains(out, "2 selected: 0 done, 0 running, 2 pending") {
		t.Errorf("status of the fleet: exit %d\n%s", code, out)
	}
	if code, _, errOut := e.run(ctx, "answer", id, "yes"); code != 1 || !strings.Contains(errOut, "is not waiting for an answer") {
		t.Errorf("answer to a fleet with no question: exit %d: %s", code, errOut)
	}

	// Ctrl-C stops the viewer only, and says that no process drives the fleet.
	viewCtx, stopViewing := context.WithCancel(ctx)
	var viewOut syncBuffer
	viewer := goRun(func() (int, string, string) {
		var errb syncBuffer
		code := e.app(&viewOut, &errb).run(viewCtx, []string{"attach", id})
		return code, viewOut.String(), errb.String()
	})
	simtest.WaitFor(t, ctx, "attach to follow the fleet", func() bool { return strings.Contains(viewOut.String(), "No process drives this fleet now") })
	stopViewing()
	if r := <-viewer; r.code != 1 || !strings.Contains(r.err, "Stopped following fleet "+id+"; no process drives it now") {
		t.Errorf("attach stopped: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	attached := e.start(ctx, "attach", id)
	code, out, errOut = e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	r := <-attached
	t.Logf("attach:\n%s\n%s", r.out, r.err)
	if r.code != 0 || !strings.Contains(r.out, "Attached to fleet "+id) || !strings.Contains(r.out, "Fleet restarted 2 jobs successfully!") || !strings.Contains(r.out, "[id-1] ") {
		t.Fatalf("attach: exit %d", r.code)
	}
	f := fleetOf(t, ctx, e, id)
	checkFleetOnce(t, ctx, c, e, f)

	// A child is a restart of its own: its ID works alone, and says its fleet.
	child := f.Jobs[0].RestartID[:8]
	if code, out, _ := e.run(ctx, "status", child); code != 0 || !strings.Contains(out, "Fleet") || !strings.Contains(out, "succeeded") {
		t.Errorf("status of a child: exit %d\n%s", code, out)
	}
	if code, _, errOut := e.run(ctx, "cancel", child); code != 1 || !strings.Contains(errOut, "restart "+child) || !strings.Contains(errOut, "already ended") {
		t.Errorf("cancel of an ended child: exit %d: %s", code, errOut)
	}
}

// TestFleetFailedJobStopsTheFleet runs a fleet whose first job's tasks fail to start again:
// the first failure stops the fleet (-max-failed-jobs 0, -on-error fail) and run exits 1
// naming the failed and canceled jobs. The dry run names a problem planning finds.
func TestFleetFailedJobStopsTheFleet(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "ft", 3, 1)
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-jobs", `Name matches "^ft-"`, "-task=nosuch", "-dry-run")
	if code != 0 || !strings.Contains(out, `task "nosuch"`) || !strings.Contains(out, "3 jobs would not restart now") {
		t.Errorf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}

	// A job whose restart cannot even be planned fails at its turn, and stops the fleet too.
	code, out, errOut = e.run(ctx, "run", "-jobs", `Name matches "^ft-"`, "-task=nosuch", "-on-error=fail")
	if code != 1 || !strings.Contains(errOut, `* job "ft-0" (namespace "default") failed: task "nosuch" not found`) {
		t.Errorf("run with a task no job has: exit %d\n%s\n%s", code, out, errOut)
	}

	c.FailTaskStarts("default", "ft-0", "main", 100)
	code, out, errOut = e.run(ctx, "run", "-jobs", `Name matches "^ft-"`, "-on-error=fail", "-healthy-deadline=1m")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 1 || !strings.Contains(errOut, "failed") || !strings.Contains(errOut, `* job "ft-0" (namespace "default") failed`) ||
		!strings.Contains(errOut, `* job "ft-2" (namespace "default") canceled`) {
		t.Fatalf("run: exit %d", code)
	}
	f := fleetOf(t, ctx, e, fleetIDIn(t, out))
	if f.Status != restart.StatusFailed || f.Counts()[fleet.JobFailed] != 1 || f.Counts()[fleet.JobCanceled] != 2 {
		t.Errorf("fleet: %s %v", f.Status, f.Counts())
	}
	for _, job := range []string{"ft-1", "ft-2"} {
		assertMainRestarted(t, c, job, 0)
	}
}

// TestFleetAnswerGoesToWaitingJobs answers, by the fleet's ID, the question a job's restart
// waits on (-on-error ask after its failed batch), while a driver without a terminal runs
// the fleet.
func TestFleetAnswerGoesToWaitingJobs(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "aq", 2, 1)
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-detach", "-jobs", `Name matches "^aq-"`)
	if code != 0 {
		t.Fatalf("run -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	id := fleetIDIn(t, out)
	c.FailTaskStarts("default", "aq-0", "main", 100)
	driver := e.start(ctx, "resume", id)
	f := waitFleet(t, ctx, e, id, "its first job's restart waiting for an answer", func(f *fleetJSON) bool {
		j := f.Jobs[0]
		return j.Status == fleet.JobRunning && statusOf(t, ctx, e, j.RestartID).Status == restart.StatusWaiting
	})
	code, out, errOut = e.run(ctx, "answer", id, "yes")
	if code != 0 || !strings.Contains(out, `Answered "yes" to 1 restart of fleet `+id+": "+f.Jobs[0].RestartID[:8]) {
		t.Fatalf("answer: exit %d\n%s\n%s", code, out, errOut)
	}
	r := <-driver
	t.Logf("driver:\n%s\n%s", r.out, r.err)
	if !strings.Contains(r.out, "[aq-0] ") || !strings.Contains(r.out, "nomad-restart answer "+id) {
		t.Errorf("the driver did not show the question and how to answer it")
	}
	f = fleetOf(t, ctx, e, id)
	if !f.Status.Terminal() || f.Jobs[1].Status != fleet.JobSucceeded {
		t.Errorf("fleet after the answer: %s, jobs %v", f.Status, f.Counts())
	}
}

// app is an invocation of the command line on e, off a terminal, writing to out and errOut
// (which a test may read while the command runs).
func (e cliEnv) app(out, errOut *syncBuffer) *app {
	env := map[string]string{"NOMAD_ADDR": e.addr, "NOMAD_TOKEN": e.token, "USER": "tester", "CONSUL_HTTP_ADDR": "http://127.0.0.1:1"}
	a := newApp(strings.NewReader(""), out, errOut, func(k string) string { return env[k] })
	a.backend = nomadBackend{localDir: e.localDir, clock: e.clock, timeScale: e.scale}
	return a
}

// TestFleetPromptsOnATerminal drives fleets on a terminal, which asks the questions here:
// a job's restart's (its batch failed), then the fleet's own (its failure budget spent),
// each answered by a line typed.
func TestFleetPromptsOnATerminal(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "tp", 3, 1)
	ctx := testCtx(t)

	c.FailTaskStarts("default", "tp-0", "main", 100)
	code, out, errOut := e.runIn(ctx, strings.NewReader("y\n"), true, "run", "-jobs", `Name matches "^tp-"`)
	t.Logf("job's question:\n%s\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "[tp-0] The last batch had the errors above.") || !strings.Contains(out, "Answer for tp-0: ") ||
		!strings.Contains(out, `[tp-0] Answer "y" by tester`) || strings.Contains(out, "Answer with `nomad-restart answer") {
		t.Fatalf("run on a terminal: exit %d", code)
	}
	// While nothing is asked, the line below the events shows the fleet's progress.
	if !regexp.MustCompile(`\x1b\[2Kjobs [0-3]/3 done[a-z0-9, ]*  elapsed `).MatchString(out) {
		t.Errorf("no progress line of the fleet on the terminal:\n%q", out)
	}

	// Every job fails at its turn (a task they lack): yes to the first question starts
	// the second job, no to the next ends the fleet failed, its third job canceled.
	code, out, errOut = e.runIn(ctx, strings.NewReader("y\nn\n"), true, "run", "-jobs", `Name matches "^tp-"`, "-task=nosuch")
	t.Logf("fleet's question:\n%s\n%s", out, errOut)
	if code != 1 || strings.Count(out, "Start the remaining jobs anyway (yes raises -max-failed-jobs to the failures so far)? [y/N]") != 2 || !strings.Contains(errOut, "answered no") {
		t.Fatalf("run on a terminal: exit %d", code)
	}
	f := fleetOf(t, ctx, e, fleetIDIn(t, out))
	if f.Status != restart.StatusFailed || f.Counts()[fleet.JobFailed] != 2 || f.Counts()[fleet.JobCanceled] != 1 {
		t.Errorf("fleet: %s %v", f.Status, f.Counts())
	}
}
