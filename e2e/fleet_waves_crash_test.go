package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestFleetWavesCrashCampaign is the crash campaign of a fleet in waves: 15 jobs of 10
// allocations in 3 waves (each job of waves 2 and 3 after one of the wave before), at most
// 5 at once, -wave-wait 500ms, its driver SIGKILLed at random instants (between waves,
// while a job restarts, while an upstream's evidence or its wait is measured) and resumed
// from a new process each time. From Nomad's own facts: every allocation was restarted
// exactly once, and each job only after its upstream's restart ended; from the record, no
// job started before its upstream's recorded evidence.
func TestFleetWavesCrashCampaign(t *testing.T) {
	kills := 6
	if testing.Short() {
		kills = 3
	}
	seed := campaignSeed(t)
	rng := rand.New(rand.NewPCG(seed, 35))
	t.Logf("seed %d (set E2E_SEED to replay)", seed)
	c := simtest.Start(t, nomadsim.Options{TimeScale: 4, Seed: int64(seed), NodesPerDatacenter: 4})
	client := apiClient(t, c)
	env := driverEnv{addr: c.Addr(), stateHome: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ids := registerFleetJobs(ctx, t, c, "wv", 15, 10)
	fleets := nomadstore.NewFleets(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})

	args := []string{"run", "-jobs", `Name matches "^wv-"`, "-max-parallel-jobs", "5", "-batch-size", "5",
		"-health", "running", "-on-error", "fail", "-yes", "-detach", "-wave-wait", "500ms"}
	for i := 5; i < len(ids); i++ {
		args = append(args, "-after", fmt.Sprintf("%s: %s", ids[i], ids[i-5]))
	}
	run, err := env.start(args...)
	if err != nil {
		t.Fatal(err)
	}
	if code, err := run.wait(ctx); err != nil || code != 0 {
		t.Fatalf("run -jobs -detach exited %d (%v):\n%s", code, err, run.out.String())
	}
	listed, err := fleets.List(ctx, "*", false)
	if err != nil || len(listed) != 1 || listed[0].Waves() != 3 {
		t.Fatalf("fleets recorded: %d (%v), want 1 in 3 waves", len(listed), err)
	}
	id := listed[0].ID

	measuring := 0
	done, landed := driveThroughKills(ctx, t, killCampaign{env: env, client: client, fleets: fleets, rng: rng, kills: kills, maxDelay: 900 * time.Millisecond}, id, func(rec *fleet.Record) {
		for _, j := range rec.Jobs {
			if j.Status == fleet.JobSucceeded && !j.Evidence.Ready && j.Evidence.Waits != "" {
				measuring++
			}
			for _, u := range j.After {
				for _, up := range rec.Jobs {
					if j.RestartID != "" && fleet.RefOf(up) == u && !up.Evidence.Ready {
						t.Fatalf("%s started before its upstream %s's evidence: %+v", j.JobID, up.JobID, up.Evidence)
					}
				}
			}
		}
	})
	t.Logf("%d kills landed over the fleet's run, %d found an upstream's evidence being measured", landed, measuring)
	if landed < kills {
		t.Errorf("only %d kills landed before the fleet ended, want %d: draw shorter delays", landed, kills)
	}
	checkFleetFacts(ctx, t, client, done, ids, 5)
	windows := map[string]simtest.Window{}
	for _, id := range ids {
		w, err := simtest.RestartWindow(ctx, client, "default", id)
		if err != nil {
			t.Fatal(err)
		}
		windows[id] = w
	}
	var waveStarts []string
	for _, e := range done.Events {
		if e.Type == fleet.EventWaveStarted {
			waveStarts = append(waveStarts, e.Message)
		}
	}
	for i := 5; i < len(ids); i++ {
		if down, up := windows[ids[i]], windows[ids[i-5]]; !down.From.After(up.To) {
			t.Errorf("%s started restarting at %s, before its upstream %s ended at %s", ids[i], down.From, ids[i-5], up.To)
		}
	}
	if len(waveStarts) != 3 || !strings.HasPrefix(waveStarts[2], "Wave 3 of 3 started") {
		t.Errorf("the fleet's log tells wave starts %q, want 3", waveStarts)
	}
}
