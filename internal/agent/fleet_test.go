package agent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// slowStart makes each task take 20 simulated seconds (0.4 s) to run again, so that a
// fleet's jobs are restarting long enough to overlap, to be paused, or to lose their agent.
var slowStart = map[string]string{"nomadsim.start_delay": "20s"}

// fleetEnv is an env with the fleet store the CLI's `run -jobs ... -detach` writes to.
type fleetEnv struct {
	*env
	fleets store.Fleets
}

func startFleetEnv(t *testing.T) *fleetEnv {
	t.Helper()
	e := startEnv(t, nomadsim.Options{})
	return &fleetEnv{env: e, fleets: store.NewNomadFleets(e.client, store.NomadOptions{})}
}

// registerJobs registers the jobs prefix-000 .. prefix-(n-1), count allocations each with
// the tasks' meta, and waits until they run.
func (e *fleetEnv) registerJobs(t *testing.T, prefix string, n, count int, meta map[string]string) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = e.registerJob("default", fmt.Sprintf("%s-%03d", prefix, i), count, meta) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// fileFleet selects the jobs whose name starts with prefix and records a pending fleet of
// them, as `nomad-restart run -jobs ... -detach` does: no one drives it yet.
func (e *fleetEnv) fileFleet(t *testing.T, prefix string, parallel int) *fleet.Record {
	t.Helper()
	ctx := testContext(t)
	sel := fleet.Selection{Namespace: "default", Filter: fmt.Sprintf("Name matches %q", "^"+prefix+"-")}
	spec := restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}}
	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.OnError = parallel, restart.OnErrorFail
	got, err := fleetrun.Select(ctx, cluster.NewNomad(e.client), sel, spec, opts)
	if err != nil {
		t.Fatalf("selecting the fleet's jobs: %v", err)
	}
	rec := fleetrun.NewRecord(uuid.NewString(), fleetrun.HomeNamespace(sel.Namespace), sel, spec, opts, got.Jobs, e.client.Address(), time.Now())
	if err := e.fleets.Create(ctx, rec); err != nil {
		t.Fatalf("recording the fleet: %v", err)
	}
	return rec
}

// waitFleet watches the fleet's record until ok holds, and returns it.
func (e *fleetEnv) waitFleet(t *testing.T, rec *fleet.Record, what string, ok func(*fleet.Record) bool) *fleet.Record {
	t.Helper()
	ctx := testContext(t)
	cur, err := e.fleets.Get(ctx, rec.Namespace, rec.ID)
	for err == nil && !ok(cur) {
		cur, err = e.fleets.Watch(ctx, rec.Namespace, rec.ID, cur.ModifyIndex)
	}
	if err != nil {
		t.Fatalf("waiting for fleet %s to be %s: %v", short(rec.ID), what, err)
	}
	return cur
}

func (e *fleetEnv) waitFleetEnd(t *testing.T, rec *fleet.Record) *fleet.Record {
	t.Helper()
	return e.waitFleet(t, rec, "ended", func(r *fleet.Record) bool { return r.Status.Terminal() })
}

// checkFleet asserts that the fleet succeeded, that every allocation of its jobs was
// restarted exactly once, and that never more than parallel jobs were restarting at once,
// both from Nomad's own facts (task events), not from the records.
func (e *fleetEnv) checkFleet(t *testing.T, final *fleet.Record, parallel int) {
	t.Helper()
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("fleet ended %s (%s), want succeeded; jobs %v", final.Status, final.Reason, final.Counts())
	}
	ctx := testContext(t)
	var windows []simtest.Window
	for _, j := range final.Jobs {
		if j.Status != fleet.JobSucceeded || j.RestartID == "" {
			t.Errorf("job %s is %s (%s) with restart %q, want succeeded through a restart", j.JobID, j.Status, j.Reason, j.RestartID)
			continue
		}
		child, err := e.store.Get(ctx, j.Namespace, j.RestartID)
		if err != nil {
			t.Fatalf("reading restart %s of job %s: %v", j.RestartID, j.JobID, err)
		}
		if child.Fleet != final.ID {
			t.Errorf("restart %s of job %s names fleet %q, want %s", short(child.ID), j.JobID, child.Fleet, final.ID)
		}
		e.checkOnce(t, child)
		if bad := driverOverlaps(child); bad != nil {
			t.Errorf("restart %s of job %s: %v", short(child.ID), j.JobID, bad)
		}
		t.Logf("restart %s of job %s: taken up by an agent %s after it was filed", short(child.ID), j.JobID, adoptionDelay(child))
		w, err := simtest.RestartWindow(testContext(t), e.client, "default", j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, w)
	}
	peak := simtest.PeakOverlap(windows)
	t.Logf("fleet %s: at most %d jobs restarting at once (-max-parallel-jobs %d)", short(final.ID), peak, parallel)
	if peak > parallel {
		t.Errorf("%d jobs were restarting at once (Nomad's task events), more than -max-parallel-jobs %d", peak, parallel)
	}
}

