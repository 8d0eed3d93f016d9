package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// campaignKinds are the restarts the crash campaign drives: service, batch and system
// jobs, in place and with -reschedule, with either store.
func campaignKinds() []scenario {
	var out []scenario
	for _, typ := range []string{"service", "batch", "system"} {
		for _, resched := range []bool{false, true} {
			for _, st := range []string{"local", "nomad"} {
				out = append(out, scenario{jobType: typ, count: 5, reschedule: resched, state: st, batchSize: 2})
			}
		}
	}
	return out
}

// campaignSeed is the seed of the kill instants: E2E_SEED when set, so that a failing
// campaign can be replayed (timing still varies with the machine).
func campaignSeed(t *testing.T) uint64 {
	if s := os.Getenv("E2E_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("E2E_SEED=%q: %v", s, err)
		}
		return n
	}
	return 20261130
}

// TestCrashCampaign SIGKILLs nomad-restart drivers at random instants across restarts of
// every kind, resumes each from a new process until the record ends, and checks that every
// allocation was restarted exactly once, from Nomad's facts.
func TestCrashCampaign(t *testing.T) {
	target := 100
	if testing.Short() {
		target = 24
	}
	seed := campaignSeed(t)
	t.Logf("seed %d (set E2E_SEED to replay), target %d kills", seed, target)

	c := simtest.Start(t, nomadsim.Options{TimeScale: driverScale, Seed: int64(seed), NodesPerDatacenter: 2})
	client := apiClient(t, c)
	env := driverEnv{addr: c.Addr(), stateHome: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	kinds := campaignKinds()
	// Calibrate: one uninterrupted restart of each kind, which must itself be exactly-once,
	// gives the window the kill instants are drawn from.
	calib := make([]*outcome, len(kinds))
	for i, sc := range kinds {
		out, err := drive(ctx, c, client, env, sc, fmt.Sprintf("cal-%d", i), &killPlan{measure: true})
		if err != nil {
			t.Fatalf("%s: %v", sc, err)
		}
		for _, b := range out.bad {
			t.Errorf("%s uninterrupted: %s", sc, b)
		}
		calib[i] = out
	}
	if t.Failed() {
		return
	}

	var (
		mu     sync.Mutex
		kills  int
		phases = map[string]int{}
		procs  int
	)
	rngs := make([]*rand.Rand, len(kinds))
	for i := range kinds {
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	type task struct {
		kind, round int
	}
	work := make(chan task)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for tk := range work {
				sc := kinds[tk.kind]
				mu.Lock()
				plan := &killPlan{rng: rand.New(rand.NewPCG(rngs[tk.kind].Uint64(), 0)), maxKills: 1 + rngs[tk.kind].IntN(4),
					created: calib[tk.kind].created, rest: calib[tk.kind].elapsed - calib[tk.kind].created}
				mu.Unlock()
				plan.observe = func(ph string) {
					mu.Lock()
					phases[ph]++
					mu.Unlock()
				}
				jobID := fmt.Sprintf("crash-%d-%d", tk.kind, tk.round)
				out, err := drive(ctx, c, client, env, sc, jobID, plan)
				if err != nil {
					t.Errorf("%s %s: %v", sc, jobID, err)
					continue
				}
				for _, b := range out.bad {
					t.Errorf("%s %s after %d kills: %s", sc, jobID, out.kills, b)
				}
				// Free the nodes for later rounds: a campaign of many rounds would otherwise
				// fill them and leave new jobs blocked.
				if _, _, err := client.Jobs().Deregister(jobID, true, nil); err != nil {
					t.Errorf("purging %s: %v", jobID, err)
				}
				mu.Lock()
				kills += out.kills
				procs += out.processes
				mu.Unlock()
			}
		}()
	}
	round := 0
feed:
	for ; round < 40; round++ {
		for k := range kinds {
			mu.Lock()
			done := kills >= target
			mu.Unlock()
			if done || ctx.Err() != nil || t.Failed() {
				break feed
			}
			work <- task{kind: k, round: round}
		}
	}
	close(work)
	wg.Wait()

	names := make([]string, 0, len(phases))
	for ph := range phases {
		names = append(names, ph)
	}
	sort.Strings(names)
	for _, ph := range names {
		t.Logf("kills %-28s %d", ph, phases[ph])
	}
	t.Logf("%d kills over %d processes in %d rounds of %d kinds", kills, procs, round, len(kinds))
	if kills < target && !t.Failed() {
		t.Fatalf("only %d kills landed, want %d", kills, target)
	}
}

// killPhase names where in the restart a kill landed, from the record the killed process
// left: the campaign reports the spread.
func killPhase(rec *restart.Record) string {
	if rec == nil {
		return "before creation"
	}
	if rec.Status == restart.StatusPending {
		return "created, not started"
	}
	if rec.Status.Terminal() {
		return "after the end (not counted)"
	}
	for _, a := range rec.Allocs {
		switch a.State {
		case restart.AllocRestarting:
			return "request in flight"
		case restart.AllocWaiting:
			return "waiting for tasks"
		}
	}
	if !rec.NextBatchAt.IsZero() {
		return "batch wait"
	}
	return "between batches"
}
