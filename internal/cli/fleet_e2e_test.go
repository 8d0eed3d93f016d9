package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The end-to-end tests of fleet restarts (`run -jobs`) and of steering fleets by ID, on
// nomadsim over real HTTP.

// fleetJSON is a fleet as `status -json <fleet-id>` prints it.
type fleetJSON struct {
	Kind string
	fleet.Record
}

// registerFleetJobs registers n service jobs prefix-0..n-1 of count allocations in
// namespace ns ("" for default) and waits until they run.
func registerFleetJobs(t *testing.T, c *nomadsim.Cluster, ns, prefix string, n, count int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		job := simpleJob(id, api.JobTypeService, count)
		ids = append(ids, id)
		if ns == "" {
			register(t, c, job)
			continue
		}
		job.Namespace = &ns
		if _, err := c.RegisterJob(job); err != nil {
			t.Fatalf("registering %s/%s: %v", ns, id, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := c.WaitJobRunning(ctx, ns, id)
		cancel()
		if err != nil {
			t.Fatalf("waiting for %s/%s to run: %v", ns, id, err)
		}
	}
	return ids
}

var fleetIDRe = regexp.MustCompile(`Fleet ([0-9a-f]{8}) (?:created|is recorded)`)

// fleetIDIn returns the short fleet ID `run -jobs` printed.
func fleetIDIn(t *testing.T, out string) string {
	t.Helper()
	m := fleetIDRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no fleet ID in:\n%s", out)
	}
	return m[1]
}

// fleetOf reads a fleet with `status -json <id>`.
func fleetOf(t *testing.T, ctx context.Context, e cliEnv, id string) *fleetJSON {
	t.Helper()
	code, out, errOut := e.run(ctx, "status", "-json", id)
	if code != 0 {
		t.Fatalf("status -json %s: exit %d\n%s\n%s", id, code, out, errOut)
	}
	var f fleetJSON
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("status -json %s: %v\n%s", id, err, out)
	}
	if f.Kind != "fleet" {
		t.Fatalf("status -json %s: Kind %q, want fleet", id, f.Kind)
	}
	return &f
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

// checkFleetOnce checks from Nomad's facts that every planned allocation of each job the
// fleet restarted was restarted exactly once, and returns the jobs' restart windows.
func checkFleetOnce(t *testing.T, ctx context.Context, c *nomadsim.Cluster, e cliEnv, f *fleetJSON) []simtest.Window {
	t.Helper()
	client := adminClient(t, c)
	var windows []simtest.Window
	for _, j := range f.Jobs {
		if j.Status != fleet.JobSucceeded {
			continue
		}
		child := statusOf(t, ctx, e, j.RestartID)
		if child.Fleet != f.ID {
			t.Errorf("restart %s of job %s says fleet %q, want %q", j.RestartID, j.JobID, child.Fleet, f.ID)
		}
		var ids []string
		for _, a := range child.Allocs {
			ids = append(ids, a.ID)
		}
		simtest.CheckOnce(t, client, j.Namespace, j.JobID, ids, false, 30*time.Second)
		w, err := simtest.RestartWindow(ctx, client, j.Namespace, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, w)
	}
	return windows
}