// adoptionDelay is how long after its creation a restart's first driver started it, from
// its events (for the log: how promptly the agents adopt a fleet's restarts).
func adoptionDelay(rec *restart.Record) time.Duration {
	var created time.Time
	for _, ev := range rec.Events {
		switch ev.Type {
		case restart.EventCreated:
			created = ev.Time
		case restart.EventStarted:
			return ev.Time.Sub(created).Round(time.Millisecond)
		}
	}
	return -1
}

// fleetStarts counts the "Fleet started" events of the fleet's log: one per fleet however
// many drivers took it up.
func fleetStarts(rec *fleet.Record) int {
	n := 0
	for _, ev := range rec.Events {
		if ev.Type == restart.EventStarted {
			n++
		}
	}
	return n
}

// An agent adopts a detached fleet, drives it to success (its jobs' restarts are driven by
// the agent's ordinary adoption) with each allocation restarted once and never more jobs
// restarting than -max-parallel-jobs; the page and the metrics show the fleet.
func TestFleetAdoptedByAgentAndShown(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	e.registerJobs(t, "fl", 4, 2, slowStart)
	rec := e.fileFleet(t, "fl", 2)

	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	srv := serve(t, a, nil)
	start(t, a)

	final := e.waitFleetEnd(t, rec)
	e.checkFleet(t, final, 2)
	if final.Driver != "agent-1" || fleetStarts(final) != 1 {
		t.Errorf("fleet driven by %q, started %d times; want agent-1, once", final.Driver, fleetStarts(final))
	}

	ctx := testContext(t)
	m := a.fleets.metrics
	simtest.WaitFor(t, ctx, "the gauges to count the fleet succeeded", func() bool {
		return testutil.ToFloat64(m.fleets.WithLabelValues("succeeded")) == 1
	})
	metrics := get(t, srv.URL+"/metrics", http.StatusOK)
	for _, want := range []string{
		`nomad_restart_fleets{status="succeeded"} 1`,
		`nomad_restart_fleets{status="running"} 0`,
		`nomad_restart_fleet_jobs{status="running"} 0`,
		`nomad_restart_fleets_driving 0`,
		`nomad_restart_restarts{status="succeeded"} 4`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	page := get(t, srv.URL+"/", http.StatusOK)
	for _, want := range []string{`id="fleets"`, `href="/fleet/` + final.ID + `"`, `data-status="succeeded" data-done="4" data-total="4"`} {
		if !strings.Contains(page, want) {
			t.Errorf("list page lacks %q", want)
		}
	}
	view := get(t, srv.URL+"/fleet/"+final.ID[:8], http.StatusOK)
	if n := strings.Count(view, `class="job" `); n != 4 {
		t.Errorf("fleet view shows %d jobs, want 4", n)
	}
	for _, j := range final.Jobs {
		if !strings.Contains(view, `href="/restart/`+j.RestartID+`"`) {
			t.Errorf("fleet view lacks a link to restart %s of job %s", short(j.RestartID), j.JobID)
		}
		get(t, srv.URL+"/restart/"+j.RestartID, http.StatusOK) // the restart's own view
	}
	if !strings.Contains(view, "Fleet succeeded") {
		t.Errorf("fleet view lacks the fleet's events")
	}
	get(t, srv.URL+"/fleet/ffffffff", http.StatusNotFound)
}

// Two agents on one fleet: its lease makes one of them drive it, and each allocation is
// restarted once.
func TestFleetTwoAgentsOneDriver(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	e.registerJobs(t, "two", 4, 2, nil)
	rec := e.fileFleet(t, "two", 2)
	a1 := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	a2 := e.newAgent(t, "agent-2", e.sim.BootstrapToken(), nil)
	start(t, a1)
	start(t, a2)

	final := e.waitFleetEnd(t, rec)
	e.checkFleet(t, final, 2)
	if n := fleetStarts(final); n != 1 {
		t.Errorf("fleet started %d times, want once: %v", n, final.Events)
	}
	for _, ev := range final.Events {
		if ev.Type == restart.EventStarted && !strings.Contains(ev.Message, final.Driver) {
			t.Errorf("fleet started by another driver than the one that finished it (%s): %q", final.Driver, ev.Message)
		}
	}
}

// An agent stopped mid-fleet leaves the fleet as stored and lets go of its lease (and of
// its jobs' restarts); another agent takes the fleet up and finishes it, each allocation
// restarted once.
func TestFleetAgentStoppedMidFleetIsSucceeded(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	e.registerJobs(t, "mid", 4, 2, slowStart)
	rec := e.fileFleet(t, "mid", 2)

	a1 := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	stop1 := start(t, a1)
	mid := e.waitFleet(t, rec, "running a job", func(r *fleet.Record) bool { return r.Counts()[fleet.JobRunning] > 0 })
	var child *restart.Record
	for _, j := range mid.Jobs {
		if j.Status == fleet.JobRunning {
			child = &restart.Record{Namespace: j.Namespace, ID: j.RestartID, JobID: j.JobID}
			break
		}
	}
	ctx := testContext(t)
	// The fleet records a job's start before it files the job's restart.
	simtest.WaitFor(t, ctx, "the job's restart to be filed", func() bool {
		_, err := e.store.Get(ctx, child.Namespace, child.ID)
		return err == nil
	})
	e.waitRecord(t, child, "mid-way", func(r *restart.Record) bool { return r.Progress(time.Now()).Done > 0 })
	stop1()
	left, err := e.fleets.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if left.Status.Terminal() {
		t.Fatalf("the fleet ended (%s) before its agent stopped; the test needs it mid-way", left.Status)
	}

	a2 := e.newAgent(t, "agent-2", e.sim.BootstrapToken(), nil)
	start(t, a2)
	final := e.waitFleetEnd(t, rec)
	e.checkFleet(t, final, 2)
	if final.Driver != "agent-2" || fleetStarts(final) != 1 {
		t.Errorf("fleet finished by %q, started %d times; want agent-2, started once", final.Driver, fleetStarts(final))
	}
}

// An agent drives at most FleetConcurrency fleets at once: the next one starts once a
// slot frees.
func TestFleetConcurrencyBound(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	e.registerJobs(t, "one", 1, 1, nil)
	e.registerJobs(t, "other", 1, 1, nil)
	first := e.fileFleet(t, "one", 1)
	second := e.fileFleet(t, "other", 1)
	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), func(c *Config) { c.FleetConcurrency = 1 })
	start(t, a)
	f1, f2 := e.waitFleetEnd(t, first), e.waitFleetEnd(t, second)
	e.checkFleet(t, f1, 1)
	e.checkFleet(t, f2, 1)
	if f1.StartTime.After(f2.StartTime) {
		f1, f2 = f2, f1
	}
	if f2.StartTime.Before(f1.EndTime) {
		t.Errorf("fleet %s started at %s, before fleet %s ended at %s, with one fleet at a time", short(f2.ID), f2.StartTime, short(f1.ID), f1.EndTime)
	}
}

