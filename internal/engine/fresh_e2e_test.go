package engine

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// warmup is how long the tasks of staleJob take to serve after a start.
const warmup = 4 * time.Second

// staleJob is the job shape that took every instance down while the gate counted check
// results from before a restart: count instances whose task serves warmup after it starts,
// behind a check of the given provider ("nomad": a group service; "consul": a task's) that
// runs every 5 s, with a min_healthy_time of 1 s. A check runs every 5 s and the last
// result stays until the next run, so right after a restart the check still reads the old
// process's success.
func staleJob(count int, provider string) *api.Job {
	nomadScript, consulScript := "pass_after=4s", ""
	if provider == "consul" {
		nomadScript, consulScript = "", "pass_after=4s"
	}
	j := checkedJob("web", count, nomadScript, consulScript, time.Second, time.Minute)
	tg := j.TaskGroups[0]
	for _, svcs := range [][]*api.Service{tg.Services, tg.Tasks[0].Services} {
		for _, s := range svcs {
			for i := range s.Checks {
				s.Checks[i].Interval = 5 * time.Second
			}
		}
	}
	return j
}

// servingInterval is a stretch of Nomad's time during which an allocation served.
type servingInterval struct{ from, to time.Time }

// servingIntervals reads, from Nomad's task events of every allocation of job "web"
// (replacements and surge allocations included), when each served: from warmup after a
// Started event until the next Restart Signaled or Killing event, or on.
func servingIntervals(t *testing.T, client *api.Client) map[string][]servingInterval {
	t.Helper()
	stubs, _, err := client.Jobs().Allocations("web", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]servingInterval{}
	for _, s := range stubs {
		a, _, err := client.Allocations().Info(s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		ts := a.TaskStates["app"]
		if ts == nil {
			continue
		}
		var up time.Time
		for _, e := range ts.Events {
			at := time.Unix(0, e.Time)
			switch e.Type {
			case api.TaskStarted:
				up = at.Add(warmup)
			case "Restart Signaled", api.TaskKilling:
				if !up.IsZero() && at.After(up) {
					out[a.ID] = append(out[a.ID], servingInterval{up, at})
				}
				up = time.Time{}
			}
		}
		if !up.IsZero() {
			out[a.ID] = append(out[a.ID], servingInterval{up, time.Unix(1<<40, 0)})
		}
	}
	return out
}

// fewestServing is the fewest allocations serving at any moment of [from, to].
func fewestServing(intervals map[string][]servingInterval, from, to time.Time) (int, time.Time) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	n := 0
	for _, ivs := range intervals {
		for _, iv := range ivs {
			if !iv.from.After(from) && iv.to.After(from) {
				n++
			} else if iv.from.After(from) && iv.from.Before(to) {
				edges = append(edges, edge{iv.from, +1})
			}
			if iv.to.After(from) && iv.to.Before(to) {
				edges = append(edges, edge{iv.to, -1})
			}
		}
	}
	// At one instant, a start before an end: a handover at the same moment is no gap.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta > edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	fewest, when := n, from
	for _, e := range edges {
		n += e.delta
		if n < fewest {
			fewest, when = n, e.at
		}
	}
	return fewest, when
}

// TestGateIgnoresResultsFromBeforeTheRestart: with checks every 5 s, a min_healthy_time
// of 1 s and a 4 s warm-up, a graceful restart keeps all but the batch serving throughout
// (counted from Nomad's task events), in place, with -reschedule and with -surge; each
// allocation is restarted exactly once. Counting the result the check kept from before the
// restart took every instance down (issue 25: measured on Nomad 2.0).
func TestGateIgnoresResultsFromBeforeTheRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider string
		count    int
		spec     restart.Spec
		want     int // fewest serving
	}{
		{"nomad check in place", "nomad", 3, restart.Spec{}, 2},
		{"consul check in place", "consul", 3, restart.Spec{}, 2},
		{"nomad check, reschedule", "nomad", 3, restart.Spec{Reschedule: true}, 2},
		{"nomad check, surge 1 on one instance", "nomad", 1, restart.Spec{Surge: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startGateSim(t, "")
			env.registerJob(t, staleJob(tc.count, tc.provider))
			// Let every instance serve before the restart starts.
			time.Sleep(env.sim.RealDuration(warmup))
			spec := tc.spec
			spec.Health, spec.Yes, spec.OnError = restart.HealthAuto, true, restart.OnErrorFail
			spec.BatchSizes = []restart.BatchSize{{N: 1}}
			rec := env.plan(t, "web", spec)
			from := env.sim.Now()
			final, dt := env.driveGate(t, rec)
			to := env.sim.Now()
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
			}
			env.checkOnce(t, final)
			ivs := servingIntervals(t, env.client)
			fewest, when := fewestServing(ivs, from, to)
			if fewest < tc.want {
				t.Errorf("%d of %d instances served %.1fs into the restart (which took %.1fs); want at least %d throughout\n%s\n%s",
					fewest, tc.count, when.Sub(from).Seconds(), to.Sub(from).Seconds(), tc.want, describeServing(ivs, from), dt.log.messages())
			}
		})
	}
}

// describeServing lists when each allocation served, in seconds from `from`.
func describeServing(ivs map[string][]servingInterval, from time.Time) string {
	var lines []string
	for id, list := range ivs {
		for _, iv := range list {
			lines = append(lines, fmt.Sprintf("%s serves %.1fs .. %.1fs", id[:8], iv.from.Sub(from).Seconds(), iv.to.Sub(from).Seconds()))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestGateResumedLongAfterTheRestart: a driver that dies while an allocation's gate waits,
// resumed long after the allocation's healthy deadline, takes the gate up with a full
// period: the allocation passes (it has served since), rather than failing a deadline that
// ran out while no one drove the restart.
func TestGateResumedLongAfterTheRestart(t *testing.T) {
	env := startGateSim(t, "")
	env.registerJob(t, checkedJob("web", 1, "pass_after=2s", "", time.Second, 8*time.Second))
	rec := env.plan(t, "web", restart.Spec{Health: restart.HealthAuto, Yes: true, OnError: restart.OnErrorFail})
	wait, cancel := driveAsync(env.e, rec)
	waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.Allocs[0].Waiting != "" })
	cancel()
	if _, err := wait(); err == nil {
		t.Fatal("the driver was stopped but its drive ended without an error")
	}
	time.Sleep(env.sim.RealDuration(20 * time.Second)) // the 8 s deadline runs out twice over
	final, dt := env.driveGate(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("resumed: %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
	}
	env.checkOnce(t, final)
}