// TestFleetRunToSuccess drives a fleet of 6 jobs, 2 at a time, in the foreground: every
// allocation is restarted exactly once, never more than 2 jobs restart at once (from
// Nomad's facts), a job the filter leaves out is not touched, and status shows it all.
func TestFleetRunToSuccess(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "fl", 6, 2)
	register(t, c, simpleJob("other", api.JobTypeService, 2))
	ctx := testCtx(t)

	code, out, errOut := e.run(ctx, "run", "-jobs", `Name matches "^fl-"`, "-max-parallel-jobs", "2", "-on-error=fail")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "Fleet restarted 6 jobs successfully!") || errOut != "" {
		t.Fatalf("run -jobs: exit %d", code)
	}
	for _, want := range []string{"[fl-0] ", "[fl-5] ", "at most 2 at once"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	id := fleetIDIn(t, out)
	f := fleetOf(t, ctx, e, id)
	if f.Status != restart.StatusSucceeded || len(f.Jobs) != 6 || f.Counts()[fleet.JobSucceeded] != 6 {
		t.Fatalf("fleet: status %s, jobs %v", f.Status, f.Counts())
	}
	windows := checkFleetOnce(t, ctx, c, e, f)
	if peak := simtest.PeakOverlap(windows); peak > 2 {
		t.Errorf("%d jobs restarted at once, want at most 2 (windows %v)", peak, windows)
	}
	assertMainRestarted(t, c, "other", 0)

	code, out, _ = e.run(ctx, "status", id)
	t.Logf("status %s:\n%s", id, out)
	if code != 0 || !strings.Contains(out, "6 selected: 6 done, 0 running") || !strings.Contains(out, "12/12 restarted in the 6 jobs started") {
		t.Errorf("status %s: exit %d\n%s", id, code, out)
	}
	code, out, _ = e.run(ctx, "status", f.Jobs[0].RestartID[:8])
	if code != 0 || !strings.Contains(out, "Fleet") || !strings.Contains(out, id) {
		t.Errorf("status of a child: exit %d, want its fleet %s named\n%s", code, id, out)
	}
}

// statusEntry is one entry of `status -json`'s list.
type statusEntry struct {
	ID, Kind, Status, Fleet string
	Jobs                    []struct{ Namespace, JobID, RestartID, Status string }
}

