package fleetrun

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

func TestFleetRestartsEveryJobOnceWithinItsLimit(t *testing.T) {
	e := startEnv(t)
	e.register(t, "api", 6, 3, nil)
	e.register(t, "web", 2, 2, nil) // not selected
	rec := e.file(t, `Name matches "^api-"`, runningSpec(), options(2, 0, restart.OnErrorFail))
	if len(rec.Jobs) != 6 {
		t.Fatalf("selected %d jobs, want the 6 api jobs", len(rec.Jobs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var mu sync.Mutex
	var lines []string
	done, err := e.driver("fleet-test:1", true).Run(ctx, rec.Namespace, rec.ID, func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, ev.JobID+": "+ev.Message)
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if done.Status != restart.StatusSucceeded || counts(done)[fleet.JobSucceeded] != 6 {
		t.Fatalf("fleet ended %s (%s) with jobs %v", done.Status, done.Reason, counts(done))
	}
	windows := e.checkJobsOnce(t, done)
	if peak := simtest.PeakOverlap(windows); peak > 2 || peak < 1 {
		t.Errorf("%d jobs were restarting at once by Nomad's facts, want at most 2 (and some)", peak)
	}
	for _, j := range done.Jobs {
		if j.RestartID != fleet.ChildID(done.ID, j.Namespace, j.JobID) {
			t.Errorf("job %s's child is %s, not its derived ID", j.JobID, j.RestartID)
		}
	}
	web, err := simtest.CountRestarts(ctx, e.client, "default", "web-0")
	if err != nil {
		t.Fatal(err)
	}
	if bad := web.ExactlyOnce(nil, false); len(bad) > 0 {
		t.Errorf("a job outside the selection was touched: %v", bad)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) == 0 || !strings.Contains(strings.Join(lines, "\n"), "started: restart") {
		t.Errorf("the sink saw no job start: %q", lines)
	}
}

// TestFleetResumedAfterEveryDetach stops the driver at random instants (its context ends,
// as a detach or a lost terminal does) and resumes it from a new driver until the fleet
// ends: each allocation is restarted exactly once.
func TestFleetResumedAfterEveryDetach(t *testing.T) {
	e := startEnv(t)
	e.register(t, "api", 5, 2, nil)
	rec := e.file(t, `Name matches "^api-"`, runningSpec(), options(2, 0, restart.OnErrorFail))
	deadline := time.Now().Add(testTimeout)
	var done *fleet.Record
	for n := 0; ; n++ {
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not end after %d drives", n)
		}
		// Each drive lives a little longer than the one before, so that a loaded machine,
		// on which a short drive may not get a step done, still sees the fleet end.
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(150+n*37%200+5*n)*time.Millisecond)
		got, err := e.driver("fleet-test:"+string(rune('a'+n%26)), true).Run(ctx, rec.Namespace, rec.ID, nil)
		cancel()
		if err == nil && got.Status.Terminal() {
			done = got
			break
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, store.ErrLeaseHeld) {
			t.Fatalf("drive %d: %v", n, err)
		}
	}
	if done.Status != restart.StatusSucceeded {
		for _, j := range done.Jobs { // what ended each job, to tell a lost child from a failed one
			t.Logf("job %s: %s %s (child %s)", j.JobID, j.Status, j.Reason, j.RestartID)
		}
		t.Fatalf("fleet ended %s: %s", done.Status, done.Reason)
	}
	if peak := simtest.PeakOverlap(e.checkJobsOnce(t, done)); peak > 2 {
		t.Errorf("%d jobs were restarting at once by Nomad's facts, want at most 2", peak)
	}
}

func TestFleetBusyJobs(t *testing.T) {
	for _, busy := range []fleet.Busy{fleet.BusySkip, fleet.BusyWait} {
		t.Run(string(busy), func(t *testing.T) {
			e := startEnv(t)
			e.register(t, "api", 3, 1, nil)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			// Another restart of api-1 is filed and not driven yet.
			p, err := e.eng.Plan(ctx, engine.Request{Namespace: "default", Job: "api-1", Exact: true, Spec: runningSpec()})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.eng.Create(ctx, p.Record); err != nil {
				t.Fatal(err)
			}
			opts := options(3, 0, restart.OnErrorFail)
			opts.Busy = busy
			rec := e.file(t, `Name matches "^api-"`, runningSpec(), opts)
			if busy == fleet.BusyWait {
				// That restart is driven once the fleet waits for it.
				go func() {
					simtest.WaitFor(t, ctx, "the fleet to wait for api-1", func() bool {
						f, err := e.fleets.Get(ctx, rec.Namespace, rec.ID)
						return err == nil && f.Jobs[1].BusyWith == p.Record.ID
					})
					_, _ = e.eng.Drive(ctx, "default", p.Record.ID, nil)
				}()
			}
			done, err := e.driver("fleet-test:1", true).Run(ctx, rec.Namespace, rec.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			j := done.Jobs[1]
			switch busy {
			case fleet.BusySkip:
				if j.Status != fleet.JobSkipped || !strings.Contains(j.Reason, p.Record.ID) {
					t.Errorf("api-1 is %s (%s), want skipped naming %s", j.Status, j.Reason, p.Record.ID)
				}
			case fleet.BusyWait:
				if j.Status != fleet.JobSucceeded || j.RestartID == p.Record.ID {
					t.Errorf("api-1 is %s with restart %s, want succeeded by a child of its own", j.Status, j.RestartID)
				}
			}
			if done.Status != restart.StatusSucceeded {
				t.Errorf("fleet ended %s: %s", done.Status, done.Reason)
			}
		})
	}
}

func TestFleetPurgedJobAndFailureBudget(t *testing.T) {
	e := startEnv(t)
	e.register(t, "api", 4, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rec := e.file(t, `Name matches "^api-"`, runningSpec(), options(1, 0, restart.OnErrorFail))
	// api-0 is purged before its turn; api-1 has a deployment running when its turn comes,
	// which Nomad's rule refuses: it fails and the budget of 0 stops the fleet.
	if _, _, err := e.client.Jobs().Deregister("api-0", true, nil); err != nil {
		t.Fatal(err)
	}
	job, _, err := e.client.Jobs().Info("api-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The group's own update block (the registration copied the job's into it) rules its
	// deployment: an hour of min_healthy_time keeps the deployment running for the test.
	job.Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Hour), HealthyDeadline: ptr(2 * time.Hour), ProgressDeadline: ptr(3 * time.Hour)}
	job.TaskGroups[0].Update = job.Update
	job.TaskGroups[0].Tasks[0].Env = map[string]string{"V": "2"}
	if _, _, err := e.client.Jobs().Register(job, nil); err != nil {
		t.Fatal(err)
	}
	// The new version's deployment exists before the fleet starts (the scheduler makes it
	// from the registration's evaluation, later on a loaded machine).
	simtest.WaitFor(t, ctx, "api-1's deployment", func() bool {
		d, _, err := e.client.Jobs().LatestDeployment("api-1", nil)
		return err == nil && d != nil && d.JobVersion == *job.Version+1 && d.Status == api.DeploymentStatusRunning
	})
	done, err := e.driver("fleet-test:1", true).Run(ctx, rec.Namespace, rec.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []fleet.JobStatus{fleet.JobSkipped, fleet.JobFailed, fleet.JobCanceled, fleet.JobCanceled}
	for i, j := range done.Jobs {
		if j.Status != want[i] {
			t.Errorf("%s is %s (%s), want %s", j.JobID, j.Status, j.Reason, want[i])
		}
	}
	if done.Status != restart.StatusFailed {
		t.Errorf("fleet ended %s, want failed", done.Status)
	}
	if !strings.Contains(done.Jobs[0].Reason, "purged") || !strings.Contains(strings.ToLower(done.Jobs[1].Reason), "deployment") {
		t.Errorf("reasons: %q, %q", done.Jobs[0].Reason, done.Jobs[1].Reason)
	}
}

func TestFleetPauseResumeCancel(t *testing.T) {
	e := startEnv(t)
	e.register(t, "api", 4, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	spec := runningSpec()
	spec.BatchWait = 300 * time.Millisecond // room to pause mid-child
	rec := e.file(t, `Name matches "^api-"`, spec, options(1, 0, restart.OnErrorFail))
	d := e.driver("fleet-test:1", true)
	result := runInBackground(ctx, t, d, rec)
	get := e.reader(ctx, t, rec)
	simtest.WaitFor(t, ctx, "the first job to start", func() bool { return get().Jobs[0].Status == fleet.JobRunning })
	if _, err := d.Pause(ctx, rec.Namespace, rec.ID, "tester"); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, ctx, "the fleet to pause and pass it on", func() bool {
		f := get()
		return f.Status == restart.StatusPaused && f.Jobs[0].Steered == restart.IntentPause
	})
	child, err := e.restarts.Get(ctx, "default", get().Jobs[0].RestartID)
	if err != nil {
		t.Fatal(err)
	}
	if child.Control.Intent != restart.IntentPause {
		t.Errorf("the running child's intent is %s, want pause", child.Control.Intent)
	}
	if _, err := d.Resume(ctx, rec.Namespace, rec.ID, "tester"); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, ctx, "a second job to start", func() bool { return get().Jobs[1].Status != fleet.JobPending })
	if _, err := d.Cancel(ctx, rec.Namespace, rec.ID, "tester"); err != nil {
		t.Fatal(err)
	}
	done := <-result
	if done.Status != restart.StatusCanceled {
		t.Fatalf("fleet ended %s (%s), want canceled", done.Status, done.Reason)
	}
	if c := done.Counts(); c[fleet.JobPending] != 0 || c[fleet.JobRunning] != 0 || c[fleet.JobCanceled] < 2 {
		t.Errorf("jobs after the cancel: %v", c)
	}
}

// slowCreate is a store whose creations take delay: the window in which a fleet has
// stored a job's start while its child's record does not exist yet.
type slowCreate struct {
	store.Store
	delay time.Duration
}

func (s slowCreate) Create(ctx context.Context, rec *restart.Record) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Create(ctx, rec)
}

func (s slowCreate) CreateLeased(ctx context.Context, rec *restart.Record, holder string) (store.Lease, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Store.CreateLeased(ctx, rec, holder)
}

// TestFleetPauseReachesAChildBeingCreated pauses a fleet while its first child is being
// created: the pause is passed on once the child exists, and the child pauses after its
// batch at most, as a running child does, instead of the intent being recorded as given to
// a restart that never heard it (and the child restarting every allocation).
func TestFleetPauseReachesAChildBeingCreated(t *testing.T) {
	e := startEnv(t)
	e.register(t, "slow", 1, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	e.eng = engine.New(engine.Config{Cluster: e.nomad, Store: slowCreate{Store: e.restarts, delay: time.Second}, Holder: "fleet-test:1",
		Health: engine.HealthConfig{TimeScale: e.sim.TimeScale()}, MaxFeeds: 16})
	rec := e.file(t, `Name matches "^slow-"`, runningSpec(), options(1, 0, restart.OnErrorFail))
	d := e.driver("fleet-test:1", true)
	result := runInBackground(ctx, t, d, rec)
	get := e.reader(ctx, t, rec)
	simtest.WaitFor(t, ctx, "the job's start to be stored", func() bool { return get().Jobs[0].Status == fleet.JobRunning })
	childID := get().Jobs[0].RestartID
	if _, err := e.restarts.Get(ctx, "default", childID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the child exists already (%v): the window under test is gone", err)
	}
	if _, err := d.Pause(ctx, rec.Namespace, rec.ID, "tester"); err != nil {
		t.Fatal(err)
	}
	var child *restart.Record
	simtest.WaitFor(t, ctx, "the child to pause or end", func() bool {
		var err error
		child, err = e.restarts.Get(ctx, "default", childID)
		return err == nil && (child.Status == restart.StatusPaused || child.Status.Terminal())
	})
	if child.Status != restart.StatusPaused {
		t.Errorf("the child ended %s with intent %q: the fleet's pause did not reach it", child.Status, child.Control.Intent)
	}
	// The fleet records the intent as given in the write after it gave it.
	simtest.WaitFor(t, ctx, "the fleet to record the pause given, or end", func() bool {
		f := get()
		return f.Jobs[0].Steered == restart.IntentPause || f.Status.Terminal()
	})
	if f := get(); f.Jobs[0].Steered != restart.IntentPause {
		t.Errorf("the fleet recorded intent %q given to its child, want pause", f.Jobs[0].Steered)
	}
	counts, err := simtest.CountRestarts(ctx, e.client, "default", "slow-0")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(counts.InPlace); n > 1 {
		t.Errorf("%d allocations restarted by a child paused after its first batch of 1 at most", n)
	}
	if _, err := d.Cancel(ctx, rec.Namespace, rec.ID, "tester"); err != nil {
		t.Fatal(err)
	}
	if done := <-result; done.Status != restart.StatusCanceled {
		t.Errorf("fleet ended %s (%s), want canceled", done.Status, done.Reason)
	}
}
