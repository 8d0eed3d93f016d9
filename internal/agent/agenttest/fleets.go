package agenttest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// The fleets' records: filed as a detached `run -jobs` files them, waited on, and checked
// against Nomad's own facts.

// FileFleet selects the jobs of namespace default whose name starts with prefix and records
// a pending fleet of them, at most parallel at once, as `nomad-restart run -jobs ...
// -detach` does: no one drives it yet.
func (e *Env) FileFleet(t testing.TB, prefix string, parallel int) *fleet.Record {
	t.Helper()
	ctx := Context(t)
	sel := fleet.Selection{Namespace: "default", Filter: fmt.Sprintf("Name matches %q", "^"+prefix+"-")}
	spec := restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Yes: true, BatchSizes: []restart.BatchSize{{N: 1}}}
	opts := fleet.DefaultOptions()
	opts.MaxParallelJobs, opts.OnError = parallel, restart.OnErrorFail
	got, err := fleetrun.Select(ctx, cluster.NewNomad(e.Client), sel, spec, opts)
	if err != nil {
		t.Fatalf("selecting the fleet's jobs: %v", err)
	}
	rec := fleetrun.NewRecord(uuid.NewString(), fleetrun.HomeNamespace(sel.Namespace), sel, spec, opts, got.Jobs, got.Outside, e.Client.Address(), time.Now())
	if err := e.Fleets.Create(ctx, rec); err != nil {
		t.Fatalf("recording the fleet: %v", err)
	}
	return rec
}

// WaitFleet watches the fleet's record until ok holds, and returns it.
func (e *Env) WaitFleet(t testing.TB, rec *fleet.Record, what string, ok func(*fleet.Record) bool) *fleet.Record {
	t.Helper()
	ctx := Context(t)
	cur, err := e.Fleets.Get(ctx, rec.Namespace, rec.ID)
	for err == nil && !ok(cur) {
		cur, err = e.Fleets.Watch(ctx, rec.Namespace, rec.ID, cur.ModifyIndex)
	}
	if err != nil {
		t.Fatalf("waiting for fleet %s to be %s: %v", Short(rec.ID), what, err)
	}
	return cur
}

// WaitFleetEnd watches the fleet's record until it is terminal, and returns it.
func (e *Env) WaitFleetEnd(t testing.TB, rec *fleet.Record) *fleet.Record {
	t.Helper()
	return e.WaitFleet(t, rec, "ended", func(r *fleet.Record) bool { return r.Status.Terminal() })
}

// CheckFleet asserts that the fleet succeeded, each job through a restart of its own that
// names the fleet, driven by one driver at a time; that every allocation of its jobs was
// restarted exactly once; and that never more than parallel jobs were restarting at once:
// the last two from Nomad's own facts (task events), not from the records.
func (e *Env) CheckFleet(t testing.TB, final *fleet.Record, parallel int) {
	t.Helper()
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("fleet ended %s (%s), want succeeded; jobs %v", final.Status, final.Reason, final.Counts())
	}
	ctx := Context(t)
	var windows []simtest.Window
	for _, j := range final.Jobs {
		if j.Status != fleet.JobSucceeded || j.RestartID == "" {
			t.Errorf("job %s is %s (%s) with restart %q, want succeeded through a restart", j.JobID, j.Status, j.Reason, j.RestartID)
			continue
		}
		child, err := e.Store.Get(ctx, j.Namespace, j.RestartID)
		if err != nil {
			t.Fatalf("reading restart %s of job %s: %v", j.RestartID, j.JobID, err)
		}
		if child.Fleet != final.ID {
			t.Errorf("restart %s of job %s names fleet %q, want %s", Short(child.ID), j.JobID, child.Fleet, final.ID)
		}
		if bad := DriverOverlaps(child); bad != nil {
			t.Errorf("restart %s of job %s: %v", Short(child.ID), j.JobID, bad)
		}
		e.CheckOnce(t, child)
		t.Logf("restart %s of job %s: taken up %s after it was filed", Short(child.ID), j.JobID, adoptionDelay(child))
		w, err := simtest.RestartWindow(ctx, e.Client, j.Namespace, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, w)
	}
	peak := simtest.PeakOverlap(windows)
	t.Logf("fleet %s: at most %d jobs restarting at once (-max-parallel-jobs %d)", Short(final.ID), peak, parallel)
	if peak > parallel {
		t.Errorf("%d jobs were restarting at once (Nomad's task events), more than -max-parallel-jobs %d", peak, parallel)
	}
}

// adoptionDelay is how long after its creation a restart's first driver started it, from
// its events (for the log: how promptly a driver takes up a fleet's restarts).
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
