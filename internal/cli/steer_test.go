package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestDetachStatusResume(t *testing.T) {
	c, e, ctx := startWebEnv(t, 3)

	before := c.Stats().Endpoints
	id, out := e.runDetached(t, ctx, "-batch-size=2", "web")
	if _, kind := createdID(t, out); kind != "nomad" || !strings.Contains(out, "nomad-restart resume "+id) {
		t.Fatalf("want the Nomad store and how to resume:\n%s", out)
	}
	if n := requests(c.Stats(), "/v1/client/allocation/:id/restart") - requestsOf(before, "/v1/client/allocation/:id/restart"); n != 0 {
		t.Fatalf("-detach restarted %d allocations", n)
	}
	rec := statusOf(t, ctx, e, id)
	if rec.Status != restart.StatusPending || rec.JobID != "web" || len(rec.Allocs) != 3 || rec.Batches != 2 {
		t.Fatalf("status after -detach: %+v", rec)
	}

	// The list shows it, newest first, as JSON and as a table.
	code, out, _ := e.run(ctx, "status", "-json", "-job=web")
	var list []restart.Record
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].ID != rec.ID {
		t.Fatalf("status -json list: %d\n%s", code, out)
	}
	code, out, _ = e.run(ctx, "status")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "pending") {
		t.Fatalf("status table: %d\n%s", code, out)
	}

	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "Resuming restart "+id) || !strings.Contains(out, "Job restarted successfully!") {
		t.Fatalf("resume output:\n%s", out)
	}
	assertRestartedOnce(t, c, "web")
	if rec := statusOf(t, ctx, e, id); rec.Status != restart.StatusSucceeded {
		t.Fatalf("status after resume: %s", rec.Status)
	}
	code, out, _ = e.run(ctx, "status", id)
	for _, s := range []string{"Status", "= succeeded", "Allocations", "Batch", "Recent Events"} {
		if code != 0 || !strings.Contains(out, s) {
			t.Fatalf("status detail lacks %q:\n%s", s, out)
		}
	}
}

func TestPauseResumeCancelFromAnotherCommand(t *testing.T) {
	// Nomad's time at 5, not simtest's 50: slow enough that the restart is still between
	// its first and last batches when the other commands pause, resume and cancel it.
	c, e := startSimEnv(t, nomadsim.Options{TimeScale: 5}, simpleJob("web", api.JobTypeService, 4))
	ctx := testCtx(t)

	done := e.start(ctx, "run", "-on-error=fail", "web")
	id := waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.CurrentBatch >= 1 })
	if code, out, errOut := e.run(ctx, "pause", id); code != 0 || !strings.Contains(out, "Pause requested") {
		t.Fatalf("pause: %d\n%s\n%s", code, out, errOut)
	}
	rec := waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusPaused })
	_ = rec
	paused := statusOf(t, ctx, e, id)
	donePaused := 0
	for _, a := range paused.Allocs {
		if a.State == restart.AllocDone {
			donePaused++
		}
	}
	if donePaused == 0 || donePaused == 4 {
		t.Fatalf("paused with %d of 4 allocations done; want a pause between batches", donePaused)
	}
	if code, out, errOut := e.run(ctx, "resume", "-detach", id); code != 0 ||
		!strings.Contains(out, "Restart "+id+` of job "web" set to run`) || !strings.Contains(out, "`nomad-restart resume "+id+"` without -detach") {
		t.Fatalf("resume -detach: %d\n%s\n%s", code, out, errOut)
	}
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "Restart paused") || !strings.Contains(r.out, "Restart resumed") {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	assertRestartedOnce(t, c, "web")

	// A second restart of the same job, canceled after its first batch.
	done = e.start(ctx, "run", "-on-error=fail", "web")
	id2 := waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.ID[:8] != id && r.CurrentBatch >= 1 })
	if code, out, errOut := e.run(ctx, "cancel", id2); code != 0 || !strings.Contains(out, "Cancel requested") {
		t.Fatalf("cancel: %d\n%s\n%s", code, out, errOut)
	}
	r = <-done
	if r.code != 1 || !strings.Contains(r.out, "canceled") {
		t.Fatalf("run canceled from another command must exit 1: %d\n%s\n%s", r.code, r.out, r.err)
	}
	final := statusOf(t, ctx, e, id2)
	if final.Status != restart.StatusCanceled {
		t.Fatalf("status %s", final.Status)
	}
	restartedTwice := 0
	for _, tasks := range restarts(t, c, "web") {
		if tasks["main"] > 2 {
			t.Fatalf("an allocation restarted %d times", tasks["main"])
		}
		if tasks["main"] == 2 {
			restartedTwice++
		}
	}
	if restartedTwice == 0 || restartedTwice == 4 {
		t.Fatalf("%d allocations restarted by the canceled restart; want some, not all", restartedTwice)
	}
}