// fleetSteer is what internal/cli wires as Config.SteerFleet: a fleet driver on a Nomad
// client with the request's token alone.
func (e *fleetEnv) fleetSteer(t *testing.T) func(string) (FleetSteerer, error) {
	return func(token string) (FleetSteerer, error) {
		cl, err := e.sim.APIClient(token)
		if err != nil {
			return nil, err
		}
		st := store.NewNomad(cl, store.NomadOptions{})
		eng := engine.New(engine.Config{Cluster: cluster.NewNomad(cl), Store: st, Holder: "page"})
		return fleetrun.New(fleetrun.Config{Fleets: store.NewNomadFleets(cl, store.NomadOptions{}), Restarts: st, Engine: eng, Holder: "page"}), nil
	}
}

// The page pauses and resumes a fleet with the user's token; the list and the gauges show
// the paused fleet and its running restarts; actions on an ended fleet are refused.
func TestFleetPageSteers(t *testing.T) {
	t.Parallel()
	e := startFleetEnv(t)
	e.registerJobs(t, "st", 3, 2, slowStart)
	rec := e.fileFleet(t, "st", 1)
	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), func(c *Config) { c.SteerFleet = e.fleetSteer(t) })
	srv := serve(t, a, nil)
	start(t, a)
	token := map[string]string{TokenHeader: e.sim.BootstrapToken()}
	base := srv.URL + "/fleet/" + rec.ID

	e.waitFleet(t, rec, "running a job", func(r *fleet.Record) bool { return r.Counts()[fleet.JobRunning] > 0 })
	ctx := testContext(t)
	fleetStream := streamEvents(t, ctx, base+"/events")
	listStream := streamEvents(t, ctx, srv.URL+"/events")
	if code, body := post(t, base+"/pause", token, ""); code != http.StatusOK || !strings.Contains(body, "Pause requested") {
		t.Fatalf("pause: %d %s", code, body)
	}
	paused := e.waitFleet(t, rec, "paused", func(r *fleet.Record) bool { return r.Status == restart.StatusPaused })
	if paused.Control.By != "page of agent-1" {
		t.Errorf("pause recorded by %q, want the page", paused.Control.By)
	}
	// The live parts follow: the fleet's view and the list (the restarts' list stays).
	upd := waitUpdate(t, fleetStream, "the fleet's view to show it paused", func(u liveUpdate) bool { return u.Status == "paused" })
	if !strings.Contains(upd.HTML, `id="jobs"`) || !strings.Contains(upd.HTML, "Fleet paused") {
		t.Errorf("the fleet's live view lacks its jobs or its events: %s", upd.HTML)
	}
	waitUpdate(t, listStream, "the list to show the fleet paused", func(u liveUpdate) bool {
		return strings.Contains(u.HTML, `data-id="`+rec.ID+`" data-status="paused"`) && strings.Contains(u.HTML, `id="restarts"`)
	})
	m := a.fleets.metrics
	simtest.WaitFor(t, ctx, "the gauges to show the paused fleet", func() bool {
		return testutil.ToFloat64(m.fleets.WithLabelValues("paused")) == 1 &&
			testutil.ToFloat64(m.jobs.WithLabelValues("pending")) == float64(paused.Counts()[fleet.JobPending])
	})
	if testutil.ToFloat64(m.jobs.WithLabelValues("pending")) == 0 {
		t.Errorf("no job of the paused fleet is pending: %v", paused.Counts())
	}
	list := get(t, srv.URL+"/", http.StatusOK)
	if !strings.Contains(list, `data-id="`+rec.ID+`" data-status="paused"`) {
		t.Errorf("list page does not show the fleet paused")
	}
	for _, j := range paused.Jobs {
		if j.Status == fleet.JobRunning && !strings.Contains(list, `class="child" href="/restart/`+j.RestartID+`"`) {
			t.Errorf("list page lacks the running restart %s of job %s", short(j.RestartID), j.JobID)
		}
	}

	if code, body := post(t, base+"/resume", token, ""); code != http.StatusOK {
		t.Fatalf("resume: %d %s", code, body)
	}
	final := e.waitFleetEnd(t, rec)
	e.checkFleet(t, final, 1)

	refusals := []struct {
		name, path string
		headers    map[string]string
		code       int
		says       string
	}{
		{"an ended fleet", "/pause", token, http.StatusConflict, "already ended"},
		{"an unknown action", "/delete", token, http.StatusNotFound, "pause, resume, cancel and answer"},
		{"another site", "/cancel", map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, "cross-origin"},
	}
	for _, tt := range refusals {
		if code, body := post(t, base+tt.path, tt.headers, ""); code != tt.code || !strings.Contains(body, tt.says) {
			t.Errorf("%s: %d %s, want %d saying %q", tt.name, code, body, tt.code, tt.says)
		}
	}
	if code, body := post(t, srv.URL+"/fleet/ffffffff/pause", token, ""); code != http.StatusNotFound {
		t.Errorf("pause of an unknown fleet: %d %s", code, body)
	}
}

