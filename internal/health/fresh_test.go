package health

import (
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TestGateFreshEvidence holds the rule that a check's status counts only once it is proven
// to come from a run after the checked task's latest start. The task restarted in place
// 1.3 s after t0 unless a case says otherwise; checks run every 5 s, min_healthy_time is 1 s:
// the shape of job that took every instance down when stale results counted.
func TestGateFreshEvidence(t *testing.T) {
	nomad5 := nomadHTTP
	nomad5.Interval, nomad5.Timeout = 5*time.Second, time.Second
	consul5 := consulHTTP
	consul5.Interval, consul5.Timeout = 5*time.Second, time.Second
	consul5x3 := consul5
	consul5x3.FailuresBeforeCritical = 3
	consulInitPassing := consul5
	consulInitPassing.InitialStatus = ConsulPassing
	consulWarn5 := consulWarn
	consulWarn5.Interval, consulWarn5.Timeout = 5*time.Second, time.Second
	cfg := func(checks ...CheckSpec) Config {
		return Config{Mode: restart.HealthChecks, Tasks: []string{"app"}, Checks: checks, Since: t0, MinHealthy: time.Second, Deadline: time.Minute}
	}
	inPlace := restartedApp(1.3, 1)
	replacement := runningAlloc(map[string]float64{"app": 1.3})
	consulAt := func(sec float64, status string) *Snapshot { return snap(ProviderConsul, sec, cc("http", status, "")) }
	nomadAt := func(sec float64, c ...Check) *Snapshot { return snap(ProviderNomad, sec, c...) }
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		// Nomad: the result's run time against the task's start, to the second.
		{"nomad: a success from before the restart does not count", cfg(nomad5), []step{
			{alloc: inPlace, snap: nomadAt(1.5, ncAt("http", NomadSuccess, 0.2)), now: 1.5, state: Pending,
				reason: "check http (nomad): no result since the restart; next in about 5s"},
			{now: 4, state: Pending, reason: "next in about 2s"},
			{now: 6.5, state: Pending, reason: "check http (nomad): no result since the restart; the next is due"},
		}},
		{"nomad: a result stamped with the start's own second does not count", cfg(nomad5), []step{
			{alloc: inPlace, snap: nomadAt(1.9, ncAt("http", NomadSuccess, 1.8)), now: 30, state: Pending, reason: "no result since the restart"},
		}},
		{"nomad: a stale failure says no result, not the old failure", cfg(nomad5), []step{
			{alloc: inPlace, snap: nomadAt(1.5, ncAt("http", NomadFailure, 0.9)), now: 1.5, state: Pending, reason: "no result since the restart"},
		}},
		{"nomad: the first fresh success counts from when it was read", cfg(nomad5), []step{
			{alloc: inPlace, snap: nomadAt(1.5, ncAt("http", NomadSuccess, 0.2)), now: 1.5, state: Pending, reason: "no result since the restart"},
			{snap: nomadAt(2.6, ncAt("http", NomadSuccess, 2.4)), now: 3.5, state: Pending, reason: "min healthy time: 900ms of 1s"},
			{now: 3.6, state: Healthy, since: 2.6},
			{snap: nomadAt(7.6, ncAt("http", NomadSuccess, 7.4)), now: 7.6, state: Healthy, since: 2.6},
		}},
		{"nomad: 5 s interval, 1 s min healthy, 4 s warm-up: healthy only once it serves", cfg(nomad5), []step{
			{alloc: inPlace, snap: nomadAt(1.4, ncAt("http", NomadSuccess, 0.7)), now: 3, state: Pending, reason: "no result since the restart"},
			{snap: nomadAt(5.8, ncAt("http", NomadFailure, 5.7)), now: 5.8, state: Pending, reason: "check http (nomad) failure"},
			{snap: nomadAt(10.8, ncAt("http", NomadSuccess, 10.7)), now: 11.7, state: Pending, reason: "min healthy time"},
			{now: 11.8, state: Healthy, since: 10.8},
		}},
		{"nomad: a replacement's first result counts even in its start's second", cfg(nomad5), []step{
			{alloc: replacement, snap: nomadAt(1.9, ncAt("http", NomadSuccess, 1.8)), now: 2.9, state: Healthy, since: 1.9},
		}},
		{"nomad: a task restarting again needs a result after its new start", cfg(nomad5), []step{
			{alloc: inPlace, snap: nomadAt(2.6, ncAt("http", NomadSuccess, 2.4)), now: 3, state: Pending, reason: "min healthy time"},
			{alloc: restartedApp(3.2, 2), now: 30, state: Pending, reason: "no result since the restart"},
			{snap: nomadAt(7.6, ncAt("http", NomadSuccess, 7.4)), now: 8.6, state: Healthy, since: 7.6},
		}},
		{"nomad: a fresh result read before the new start was observed is judged again", cfg(nomad5), []step{
			{alloc: restartedApp(0, 1), snap: nomadAt(2.6, ncAt("http", NomadSuccess, 1.4)), now: 2.6, state: Pending, reason: "min healthy time"},
			{alloc: inPlace, now: 30, state: Pending, reason: "no result since the restart"},
		}},

		// Consul: no time on a status, so proof by a non-passing status seen after the
		// start, or by the time by which the check must have run since.
		{"consul: a passing status from before the restart waits out interval and timeout", cfg(consul5), []step{
			{alloc: inPlace, snap: consulAt(1.5, ConsulPassing), now: 3, state: Pending,
				reason: "check http (consul): no result since the restart; next in about 6s"},
			{now: 8.2, state: Pending, reason: "next in about 1s"},
			{now: 8.3, state: Pending, reason: "min healthy time: 0s of 1s"},
			{now: 9.3, state: Healthy, since: 8.3},
		}},
		{"consul: critical seen after the start proves the passing that follows", cfg(consul5), []step{
			{alloc: inPlace, snap: consulAt(1.5, ConsulPassing), now: 2, state: Pending, reason: "no result since the restart"},
			{snap: consulAt(3, ConsulCritical), now: 3, state: Pending, reason: "check http (consul) critical"},
			{snap: consulAt(6, ConsulPassing), now: 7, state: Healthy, since: 6},
		}},
		{"consul: critical seen within the margin of the start proves nothing", cfg(consul5), []step{
			{alloc: inPlace, snap: consulAt(2.0, ConsulCritical), now: 2.0, state: Pending, reason: "no result since the restart"},
			{snap: consulAt(2.2, ConsulPassing), now: 8, state: Pending, reason: "no result since the restart"},
			{now: 9.3, state: Healthy, since: 8.3},
		}},
		{"consul: a change seen after the start proves the status it changed to (Nomad 2.0's restart of a group service)", cfg(consul5), []step{
			{alloc: inPlace, snap: consulAt(0.4, ConsulCritical), now: 0.4, state: Pending, reason: "no result since the restart"},
			{snap: consulAt(6.3, ConsulPassing), now: 7.2, state: Pending, reason: "min healthy time: 900ms of 1s"},
			{now: 7.3, state: Healthy, since: 6.3},
		}},
		{"consul: a change across a source error is no proof", cfg(consul5), []step{
			{alloc: inPlace, snap: consulAt(0.4, ConsulCritical), now: 0.4, state: Pending, reason: "no result since the restart"},
			{snap: &Snapshot{Provider: ProviderConsul, At: at(3), Err: errConsulDn}, now: 3, state: Pending, reason: "Consul checks unreadable"},
			{snap: consulAt(6.3, ConsulPassing), now: 7.3, state: Pending, reason: "check http (consul): no result since the restart; next in about 1s"},
			{now: 9.3, state: Healthy, since: 8.3},
		}},
		{"consul: failures_before_critical stretches the bound", cfg(consul5x3), []step{
			{alloc: inPlace, snap: consulAt(1.5, ConsulPassing), now: 10, state: Pending, reason: "next in about 9s"},
			{now: 18.3, state: Pending, reason: "min healthy time: 0s of 1s"},
			{now: 19.3, state: Healthy, since: 18.3},
		}},
		{"consul: a replacement's passing counts at once", cfg(consul5), []step{
			{alloc: replacement, snap: consulAt(1.5, ConsulPassing), now: 2.5, state: Healthy, since: 1.5},
		}},
		{"consul: a replacement's check registered passing proves nothing", cfg(consulInitPassing), []step{
			{alloc: replacement, snap: consulAt(1.5, ConsulPassing), now: 3, state: Pending, reason: "no result since the restart"},
			{snap: consulAt(4, ConsulCritical), now: 4, state: Pending, reason: "critical"},
			{snap: consulAt(5, ConsulPassing), now: 6, state: Healthy, since: 5},
		}},
		{"consul: a warning seen after the start is proof, and passes with ignore_warnings", cfg(consulWarn5), []step{
			{alloc: inPlace, snap: snap(ProviderConsul, 1.5, cc("load", ConsulPassing, "")), now: 2, state: Pending, reason: "check load (consul): no result since the restart"},
			{snap: snap(ProviderConsul, 3, cc("load", ConsulWarning, "")), now: 4, state: Healthy, since: 3},
		}},
		{"consul: a check registered anew starts over", cfg(consul5), []step{
			{alloc: inPlace, snap: consulAt(3, ConsulCritical), now: 3, state: Pending, reason: "critical"},
			{snap: snap(ProviderConsul, 4), now: 4, state: Pending, reason: "check http (consul) not registered"},
			{snap: consulAt(5, ConsulPassing), now: 6, state: Pending, reason: "no result since the restart"},
		}},
		{"both providers: the later proof starts the stretch", cfg(nomad5, consul5), []step{
			{alloc: inPlace, snap: nomadAt(2.6, ncAt("http", NomadSuccess, 2.4)), now: 3, state: Pending, reason: "Consul checks not yet read"},
			{snap: consulAt(3, ConsulPassing), now: 8, state: Pending, reason: "check http (consul): no result since the restart"},
			{now: 9.3, state: Healthy, since: 8.3},
		}},
		{"a readiness check's old result does not wait for a fresh one", cfg(nomad5, nomadReady), []step{
			{alloc: inPlace, snap: nomadAt(2.6, ncAt("http", NomadSuccess, 2.4), func() Check {
				c := ncAt("ready", NomadFailure, 0.2)
				c.Mode = ModeReadiness
				return c
			}()), now: 3.6, state: Healthy, since: 2.6},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.cfg, tt.steps) })
	}
}