// TestFleetStatusJSON checks the shape of `status -json` with a fleet: fleets beside
// restarts, each entry with its Kind, a fleet's Jobs with their restarts once started.
func TestFleetStatusJSON(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "sj", 2, 1)
	register(t, c, simpleJob("solo", api.JobTypeService, 1))
	ctx := testCtx(t)
	if code, out, errOut := e.run(ctx, "run", "-on-error=fail", "solo"); code != 0 {
		t.Fatalf("run solo: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := e.run(ctx, "run", "-detach", "-jobs", `Name matches "^sj-"`)
	if code != 0 {
		t.Fatalf("run -jobs -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	pendingID := fleetIDIn(t, out)
	code, out, errOut = e.run(ctx, "run", "-jobs", `Name matches "^sj-"`, "-on-error=fail")
	if code != 0 {
		t.Fatalf("run -jobs: exit %d\n%s\n%s", code, out, errOut)
	}
	doneID := fleetIDIn(t, out)

	code, out, _ = e.run(ctx, "status", "-json")
	var list []statusEntry
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("status -json: exit %d, %v\n%s", code, err, out)
	}
	kinds := map[string]int{}
	for _, en := range list {
		kinds[en.Kind]++
		switch {
		case en.Kind == "fleet" && strings.HasPrefix(en.ID, pendingID):
			if en.Status != "pending" || len(en.Jobs) != 2 || en.Jobs[0].RestartID != "" || en.Jobs[0].Status != "pending" || en.Jobs[0].Namespace != "default" {
				t.Errorf("detached fleet entry: %+v", en)
			}
		case en.Kind == "fleet" && strings.HasPrefix(en.ID, doneID):
			if en.Status != "succeeded" || len(en.Jobs) != 2 || en.Jobs[1].JobID != "sj-1" || en.Jobs[1].RestartID == "" || en.Jobs[1].Status != "succeeded" {
				t.Errorf("driven fleet entry: %+v", en)
			}
		case en.Kind != "restart":
			t.Errorf("entry of kind %q: %+v", en.Kind, en)
		}
	}
	if kinds["fleet"] != 2 || kinds["restart"] != 3 {
		t.Errorf("status -json lists %v, want 2 fleets and 3 restarts (solo and the driven fleet's 2)", kinds)
	}
	// A listing of one job's restarts lists restarts only, as before.
	code, out, _ = e.run(ctx, "status", "-json", "-job=solo")
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list) != 1 || list[0].Kind != "restart" {
		t.Errorf("status -json -job=solo: exit %d, %v: %s", code, err, out)
	}
	code, out, _ = e.run(ctx, "status")
	if code != 0 || !strings.Contains(out, "\nFleets\n") || !strings.Contains(out, pendingID) || !strings.Contains(out, "2/2 done") {
		t.Errorf("status: exit %d, want the fleets' table\n%s", code, out)
	}

	// -detach -json prints the fleet's events, then its record (as for a restart); a cancel of a fleet no one drives ends it at once.
	code, out, errOut = e.run(ctx, "run", "-detach", "-json", "-jobs", `Name matches "^sj-"`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var detached fleetJSON
	if code != 0 || json.Unmarshal([]byte(lines[len(lines)-1]), &detached) != nil || detached.Kind != "fleet" || detached.Status != restart.StatusPending {
		t.Fatalf("run -detach -json: exit %d\n%s\n%s", code, out, errOut)
	}
	if code, out, errOut := e.run(ctx, "cancel", detached.ID[:8]); code != 0 || !strings.Contains(out, "status: canceled") {
		t.Errorf("cancel of an undriven fleet: exit %d\n%s\n%s", code, out, errOut)
	}
	if f := fleetOf(t, ctx, e, detached.ID); f.Status != restart.StatusCanceled || f.Counts()[fleet.JobCanceled] != 2 {
		t.Errorf("canceled fleet: %s %v", f.Status, f.Counts())
	}
}

// TestFleetDryRunWritesNothing prints a fleet's plan, human and JSON, with no request that
// changes anything.
func TestFleetDryRunWritesNothing(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "dr", 2, 2)
	own := simpleJob("dr-meta", api.JobTypeService, 2)
	own.Meta = map[string]string{"nomad-restart.batch-size": "2"}
	register(t, c, own)
	ctx := testCtx(t)
	before := c.Stats().Mutations

	code, out, errOut := e.run(ctx, "run", "-dry-run", "-jobs", `Name matches "^dr-"`, "-max-parallel-jobs", "2", "-busy", "skip")
	t.Logf("dry run:\n%s", out)
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Dry run: a fleet of 3 jobs", "would restart 6 allocations", "max-parallel-jobs=2", "busy=skip", "on-error=ask", "dr-0", "dr-1", "service", "batch-size=2"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = e.run(ctx, "run", "-dry-run", "-json", "-jobs", `Name matches "^dr-"`, "-order", "listed")
	var plan fleetPlanOutput
	if code != 0 || json.Unmarshal([]byte(out), &plan) != nil {
		t.Fatalf("dry run -json: exit %d\n%s\n%s", code, out, errOut)
	}
	if !plan.DryRun || len(plan.Jobs) != 3 || plan.Options.Order != fleet.OrderListed {
		t.Fatalf("dry run -json: %+v", plan)
	}
	for _, j := range plan.Jobs {
		// The job's own meta overrides the fleet's batch size for it alone.
		wantBatches := 2
		if j.JobID == "dr-meta" {
			wantBatches = 1
		}
		if j.Allocs != 2 || j.Batches != wantBatches || j.Problem != "" {
			t.Errorf("dry run -json, job %s: %d allocations in %d batches (want 2 in %d), problem %q", j.JobID, j.Allocs, j.Batches, wantBatches, j.Problem)
		}
	}
	assertNoMutationsSince(t, c, before)
}

// TestFleetDetachThenResume records a fleet with -detach and drives it with `resume`.
func TestFleetDetachThenResume(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "dt", 3, 2)
	ctx := testCtx(t)

	code, out, errOut := e.run(ctx, "run", "-detach", "-jobs", `Name matches "^dt-"`, "-on-error=fail", "-max-parallel-jobs=3")
	if code != 0 || !strings.Contains(out, "is recorded and waits for a driver") {
		t.Fatalf("run -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	id := fleetIDIn(t, out)
	if !strings.Contains(out, "nomad-restart resume "+id) {
		t.Errorf("run -detach does not say how to drive it:\n%s", out)
	}
	if f := fleetOf(t, ctx, e, id); f.Status != restart.StatusPending {
		t.Fatalf("detached fleet: status %s", f.Status)
	}
	assertMainRestarted(t, c, "dt-0", 0)

	code, out, errOut = e.run(ctx, "resume", id)
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

// TestFleetPauseResume pauses a fleet being driven (no new job starts), then resumes it
// from another process, which follows it to its end while the first driver finishes it.
func TestFleetPauseResume(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "pr", 4, 2)
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-detach", "-jobs", `Name matches "^pr-"`, "-on-error=fail", "-batch-wait=1s")
	if code != 0 {
		t.Fatalf("run -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	id := fleetIDIn(t, out)
	driver := e.start(ctx, "resume", id)
	waitFleet(t, ctx, e, id, "its first job running", func(f *fleetJSON) bool { return f.Jobs[0].Status == fleet.JobRunning })

	code, out, errOut = e.run(ctx, "pause", id)
	if code != 0 || !strings.Contains(out, "pause requested") {
		t.Fatalf("pause: exit %d\n%s\n%s", code, out, errOut)
	}
	paused := waitFleet(t, ctx, e, id, "paused", func(f *fleetJSON) bool { return f.Status == restart.StatusPaused })
	started := len(paused.Jobs) - paused.Counts()[fleet.JobPending]
	// The child running when the pause came holds after its batch (or ends): then nothing
	// moves until the resume.
	waitFleet(t, ctx, e, id, "its running job held", func(f *fleetJSON) bool {
		for _, j := range f.Jobs {
			if j.Status == fleet.JobRunning && statusOf(t, ctx, e, j.RestartID).Status != restart.StatusPaused {
				return false
			}
		}
		return true
	})
	if f := fleetOf(t, ctx, e, id); len(f.Jobs)-f.Counts()[fleet.JobPending] != started || f.Status != restart.StatusPaused {
		t.Fatalf("a paused fleet started jobs: %d started at the pause, now %v (%s)", started, f.Counts(), f.Status)
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
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "cx", 3, 3)
	ctx := testCtx(t)
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

// waitFirstJobRunning waits until `status -json` lists a fleet whose first job runs, and
// returns the fleet's short ID (the tests that use it run one fleet).
func waitFirstJobRunning(t *testing.T, ctx context.Context, e cliEnv) string {
	t.Helper()
	var id string
	simtest.WaitFor(t, ctx, "a fleet's first job to run", func() bool {
		code, out, _ := e.run(ctx, "status", "-json")
		var list []statusEntry
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
			return false
		}
		for _, en := range list {
			if en.Kind == "fleet" && len(en.Jobs) > 0 && en.Jobs[0].Status == "running" {
				id = en.ID[:8]
				return true
			}
		}
		return false
	})
	return id
}

// TestFleetCtrlCDetachesAndResumeFinishes stops a foreground fleet mid-way (Ctrl-C): it
// says how to resume, and `resume` finishes it with every allocation restarted once.
func TestFleetCtrlCDetachesAndResumeFinishes(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "cc", 3, 2)
	ctx := testCtx(t)
	runCtx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	driver := e.start(runCtx, "run", "-jobs", `Name matches "^cc-"`, "-on-error=fail", "-batch-wait=1s")
	id := waitFirstJobRunning(t, ctx, e)
	interrupt()
	r := <-driver
	if r.code != 1 || !strings.Contains(r.err, "Detached from fleet "+id) || !strings.Contains(r.err, "nomad-restart resume "+id) {
		t.Fatalf("Ctrl-C: exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	if f := fleetOf(t, ctx, e, id); f.Status.Terminal() {
		t.Fatalf("a detached fleet ended: %s", f.Status)
	}
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 0 || !strings.Contains(out, "Fleet restarted 3 jobs successfully!") {
		t.Fatalf("resume: exit %d\n%s\n%s", code, out, errOut)
	}
	checkFleetOnce(t, ctx, c, e, fleetOf(t, ctx, e, id))
}

// TestFleetResumeTakesOverFromDeadDriver: resume of a fleet whose driver died holding its
// lease waits while the lock runs, then takes over once Nomad expires it (the lease
// variable then still names the dead holder, as on a real agent: only an attempt to take
// the lock tells it is free).
func TestFleetResumeTakesOverFromDeadDriver(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{})
	registerFleetJobs(t, c, "", "gh", 2, 1)
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-detach", "-jobs", `Name matches "^gh-"`, "-on-error=fail")
	if code != 0 {
		t.Fatalf("run -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	id := fleetOf(t, ctx, e, fleetIDIn(t, out)).ID
	ghost := store.NewNomadFleets(adminClient(t, c), store.NomadOptions{LockDelay: 100 * time.Millisecond})
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
