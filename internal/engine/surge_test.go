package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// fakeScaler is a fake cluster with the job scale endpoint: one group "web" whose count and
// JobModifyIndex it keeps, honouring the check-and-set as Nomad does; errs are answered to
// the next scale requests first; deps are the latest deployments answered in turn (the last
// repeats).
type fakeScaler struct {
	*fakeCluster
	mu    sync.Mutex
	count int
	jmi   uint64
	calls []int
	errs  []error
	deps  []*cluster.DeploymentState
}

func newFakeScaler(count int) *fakeScaler {
	return &fakeScaler{fakeCluster: newFakeCluster("service", map[string]int{"web": 1}), count: count, jmi: 100}
}

func (f *fakeScaler) JobScale(ctx context.Context, ns, jobID string) (*restart.JobScale, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &restart.JobScale{ID: jobID, Type: "service", JobModifyIndex: f.jmi, Groups: map[string]restart.GroupScale{"web": {Count: f.count}}}, nil
}

func (f *fakeScaler) ScaleGroup(ctx context.Context, ns, jobID, group string, count int, jmi uint64, msg string) (*cluster.ScaleResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, count)
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	if jmi != 0 && jmi != f.jmi {
		return nil, fmt.Errorf("scaling: %w", cluster.ErrScaleConflict)
	}
	f.count = count
	f.jmi++
	return &cluster.ScaleResult{JobModifyIndex: f.jmi}, nil
}

func (f *fakeScaler) FailDeployment(ctx context.Context, ns, id string) error { return nil }

func (f *fakeScaler) LatestDeployment(ctx context.Context, ns, jobID string, after uint64) (*cluster.DeploymentState, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.deps) == 0 {
		return nil, after + 1, nil
	}
	d := f.deps[0]
	if len(f.deps) > 1 {
		f.deps = f.deps[1:]
	}
	return d, after + 1, nil
}

// surgeDriver is a driver of a stored record with the given surge state, on sc.
func surgeDriver(t *testing.T, sc cluster.Cluster, g restart.SurgeGroup) (*driver, *restart.Record) {
	t.Helper()
	e, s := newTestEngine(t, sc)
	rec := &restart.Record{ID: "surge-test-0000", Namespace: "default", JobID: "web", JobType: "service", Status: restart.StatusRunning,
		Spec: restart.Spec{Surge: g.To - g.From, HealthyDeadline: time.Second, Health: restart.HealthRunning}, Surge: []restart.SurgeGroup{g},
		Allocs: []restart.AllocProgress{{ID: "a1", Group: "web", Batch: 1, State: restart.AllocDone}}, Batches: 1}
	if err := s.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Get(context.Background(), rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	return &driver{e: e, ns: rec.Namespace, id: rec.ID, rec: stored, changed: make(chan struct{}, 1), spec: normalizeSpec(stored.Spec),
		jobNS: "default", jobID: "web", jobType: "service", log: e.log}, stored
}

// TestSurgeDownDecisions: at the end of a restart the group is scaled back exactly when the
// facts say the count is this restart's, once, and left alone otherwise.
func TestSurgeDownDecisions(t *testing.T) {
	for _, tc := range []struct {
		name      string
		phase     restart.SurgePhase
		scaled    uint64 // ScaledIndex
		count     int    // the group's count in Nomad now
		errs      []error
		wantCalls []int
		wantPhase restart.SurgePhase
		wantNote  string
		wantCount int
	}{
		{"up: scaled back once", restart.SurgeUp, 100, 2, nil, []int{1}, restart.SurgeDown, "", 1},
		{"scale-down intent, request lost: sent once", restart.SurgeScalingDown, 0, 2, nil, []int{1}, restart.SurgeDown, "", 1},
		{"scale-down took effect before the crash", restart.SurgeScalingDown, 0, 1, nil, nil, restart.SurgeDown, "", 1},
		{"scale-up never took effect", restart.SurgeScalingUp, 0, 1, nil, nil, restart.SurgeDown, "", 1},
		{"operator scaled above", restart.SurgeUp, 100, 3, nil, nil, restart.SurgeLeft, "someone else", 3},
		{"operator scaled below the target", restart.SurgeUp, 100, 0, nil, nil, restart.SurgeLeft, "someone else", 0},
		{"operator scaled back already", restart.SurgeUp, 100, 1, nil, nil, restart.SurgeDown, "already", 1},
		{"permission denied", restart.SurgeUp, 100, 2, []error{cluster.ErrPermissionDenied}, []int{1}, restart.SurgeLeft, "nomad job scale -namespace default web web 1", 2},
		{"conflict: the facts decide, sent again once", restart.SurgeUp, 100, 2, []error{cluster.ErrScaleConflict}, []int{1, 1}, restart.SurgeDown, "", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeScaler(tc.count)
			fs.errs = tc.errs
			g := restart.SurgeGroup{Group: "web", From: 1, To: 2, Phase: tc.phase, JobModifyIndex: 100, ScaledIndex: tc.scaled}
			d, _ := surgeDriver(t, fs, g)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			if err := d.surgeDown(ctx); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(fs.calls) != fmt.Sprint(tc.wantCalls) {
				t.Errorf("scale requests %v, want %v", fs.calls, tc.wantCalls)
			}
			stored, err := d.e.store.Get(ctx, d.ns, d.id)
			if err != nil {
				t.Fatal(err)
			}
			got := stored.Surge[0]
			if got.Phase != tc.wantPhase || !strings.Contains(got.Note, tc.wantNote) {
				t.Errorf("stored surge %+v, want phase %s and a note with %q", got, tc.wantPhase, tc.wantNote)
			}
			if fs.count != tc.wantCount {
				t.Errorf("count %d, want %d", fs.count, tc.wantCount)
			}
			// Idempotent: a second pass (a resumed finish) sends nothing more.
			before := len(fs.calls)
			if err := d.surgeDown(ctx); err != nil || len(fs.calls) != before {
				t.Errorf("second surgeDown: %v, %d more requests", err, len(fs.calls)-before)
			}
		})
	}
}

