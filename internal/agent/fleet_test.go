package agent

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

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

// startFleet starts an env with the jobs prefix-000 .. prefix-(n-1) of namespace default,
// count allocations each with the tasks' meta, and a pending fleet of them, at most
// parallel at once.
func startFleet(t *testing.T, prefix string, n, count int, meta map[string]string, parallel int) (*env, *fleet.Record) {
	t.Helper()
	e := startEnv(t, nomadsim.Options{})
	e.RegisterJobs(t, "default", prefix, n, count, meta)
	return e, e.FileFleet(t, prefix, parallel)
}

// fleetDone waits for the fleet to end and checks it (CheckFleet with parallel), and that
// it was started once, by driver ("": any), which finished it.
func (e *env) fleetDone(t *testing.T, rec *fleet.Record, parallel int, driver string) *fleet.Record {
	t.Helper()
	final := e.WaitFleetEnd(t, rec)
	e.CheckFleet(t, final, parallel)
	if n := fleetStarts(final); n != 1 || driver != "" && final.Driver != driver {
		t.Errorf("fleet finished by %q, started %d times; want it started once, by %q: %v", final.Driver, n, driver, final.Events)
	}
	return final
}

// An agent adopts a detached fleet, drives it to success (its jobs' restarts are driven by
// the agent's ordinary adoption) with each allocation restarted once and never more jobs
// restarting than -max-parallel-jobs; the page and the metrics show the fleet.
func TestFleetAdoptedByAgentAndShown(t *testing.T) {
	t.Parallel()
	e, rec := startFleet(t, "fl", 4, 2, agenttest.SlowStart, 2)

	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	agenttest.Run(t, a)

	final := e.fleetDone(t, rec, 2, "agent-1")

	ctx := agenttest.Context(t)
	m := a.fleets.metrics
	simtest.WaitFor(t, ctx, "the gauges to count the fleet succeeded", func() bool {
		return testutil.ToFloat64(m.fleets.WithLabelValues("succeeded")) == 1
	})
	metrics := agenttest.Get(t, srv.URL+"/metrics", http.StatusOK)
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
	page := agenttest.Get(t, srv.URL+"/", http.StatusOK)
	for _, want := range []string{`id="fleets"`, `href="/fleet/` + final.ID + `"`, `data-status="succeeded" data-done="4" data-total="4"`} {
		if !strings.Contains(page, want) {
			t.Errorf("list page lacks %q", want)
		}
	}
	view := agenttest.Get(t, srv.URL+"/fleet/"+final.ID[:8], http.StatusOK)
	if n := strings.Count(view, `class="job" `); n != 4 {
		t.Errorf("fleet view shows %d jobs, want 4", n)
	}
	for _, j := range final.Jobs {
		if !strings.Contains(view, `href="/restart/`+j.RestartID+`"`) {
			t.Errorf("fleet view lacks a link to restart %s of job %s", agenttest.Short(j.RestartID), j.JobID)
		}
		agenttest.Get(t, srv.URL+"/restart/"+j.RestartID, http.StatusOK) // the restart's own view
	}
	if !strings.Contains(view, "Fleet succeeded") {
		t.Errorf("fleet view lacks the fleet's events")
	}
	agenttest.Get(t, srv.URL+"/fleet/ffffffff", http.StatusNotFound)
}

// Two agents on one fleet: its lease makes one of them drive it, and each allocation is
// restarted once.
func TestFleetTwoAgentsOneDriver(t *testing.T) {
	t.Parallel()
	e, rec := startFleet(t, "two", 4, 2, nil, 2)
	a1 := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	a2 := e.newAgent(t, "agent-2", e.Sim.BootstrapToken(), nil)
	agenttest.Run(t, a1)
	agenttest.Run(t, a2)

	final := e.fleetDone(t, rec, 2, "")
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
	e, rec := startFleet(t, "mid", 4, 2, agenttest.SlowStart, 2)

	a1 := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	stop1 := agenttest.Run(t, a1)
	mid := e.WaitFleet(t, rec, "running a job", func(r *fleet.Record) bool { return r.Counts()[fleet.JobRunning] > 0 })
	var child *restart.Record
	for _, j := range mid.Jobs {
		if j.Status == fleet.JobRunning {
			child = &restart.Record{Namespace: j.Namespace, ID: j.RestartID, JobID: j.JobID}
			break
		}
	}
	ctx := agenttest.Context(t)
	// The fleet records a job's start before it files the job's restart.
	simtest.WaitFor(t, ctx, "the job's restart to be filed", func() bool {
		_, err := e.Store.Get(ctx, child.Namespace, child.ID)
		return err == nil
	})
	e.WaitRecord(t, child, "mid-way", func(r *restart.Record) bool { return r.Progress(time.Now()).Done > 0 })
	stop1()
	left, err := e.Fleets.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if left.Status.Terminal() {
		t.Fatalf("the fleet ended (%s) before its agent stopped; the test needs it mid-way", left.Status)
	}

	a2 := e.newAgent(t, "agent-2", e.Sim.BootstrapToken(), nil)
	agenttest.Run(t, a2)
	e.fleetDone(t, rec, 2, "agent-2")
}

// An agent drives at most FleetConcurrency fleets at once: the next one starts once a
// slot frees.
func TestFleetConcurrencyBound(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.RegisterJobs(t, "default", "one", 1, 1, nil)
	e.RegisterJobs(t, "default", "other", 1, 1, nil)
	first := e.FileFleet(t, "one", 1)
	second := e.FileFleet(t, "other", 1)
	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), func(c *Config) { c.FleetConcurrency = 1 })
	agenttest.Run(t, a)
	f1, f2 := e.WaitFleetEnd(t, first), e.WaitFleetEnd(t, second)
	e.CheckFleet(t, f1, 1)
	e.CheckFleet(t, f2, 1)
	if f1.StartTime.After(f2.StartTime) {
		f1, f2 = f2, f1
	}
	if f2.StartTime.Before(f1.EndTime) {
		t.Errorf("fleet %s started at %s, before fleet %s ended at %s, with one fleet at a time", agenttest.Short(f2.ID), f2.StartTime, agenttest.Short(f1.ID), f1.EndTime)
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
	e, rec := startFleet(t, "dead", 2, 1, nil, 1)
	ctx := agenttest.Context(t)
	// The dead driver's lock: the fleet's lease, taken and never renewed.
	if taken, err := e.DeadDriverLock(ctx, rec.Namespace, agenttest.FleetLeasePath(rec), "cli:killed"); err != nil || !taken {
		t.Fatalf("taking the fleet's lease as the dead driver: %v", err)
	}

	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), nil)
	agenttest.Run(t, a)
	e.fleetDone(t, rec, 1, "agent-1")
}
