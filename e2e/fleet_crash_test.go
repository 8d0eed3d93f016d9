package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestFleetCrashCampaign restarts a fleet of 50 jobs of 10 allocations, at most 5 jobs at
// once, SIGKILLing its driver at random instants and resuming it from a new process each
// time, until it ends. From Nomad's own facts: every allocation was restarted exactly once,
// no job outside the selection was touched, and never more than 5 jobs were restarting at
// once.
func TestFleetCrashCampaign(t *testing.T) {
	jobs, kills := 50, 8
	if testing.Short() {
		jobs, kills = 20, 3
	}
	seed := campaignSeed(t)
	rng := rand.New(rand.NewPCG(seed, 13))
	t.Logf("seed %d (set E2E_SEED to replay)", seed)
	// Slower still than driverScale: a fleet's children must stay in flight long enough for
	// each kill to land while several of them restart.
	c := simtest.Start(t, nomadsim.Options{TimeScale: 4, Seed: int64(seed), NodesPerDatacenter: 4})
	client := apiClient(t, c)
	env := driverEnv{addr: c.Addr(), stateHome: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ids := registerFleetJobs(ctx, t, c, "fl", jobs, 10)
	if err := register(ctx, c, newJob("other", "service", 3)); err != nil {
		t.Fatal(err)
	}
	fleets := nomadstore.NewFleets(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})

	run, err := env.start("run", "-jobs", `Name matches "^fl-"`, "-max-parallel-jobs", "5", "-batch-size", "5",
		"-health", "running", "-on-error", "fail", "-yes", "-detach")
	if err != nil {
		t.Fatal(err)
	}
	if code, err := run.wait(ctx); err != nil || code != 0 {
		t.Fatalf("run -jobs -detach exited %d (%v):\n%s", code, err, run.out.String())
	}
	listed, err := fleets.List(ctx, "*", false)
	if err != nil || len(listed) != 1 {
		t.Fatalf("fleets recorded: %d (%v), want 1", len(listed), err)
	}
	id := listed[0].ID

	done, landed := driveThroughKills(ctx, t, killCampaign{env: env, client: client, fleets: fleets, rng: rng, kills: kills, maxDelay: 700 * time.Millisecond}, id, nil)
	t.Logf("%d kills landed over the fleet's run", landed)
	if landed < kills {
		t.Errorf("only %d kills landed before the fleet ended, want %d: draw shorter delays", landed, kills)
	}
	checkFleetFacts(ctx, t, client, done, ids, 5)
	other, err := simtest.CountRestarts(ctx, client, "default", "other")
	if err != nil {
		t.Fatal(err)
	}
	if bad := other.ExactlyOnce(nil, false); len(bad) > 0 {
		t.Errorf("a job outside the selection was touched: %v", bad)
	}
}

// killCampaign says how a crash campaign drives a fleet: through the command line's
// drivers (env), killing the first kills of them each at a random moment from 100 ms to
// 100 ms plus maxDelay after its start.
type killCampaign struct {
	env      driverEnv
	client   *api.Client
	fleets   store.Fleets
	rng      *rand.Rand
	kills    int
	maxDelay time.Duration
}

// driveThroughKills resumes fleet id with one driver after another, killing the
// campaign's drivers (and freeing the leases a killed one left, as their TTLs would),
// until the fleet ends. check, when given, sees the fleet's record after each driver. It
// returns the ended record and how many kills landed.
func driveThroughKills(ctx context.Context, t *testing.T, k killCampaign, id string, check func(*fleet.Record)) (*fleet.Record, int) {
	t.Helper()
	landed := 0
	for procs := 0; ; procs++ {
		if procs > 3*k.kills+10 {
			t.Fatalf("fleet %s did not end after %d processes", id, procs)
		}
		ch, err := k.env.start("resume", id)
		if err != nil {
			t.Fatal(err)
		}
		if landed < k.kills {
			select {
			case <-ch.done:
			case <-time.After(100*time.Millisecond + time.Duration(k.rng.Int64N(int64(k.maxDelay)))):
				if ch.kill() {
					landed++
					freeFleetLeases(ctx, t, k.client, k.fleets, id)
				}
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 4*time.Minute)
		_, err = ch.wait(wctx)
		wcancel()
		if err != nil {
			t.Fatal(err)
		}
		rec, err := k.fleets.Get(ctx, "default", id)
		if err != nil {
			t.Fatal(err)
		}
		if check != nil {
			check(rec)
		}
		if rec.Status.Terminal() {
			return rec, landed
		}
	}
}

// registerFleetJobs registers n service jobs prefix-00.. of count allocations each, in
// parallel, and waits until they run.
func registerFleetJobs(ctx context.Context, t testing.TB, c *nomadsim.Cluster, prefix string, n, count int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	simtest.Concurrently(t, n, func(i int) error { return register(ctx, c, newJob(ids[i], api.JobTypeService, count)) })
	return ids
}

// freeFleetLeases frees, at once, the leases a killed driver left on the fleet and on its
// running children, as their TTLs would.
func freeFleetLeases(ctx context.Context, t testing.TB, client *api.Client, fleets store.Fleets, id string) {
	t.Helper()
	if _, err := freeLease(client, id); err != nil {
		t.Fatal(err)
	}
	rec, err := fleets.Get(ctx, "default", id)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range rec.Jobs {
		// A child may exist before the record says so only under a start recorded as an
		// intent; free every job's derived ID that may be held.
		if j.Status == fleet.JobRunning || j.Status == fleet.JobPending {
			if _, err := freeLease(client, fleet.ChildID(id, j.Namespace, j.JobID)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkFleetFacts asserts, from Nomad's facts, that every job of the fleet succeeded with
// each allocation its child planned restarted exactly once, and that no more than limit
// jobs were restarting at once.
func checkFleetFacts(ctx context.Context, t *testing.T, client *api.Client, rec *fleet.Record, ids []string, limit int) {
	t.Helper()
	if rec.Status != "succeeded" || len(rec.Jobs) != len(ids) {
		t.Fatalf("fleet ended %s (%s) with %d jobs, want succeeded with %d", rec.Status, rec.Reason, len(rec.Jobs), len(ids))
	}
	st := nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
	var windows []simtest.Window
	for _, j := range rec.Jobs {
		child, err := st.Get(ctx, j.Namespace, j.RestartID)
		if err != nil {
			t.Fatalf("job %s's child %s: %v", j.JobID, j.RestartID, err)
		}
		var allocs []string
		for _, a := range child.Allocs {
			allocs = append(allocs, a.ID)
		}
		counts, err := simtest.CountRestarts(ctx, client, j.Namespace, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if len(allocs) != 10 {
			t.Errorf("job %s's child planned %d allocations, want 10", j.JobID, len(allocs))
		}
		for _, bad := range counts.ExactlyOnce(allocs, false) {
			t.Errorf("job %s: %s", j.JobID, bad)
		}
		w, err := simtest.RestartWindow(ctx, client, j.Namespace, j.JobID)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, w)
	}
	if peak := simtest.PeakOverlap(windows); peak > limit {
		t.Errorf("%d jobs were restarting at once by Nomad's facts, want at most %d", peak, limit)
	} else {
		t.Logf("at most %d jobs restarting at once", peak)
	}
}