// waitUpdate reads a page stream's events until an "update" for which ok holds.
func waitUpdate(t *testing.T, events <-chan sseEvent, what string, ok func(liveUpdate) bool) liveUpdate {
	t.Helper()
	for ev := range events {
		if ev.name != "update" {
			continue
		}
		var u liveUpdate
		if err := json.Unmarshal([]byte(ev.data), &u); err != nil {
			t.Fatalf("an update that is not JSON: %v: %s", err, ev.data)
		}
		if ok(u) {
			return u
		}
	}
	t.Fatalf("the stream ended before %s", what)
	return liveUpdate{}
}

// The list shows fleets above the restarts only when there are fleets, and words each
// fleet's jobs and running restarts; without fleets (the local store) it is as before.
func TestFleetListTemplate(t *testing.T) {
	restarts := listLive{Rows: []listRow{{Rec: &restart.Record{ID: "11111111-aaaa", JobID: "web", Status: restart.StatusRunning}}}}
	rec := &fleet.Record{Fleet: fleet.Fleet{ID: "22222222-bbbb", Status: restart.StatusRunning, Jobs: []fleet.Job{
		{Namespace: "default", JobID: "api", Status: fleet.JobSucceeded, RestartID: "r-api"},
		{Namespace: "default", JobID: "web", Status: fleet.JobRunning, RestartID: "r-web"},
		{Namespace: "default", JobID: "db", Status: fleet.JobFailed, RestartID: "r-db", Reason: "alloc 3f2a did not become healthy"},
		{Namespace: "default", JobID: "cache", Status: fleet.JobPending},
	}}, Namespace: "default", Selection: fleet.Selection{Namespace: "default", Filter: `Name matches "^a"`}}
	withFleets := restarts
	withFleets.Fleets = []fleetRow{newFleetRow(rec)}
	tests := []struct {
		name     string
		data     listLive
		want     []string
		wantNone []string
	}{
		{"no fleets", restarts, []string{`id="restarts"`, "/restart/11111111-aaaa"}, []string{`id="fleets"`, "Fleets"}},
		{"a fleet", withFleets, []string{`id="restarts"`, `id="fleets"`, `href="/fleet/22222222-bbbb"`, `data-done="1" data-total="4"`,
			"1/4 done, 1 failed", `class="child" href="/restart/r-web"`, `aria-valuenow="50"`}, []string{`href="/restart/r-api"`}},
		{"a failed listing", listLive{FleetsError: "Permission denied"}, []string{"The fleets could not be listed: Permission denied", "No restarts."}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			html, err := renderString(listPage, "listLive", tt.data)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.want {
				if !strings.Contains(html, want) {
					t.Errorf("the list lacks %q:\n%s", want, html)
				}
			}
			for _, no := range tt.wantNone {
				if strings.Contains(html, no) {
					t.Errorf("the list shows %q:\n%s", no, html)
				}
			}
		})
	}
}