// TestGateBudgetView is the availability budget's use of the gate: one snapshot, no
// restart time, no min-healthy time. An allocation restarted long ago serves; one whose task
// just restarted does not, until its checks ran since.
func TestGateBudgetView(t *testing.T) {
	nomad5 := nomadHTTP
	nomad5.Interval = 5 * time.Second
	consul5 := consulHTTP
	consul5.Interval, consul5.Timeout = 5*time.Second, time.Second
	tests := []struct {
		name  string
		alloc *restart.Alloc
		snap  *Snapshot
		state State
	}{
		{"nomad, restarted long ago", restartedApp(-100, 3), snap(ProviderNomad, 0, ncAt("http", NomadSuccess, -3)), Healthy},
		{"nomad, just restarted", restartedApp(-0.5, 3), snap(ProviderNomad, 0, ncAt("http", NomadSuccess, -3)), Pending},
		{"consul, restarted long ago", restartedApp(-100, 3), snap(ProviderConsul, 0, cc("http", ConsulPassing, "")), Healthy},
		{"consul, just restarted", restartedApp(-2, 3), snap(ProviderConsul, 0, cc("http", ConsulPassing, "")), Pending},
		{"consul, never restarted", runningAlloc(map[string]float64{"app": -0.5}), snap(ProviderConsul, 0, cc("http", ConsulPassing, "")), Healthy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks := []CheckSpec{nomad5}
			if tt.snap.Provider == ProviderConsul {
				checks = []CheckSpec{consul5}
			}
			g := NewReadiness(Config{Mode: restart.HealthChecks, Tasks: []string{"app"}, Checks: checks})
			g.ObserveAlloc(tt.alloc)
			g.ObserveChecks(*tt.snap)
			if v := g.Evaluate(at(0)); v.State != tt.state {
				t.Fatalf("got %s %q, want %s", v.State, v.Reason, tt.state)
			}
		})
	}
}