func TestAnswerDetachedBatchWaitAsk(t *testing.T) {
	c, e, ctx := startWebEnv(t, 3)
	id, _ := e.runDetached(t, ctx, "-batch-wait=ask", "-on-error=fail", "web")
	done := e.start(ctx, "resume", id)
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
	if code, out, errOut := e.run(ctx, "answer", id, "maybe"); code != 1 || !strings.Contains(errOut, "Invalid answer") {
		t.Fatalf("invalid answer: %d\n%s\n%s", code, out, errOut)
	}
	// An empty answer (a script's unset variable) is refused, not taken as the default.
	for _, empty := range []string{"", "  "} {
		code, out, errOut := e.run(ctx, "answer", id, empty)
		if code != 1 || !strings.Contains(errOut, "Invalid answer") || strings.Count(errOut, "\n") != 1 {
			t.Fatalf("empty answer %q: %d\n%s\n%s", empty, code, out, errOut)
		}
	}
	if r := statusOf(t, ctx, e, id); r.Control.Answer != "" || r.Status != restart.StatusWaiting {
		t.Fatalf("after empty answers: answer %q, status %s", r.Control.Answer, r.Status)
	}
	if code, out, errOut := e.run(ctx, "answer", id, "yes"); code != 0 {
		t.Fatalf("answer yes: %d\n%s\n%s", code, out, errOut)
	}
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusWaiting && r.CurrentBatch >= 2 })
	// A duration proceeds and replaces ask for the rest of the restart.
	if code, out, errOut := e.run(ctx, "answer", id, "0s"); code != 0 {
		t.Fatalf("answer 0s: %d\n%s\n%s", code, out, errOut)
	}
	r := <-done
	if r.code != 0 {
		t.Fatalf("resume: %d\n%s\n%s", r.code, r.out, r.err)
	}
	for _, s := range []string{"Proceed with the next batch? [Y/n/<wait duration>]", "answer with `nomad-restart answer " + id, "Proceeding restarts with new wait time of 0s"} {
		if !strings.Contains(r.out, s) {
			t.Errorf("output lacks %q:\n%s", s, r.out)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^==> \S+: Proceed with the next batch\?`).FindAllString(r.out, -1)); n != 2 {
		t.Errorf("want 2 questions (none after the duration answer):\n%s", r.out)
	}
	assertRestartedOnce(t, c, "web")
}

// TestResumeWhileDrivenFollows: a resume while another process drives the restart sets the
// intent and follows the driver instead of driving twice.
func TestResumeWhileDrivenFollows(t *testing.T) {
	// Nomad's time at 5, not simtest's 50: slow enough that the first driver still runs
	// the restart when resume is asked.
	c, e := startSimEnv(t, nomadsim.Options{TimeScale: 5}, simpleJob("web", api.JobTypeService, 3))
	ctx := testCtx(t)
	done := e.start(ctx, "run", "-on-error=fail", "web")
	id := waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.Status == restart.StatusRunning })
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 || !strings.Contains(out, "; waiting for it") || !strings.Contains(out, "Job restarted successfully!") {
		t.Fatalf("second resume: exit %d\n%s\n%s", code, out, errOut)
	}
	if r := <-done; r.code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	assertRestartedOnce(t, c, "web")
}

// ghostDriver takes the lease of restart id as a driver that then dies without a word: die
// ends its lock's TTL in the simulated Nomad, which frees it after a short lock delay.
func ghostDriver(t *testing.T, ctx context.Context, c *nomadsim.Cluster, id string) (full string, die func()) {
	t.Helper()
	client := adminClient(t, c)
	st, rec := findInNomad(t, ctx, client, id, 100*time.Millisecond)
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

// TestCancelUndrivenSurgeCLI: `cancel` of a -surge restart whose driver stopped (Ctrl-C)
// with its surge up scales the group back before the restart ends canceled, and `status`
// then shows the surge down and the cancel's events.
func TestCancelUndrivenSurgeCLI(t *testing.T) {
	c, e, ctx := startWebEnv(t, 2)
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	done := make(chan string, 1)
	go func() {
		_, out, _ := e.run(runCtx, "run", "-on-error=fail", "-state=local", "-surge=1", "-batch-size=1", "-batch-wait=1h", "web")
		done <- out
	}()
	// The surge is up and the first batch done: the driver waits an hour for the next.
	waitRestart(t, ctx, e, "web", func(r *restart.Record) bool { return r.DecidedBatch == 1 })
	interrupt()
	id, _ := createdID(t, <-done)
	if n := groupCount(t, c); n != 3 {
		t.Fatalf("count %d while detached, want the surge's 3", n)
	}

	code, out, errOut := e.run(ctx, "cancel", id)
	if code != 0 || !strings.Contains(out, "(status: canceled)") {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := groupCount(t, c); n != 2 {
		t.Errorf("count %d after the cancel, want 2 restored", n)
	}
	_, out, _ = e.run(ctx, "status", id)
	for _, re := range []string{`(?m)^Status\s+= canceled$`, `(?m)^web\s+2\s+3\s+down\s+-$`, `Scaling group "web" back to 2`,
		`Job restart canceled by tester\S*; surge over: group "web" is at its original count, 2`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status after the cancel lacks %s:\n%s", re, out)
		}
	}
}

// groupCount is the count of the job "web"'s group "web" in Nomad.
func groupCount(t *testing.T, c *nomadsim.Cluster) int {
	t.Helper()
	j, _, err := adminClient(t, c).Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	return *j.TaskGroups[0].Count
}

// waitFleet waits until the fleet satisfies cond and returns it.
func waitFleet(t *testing.T, ctx context.Context, e cliEnv, id, what string, cond func(*fleetJSON) bool) *fleetJSON {
	t.Helper()
	var got *fleetJSON
	simtest.WaitFor(t, ctx, "fleet "+id+": "+what, func() bool {
		got = fleetOf(t, ctx, e, id)
		return cond(got)
	})
	return got
}

// TestFleetDetachThenResume records a fleet with -detach and drives it with `resume`.
func TestFleetDetachThenResume(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "dt", 3, 2)

	id, out := detachFleet(t, ctx, e, "dt", "-on-error=fail", "-max-parallel-jobs=3")
	if !strings.Contains(out, "is recorded and waits for a driver") {
		t.Fatalf("run -detach does not say the fleet waits for a driver:\n%s", out)
	}
	if !strings.Contains(out, "nomad-restart resume "+id) {
		t.Errorf("run -detach does not say how to drive it:\n%s", out)
	}
	if f := fleetOf(t, ctx, e, id); f.Status != restart.StatusPending {
		t.Fatalf("detached fleet: status %s", f.Status)
	}
	assertMainRestarted(t, c, "dt-0", 0)

	code, out, errOut := e.run(ctx, "resume", id)
	t.Logf("resume:\n%s\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "Fleet restarted 3 jobs successfully!") {
		t.Fatalf("resume: exit %d", code)
	}
	f := fleetOf(t, ctx, e, id)
	if f.Status != restart.StatusSucceeded {
		t.Fatalf("fleet: %s", f.Status)
	}
	checkFleetOnce(t, ctx, c, e, f)
	if code, _, errOut := e.run(ctx, "resume", id); code != 1 || !strings.Contains(errOut, "has already ended (succeeded)") {
		t.Errorf("resume of an ended fleet: exit %d: %s", code, errOut)
	}
}

// TestFleetPauseResume pauses a fleet being driven (no new job starts), sets it to run with
// resume -detach (its driver goes on), then resumes it from another process, which follows
// it to its end while the first driver finishes it.
func TestFleetPauseResume(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "pr", 4, 2)
	id, _ := detachFleet(t, ctx, e, "pr", "-on-error=fail", "-batch-wait=1s")
	driver := e.start(ctx, "resume", id)
	waitFleet(t, ctx, e, id, "its first job running", func(f *fleetJSON) bool { return f.Jobs[0].Status == fleet.JobRunning })

	code, out, errOut := e.run(ctx, "pause", id)
	if code != 0 || !strings.Contains(out, "pause requested") {
		t.Fatalf("pause: exit %d\n%s\n%s", code, out, errOut)
	}
	paused := waitFleet(t, ctx, e, id, "paused", func(f *fleetJSON) bool { return f.Status == restart.StatusPaused })
	started := len(paused.Jobs) - paused.Counts()[fleet.JobPending]
	// The child running when the pause came holds after its batch (or ends): then nothing
	// moves until the resume.
	waitFleet(t, ctx, e, id, "its running job held", func(f *fleetJSON) bool {
		for _, j := range f.Jobs {
			if j.Status != fleet.JobRunning {
				continue
			}
			// The fleet names a job's restart before its driver creates the record.
			if rec, err := readStatus(ctx, e, j.RestartID); err != nil || rec.Status != restart.StatusPaused {
				return false
			}
		}
		return true
	})
	if f := fleetOf(t, ctx, e, id); len(f.Jobs)-f.Counts()[fleet.JobPending] != started || f.Status != restart.StatusPaused {
		t.Fatalf("a paused fleet started jobs: %d started at the pause, now %v (%s)", started, f.Counts(), f.Status)
	}

	// Set to run and left to its driver; then a resume that follows it to the end.
	code, out, errOut = e.run(ctx, "resume", "-detach", id)
	if code != 0 || !strings.Contains(out, "Fleet "+id+" set to run") || !strings.Contains(out, "`nomad-restart resume "+id+"` without -detach") {
		t.Fatalf("resume -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = e.run(ctx, "resume", id)
	t.Logf("second resume:\n%s\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "is driven by") || !strings.Contains(out, "Fleet restarted 4 jobs successfully!") {
		t.Fatalf("resume: exit %d", code)
	}
	if r := <-driver; r.code != 0 {
		t.Fatalf("the first driver: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	checkFleetOnce(t, ctx, c, e, fleetOf(t, ctx, e, id))
}

// TestFleetCancel cancels a fleet being driven: no new job starts, its running restart is
// canceled, the fleet ends canceled and its driver exits 1; the jobs never started are
// untouched.
func TestFleetCancel(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "cx", 3, 3)
	driver := e.start(ctx, "run", "-jobs", `Name matches "^cx-"`, "-on-error=fail", "-batch-wait=1s")
	id := waitFirstJobRunning(t, ctx, e)
	code, out, errOut := e.run(ctx, "cancel", id)
	if code != 0 || !strings.Contains(out, "cancel requested") {
		t.Fatalf("cancel: exit %d\n%s\n%s", code, out, errOut)
	}
	r := <-driver
	t.Logf("driver:\n%s\n%s", r.out, r.err)
	if r.code != 1 || !strings.Contains(r.err, "canceled") {
		t.Fatalf("the driver of a canceled fleet: exit %d", r.code)
	}
	f := fleetOf(t, ctx, e, id)
	if f.Status != restart.StatusCanceled || f.Counts()[fleet.JobPending] != 0 || f.Counts()[fleet.JobRunning] != 0 {
		t.Fatalf("canceled fleet: %s %v", f.Status, f.Counts())
	}
	for _, j := range f.Jobs {
		if j.RestartID == "" {
			assertMainRestarted(t, c, j.JobID, 0)
		}
	}
	if code, _, errOut := e.run(ctx, "pause", id); code != 1 || !strings.Contains(errOut, "has already ended (canceled)") {
		t.Errorf("pause of a canceled fleet: exit %d: %s", code, errOut)
	}
}

// TestFleetResumeTakesOverFromDeadDriver: resume of a fleet whose driver died holding its
// lease waits while the lock runs, then takes over once Nomad expires it (the lease
// variable then still names the dead holder, as on a real agent: only an attempt to take
// the lock tells it is free).
func TestFleetResumeTakesOverFromDeadDriver(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "gh", 2, 1)
	short, _ := detachFleet(t, ctx, e, "gh", "-on-error=fail")
	id := fleetOf(t, ctx, e, short).ID
	ghost := nomadFleets(adminClient(t, c), 100*time.Millisecond)
	lease, err := ghost.AcquireLease(ctx, "default", id, "ghost@gone")
	if err != nil {
		t.Fatalf("ghost lease: %v", err)
	}
	t.Cleanup(func() { _ = lease.Release(context.Background()) })

	done := e.start(ctx, "resume", id)
	select {
	case r := <-done:
		t.Fatalf("resume ended while the lease was held: exit %d\n%s\n%s", r.code, r.out, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	if !c.ExpireLock("default", "nomad-restart/~fleets/"+id+"/lease") {
		t.Fatal("the ghost's lock was not running")
	}
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "taking over") || !strings.Contains(r.out, "Fleet restarted 2 jobs successfully!") {
		t.Fatalf("resume: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	checkFleetOnce(t, ctx, c, e, fleetOf(t, ctx, e, id))
}

// TestFleetAnswerGoesToWaitingJobs answers, by the fleet's ID, the question a job's restart
// waits on (-on-error ask after its failed batch), while a driver without a terminal runs
// the fleet.
func TestFleetAnswerGoesToWaitingJobs(t *testing.T) {
	c, e, ctx := startFleetEnv(t, "aq", 2, 1)
	id, _ := detachFleet(t, ctx, e, "aq")
	c.FailTaskStarts("default", "aq-0", "main", 100)
	driver := e.start(ctx, "resume", id)
	// The fleet's record names a job's restart before the driver files it: wait on the
	// restart by its job, which finds none until it is filed.
	waitRestart(t, ctx, e, "aq-0", func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
	f := waitFleet(t, ctx, e, id, "its first job running", func(f *fleetJSON) bool { return f.Jobs[0].Status == fleet.JobRunning })
	code, out, errOut := e.run(ctx, "answer", id, "yes")
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