// TestSurgeDeploymentWait: the wait for the scale's deployment ends with it when it
// succeeds, fails when it fails, ignores older deployments, and gives up at its deadline.
func TestSurgeDeploymentWait(t *testing.T) {
	dep := func(status string, idx uint64) *cluster.DeploymentState {
		return &cluster.DeploymentState{ID: "dep-" + status, Status: status, StatusDescription: "desc", JobSpecModifyIndex: idx}
	}
	for _, tc := range []struct {
		name  string
		since uint64
		deps  []*cluster.DeploymentState
		want  string // "" for success
	}{
		{"older deployment, then ours runs and succeeds", 101, []*cluster.DeploymentState{dep("successful", 90), dep("running", 101), dep("successful", 101)}, ""},
		{"ours fails", 101, []*cluster.DeploymentState{dep("running", 101), dep("failed", 101)}, "is failed: desc"},
		{"none expected and none", 0, nil, ""},
		{"any active one ends", 0, []*cluster.DeploymentState{dep("running", 5), dep("cancelled", 5)}, ""},
		{"ours never appears", 101, []*cluster.DeploymentState{dep("successful", 90)}, "did not end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeScaler(2)
			fs.deps = tc.deps
			d, _ := surgeDriver(t, fs, restart.SurgeGroup{Group: "web", From: 1, To: 2, Phase: restart.SurgeScalingUp})
			err := d.awaitDeploymentEnd(context.Background(), tc.since, 50*time.Millisecond)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}

// TestSurgeAllocs picks the group's live allocations created since the intent that the
// restart does not handle, newest first.
func TestSurgeAllocs(t *testing.T) {
	g := restart.SurgeGroup{Group: "web", From: 1, To: 3, JobModifyIndex: 50}
	run := func(id, group string, create uint64, desired, client string) *restart.Alloc {
		return &restart.Alloc{ID: id, Group: group, CreateIndex: create, DesiredStatus: desired, ClientStatus: client}
	}
	allocs := []*restart.Alloc{
		run("planned", "web", 60, "run", "running"),
		run("replacement", "web", 70, "run", "running"),
		run("old", "web", 10, "run", "running"),
		run("other-group", "api", 80, "run", "running"),
		run("stopped", "web", 90, "stop", "complete"),
		run("failed", "web", 91, "run", "failed"),
		run("surge-1", "web", 55, "run", "pending"),
		run("surge-2", "web", 95, "run", "running"),
	}
	planned := map[string]bool{"planned": true, "replacement": true}
	var ids []string
	for _, a := range surgeAllocs(allocs, g, planned) {
		ids = append(ids, a.ID)
	}
	if fmt.Sprint(ids) != "[surge-2 surge-1]" {
		t.Fatalf("surge allocations %v, want [surge-2 surge-1]", ids)
	}
}

// TestSetSurgeCopiesOnWrite: a change never writes into the slice a stored snapshot holds.
func TestSetSurgeCopiesOnWrite(t *testing.T) {
	r := &restart.Record{Surge: []restart.SurgeGroup{{Group: "web", Phase: restart.SurgeScalingUp}}}
	snap := cloneRecord(r)
	setSurgeLocked(r, restart.SurgeGroup{Group: "web", Phase: restart.SurgeUp})
	setSurgeLocked(r, restart.SurgeGroup{Group: "api", Phase: restart.SurgeScalingUp})
	if snap.Surge[0].Phase != restart.SurgeScalingUp || len(snap.Surge) != 1 {
		t.Fatalf("snapshot changed: %+v", snap.Surge)
	}
	if len(r.Surge) != 2 || r.Surge[0].Phase != restart.SurgeUp || r.Surge[1].Group != "api" {
		t.Fatalf("record %+v", r.Surge)
	}
}

// TestSurgeUpWithoutScaler: a cluster that cannot scale fails the restart before anything
// changes.
func TestSurgeUpWithoutScaler(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 1})
	d, _ := surgeDriver(t, fc, restart.SurgeGroup{})
	d.rec.Surge, d.spec.Surge = nil, 1
	ok, err := d.surgeUp(context.Background(), 1)
	if ok || err != nil {
		t.Fatalf("surgeUp: %v %v, want the restart ended", ok, err)
	}
	if d.rec.Status != restart.StatusFailed || !strings.Contains(d.rec.Reason, "scale endpoint") {
		t.Fatalf("status %s %q", d.rec.Status, d.rec.Reason)
	}
	if errors.Is(err, context.Canceled) {
		t.Fatal("canceled")
	}
}