// A fleet whose driver died holding its lease (a `run -jobs` killed at once) is taken up by
// an agent once Nomad lets the lock expire (its TTL, which Nomad's leader doubles, and its
// lock delay), and finished with each allocation restarted once. It takes ~20s.
func TestFleetSucceedsADeadDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under testing.Short: waits for a Nomad lock TTL (about 20s); run without -short")
	}
	t.Parallel()
	e := startFleetEnv(t)
	e.registerJobs(t, "dead", 2, 1, nil)
	rec := e.fileFleet(t, "dead", 1)
	ctx := testContext(t)
	// The dead driver's lock: the fleet's lease, taken and never renewed.
	v := &api.Variable{Namespace: rec.Namespace, Path: "nomad-restart/" + store.FleetsDir + "/" + rec.ID + "/lease",
		Items: map[string]string{"holder": "cli:killed"}, Lock: &api.VariableLock{TTL: "10s", LockDelay: "100ms"}}
	got, _, err := e.client.Variables().AcquireLock(v, (&api.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil || got.LockID() == "" {
		t.Fatalf("taking the fleet's lease as the dead driver: %v", err)
	}

	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), nil)
	start(t, a)
	final := e.waitFleetEnd(t, rec)
	e.checkFleet(t, final, 1)
	if final.Driver != "agent-1" || fleetStarts(final) != 1 {
		t.Errorf("fleet finished by %q, started %d times; want agent-1, once", final.Driver, fleetStarts(final))
	}
}
