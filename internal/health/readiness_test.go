package health

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// t0 is when the restart took effect, on Nomad's clock.
var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

func runningAlloc(started map[string]float64) *restart.Alloc {
	a := &restart.Alloc{ID: "a1", Group: "web", DesiredStatus: restart.DesiredRun, ClientStatus: restart.ClientRunning,
		Tasks: map[string]restart.TaskState{}}
	for n, s := range started {
		a.Tasks[n] = restart.TaskState{State: restart.TaskRunning, StartedAt: at(s)}
	}
	return a
}

var (
	nomadHTTP   = CheckSpec{Provider: ProviderNomad, Service: "web", Task: "app", Name: "http", OnUpdate: OnUpdateRequireHealthy}
	nomadReady  = CheckSpec{Provider: ProviderNomad, Service: "web", Task: "app", Name: "ready", OnUpdate: OnUpdateIgnore}
	consulHTTP  = CheckSpec{Provider: ProviderConsul, Service: "api", Task: "app", Name: "http", OnUpdate: OnUpdateRequireHealthy}
	consulWarn  = CheckSpec{Provider: ProviderConsul, Service: "api", Task: "app", Name: "load", OnUpdate: OnUpdateIgnoreWarnings}
	consulIgn   = CheckSpec{Provider: ProviderConsul, Service: "api", Task: "app", Name: "cache", OnUpdate: OnUpdateIgnore}
	errConsulDn = errors.New("Consul at http://127.0.0.1:8500 refused the connection")
)

// restartedApp is an allocation whose task app restarted in place (restarts times), the
// last time at start.
func restartedApp(start float64, restarts uint64) *restart.Alloc {
	a := runningAlloc(map[string]float64{"app": start})
	ts := a.Tasks["app"]
	ts.Restarts = restarts
	a.Tasks["app"] = ts
	return a
}

// ncAt is a Nomad check result of a run that began at sec, stamped to the whole second as
// Nomad stamps it.
func ncAt(name, status string, sec float64) Check {
	c := nc(name, status, ModeHealthiness, "")
	c.Time = at(sec).Truncate(time.Second)
	return c
}

func nc(name, status, mode, out string) Check {
	return Check{Provider: ProviderNomad, Name: name, Service: "web", Task: "app", Status: status, Mode: mode, Output: out}
}

func cc(name, status, out string) Check {
	return Check{Provider: ProviderConsul, Name: name, Service: "api", Task: "app", Status: status, Output: out}
}

// step feeds the gate one observation (an allocation, a snapshot, or neither) and then
// asks for a verdict at a time.
type step struct {
	alloc  *restart.Alloc
	snap   *Snapshot
	now    float64
	state  State
	reason string // substring of Reason
	since  float64
}

func snap(p Provider, sec float64, checks ...Check) *Snapshot {
	return &Snapshot{Provider: p, At: at(sec), Checks: checks}
}

func TestGate(t *testing.T) {
	cfg := func(mode restart.HealthMode, checks ...CheckSpec) Config {
		return Config{Mode: mode, Tasks: []string{"app"}, Checks: checks, Since: t0, MinHealthy: 10 * time.Second, Deadline: time.Minute}
	}
	app := func(s float64) *restart.Alloc { return runningAlloc(map[string]float64{"app": s}) }
	tests := []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"nothing observed is never healthy", cfg(restart.HealthRunning), []step{
			{now: 30, state: Pending, reason: "allocation not yet read"},
		}},
		{"running: healthy after min healthy time from the task's start", cfg(restart.HealthRunning), []step{
			{alloc: app(2), now: 5, state: Pending, reason: "min healthy time: 3s of 10s"},
			{now: 11.9, state: Pending, reason: "min healthy time: 9.9s of 10s"},
			{now: 12, state: Healthy, since: 2},
		}},
		{"a task that started before the restart is not restarted yet", cfg(restart.HealthRunning), []step{
			{alloc: app(-100), now: 5, state: Pending, reason: "task app not yet restarted"},
		}},
		{"a pending task says so with its last event", cfg(restart.HealthRunning), []step{
			{alloc: func() *restart.Alloc {
				a := app(0)
				a.Tasks["app"] = restart.TaskState{State: restart.TaskPending, Events: []restart.TaskEvent{{Type: restart.TaskEventRestarting, Message: "Task restarting in 15s"}}}
				return a
			}(), now: 5, state: Pending, reason: "task app not yet running (Restarting: Task restarting in 15s)"},
		}},
		{"a failed task fails at once", cfg(restart.HealthRunning), []step{
			{alloc: func() *restart.Alloc {
				a := app(0)
				a.Tasks["app"] = restart.TaskState{State: restart.TaskDead, Failed: true, Events: []restart.TaskEvent{{Type: restart.TaskEventNotRestarting, Message: "Exceeded allowed attempts 2 in interval 30m0s"}}}
				return a
			}(), now: 5, state: Failed, reason: "task app failed (Not Restarting: Exceeded allowed attempts"},
		}},
		{"a stopped allocation fails", cfg(restart.HealthRunning), []step{
			{alloc: func() *restart.Alloc { a := app(1); a.DesiredStatus = restart.DesiredStop; return a }(), now: 5, state: Failed, reason: "desired status stop"},
		}},
		{"task states missing from a stub", cfg(restart.HealthRunning), []step{
			{alloc: &restart.Alloc{DesiredStatus: "run", ClientStatus: "running"}, now: 50, state: Pending, reason: "task states not yet read"},
		}},
		{"a task restarting again restarts the timer", cfg(restart.HealthRunning), []step{
			{alloc: app(1), now: 9, state: Pending, reason: "8s of 10s"},
			{alloc: app(8), now: 12, state: Pending, reason: "4s of 10s"},
			{now: 18, state: Healthy, since: 8},
		}},
		{"an untargeted sidecar still starting holds health back", cfg(restart.HealthRunning), []step{
			{alloc: func() *restart.Alloc {
				a := app(1)
				a.Tasks["proxy"] = restart.TaskState{State: restart.TaskPending}
				return a
			}(), now: 20, state: Pending, reason: "task proxy not yet running"},
		}},
		{"deadline passes with the last reason", cfg(restart.HealthRunning), []step{
			{alloc: app(-5), now: 60, state: Failed, reason: "not healthy within the healthy deadline of 1m0s: task app not yet restarted"},
		}},
		{"nomad check passes late: timer from the first passing read", cfg(restart.HealthChecks, nomadHTTP), []step{
			{alloc: app(1), now: 2, state: Pending, reason: "Nomad checks not yet read"},
			{snap: snap(ProviderNomad, 3, nc("http", NomadPending, ModeHealthiness, "")), now: 3, state: Pending, reason: "check http (nomad) pending"},
			{snap: snap(ProviderNomad, 5, nc("http", NomadFailure, ModeHealthiness, "nomad: dial tcp: connection refused\nmore")), now: 5, state: Pending,
				reason: "check http (nomad) failure: nomad: dial tcp: connection refused"},
			{snap: snap(ProviderNomad, 7, nc("http", NomadSuccess, ModeHealthiness, "ok")), now: 16, state: Pending, reason: "min healthy time: 9s of 10s"},
			{snap: snap(ProviderNomad, 17, nc("http", NomadSuccess, ModeHealthiness, "ok")), now: 17, state: Healthy, since: 7},
		}},
		{"a check that fails again restarts the min-healthy timer", cfg(restart.HealthChecks, nomadHTTP), []step{
			{alloc: app(1), snap: snap(ProviderNomad, 2, nc("http", NomadSuccess, "", "")), now: 8, state: Pending, reason: "6s of 10s"},
			{snap: snap(ProviderNomad, 9, nc("http", NomadFailure, "", "boom")), now: 9, state: Pending, reason: "failure: boom"},
			{snap: snap(ProviderNomad, 10, nc("http", NomadSuccess, "", "")), now: 13, state: Pending, reason: "3s of 10s"},
			{now: 20, state: Healthy, since: 10},
		}},
		{"a failing readiness check does not count, a pending one does", cfg(restart.HealthChecks, nomadHTTP, nomadReady), []step{
			{alloc: app(1), snap: snap(ProviderNomad, 2, nc("http", NomadSuccess, ModeHealthiness, ""), nc("ready", NomadPending, ModeReadiness, "")),
				now: 20, state: Pending, reason: "check ready (nomad) pending"},
			{snap: snap(ProviderNomad, 3, nc("http", NomadSuccess, ModeHealthiness, ""), nc("ready", NomadFailure, ModeReadiness, "")), now: 13, state: Healthy, since: 3},
		}},
		{"a missing check is not registered", cfg(restart.HealthChecks, nomadHTTP, nomadReady), []step{
			{alloc: app(1), snap: snap(ProviderNomad, 2, nc("http", NomadSuccess, "", "")), now: 30, state: Pending, reason: "check ready (nomad) not registered"},
		}},
		{"consul critical with its output", cfg(restart.HealthChecks, consulHTTP), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 2, cc("http", ConsulCritical, "Get \"http://10.0.0.1:8080/\": dial tcp: connection refused")), now: 3, state: Pending,
				reason: `check http (consul) critical: Get "http://10.0.0.1:8080/": dial tcp: connection refused`},
		}},
		{"consul warning passes with ignore_warnings, critical with ignore", cfg(restart.HealthChecks, consulHTTP, consulWarn, consulIgn), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 2, cc("http", ConsulPassing, ""), cc("load", ConsulWarning, ""), cc("cache", ConsulCritical, "")), now: 12, state: Healthy, since: 2},
		}},
		{"consul warning blocks without ignore_warnings", cfg(restart.HealthChecks, consulHTTP), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 2, cc("http", ConsulWarning, "slow")), now: 30, state: Pending, reason: "check http (consul) warning: slow"},
		}},
		{"consul critical blocks with ignore_warnings", cfg(restart.HealthChecks, consulWarn), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 2, cc("load", ConsulCritical, "")), now: 30, state: Pending, reason: "check load (consul) critical"},
		}},
		{"an unknown consul status (maintenance) blocks", cfg(restart.HealthChecks, consulHTTP), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 2, cc("http", "maintenance", "")), now: 30, state: Pending, reason: "check http (consul) maintenance"},
		}},
		{"an extra check without a definition counts as require_healthy", cfg(restart.HealthChecks, consulHTTP), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 2, cc("http", ConsulPassing, ""), cc("Connect Sidecar Listening", ConsulCritical, "")), now: 30, state: Pending, reason: "Connect Sidecar Listening"},
		}},
		{"mixed providers: both must pass, the later starts the stretch", cfg(restart.HealthChecks, nomadHTTP, consulHTTP), []step{
			{alloc: app(1), snap: snap(ProviderNomad, 2, nc("http", NomadSuccess, "", "")), now: 20, state: Pending, reason: "Consul checks not yet read"},
			{snap: snap(ProviderConsul, 6, cc("http", ConsulPassing, "")), now: 15, state: Pending, reason: "9s of 10s"},
			{now: 16, state: Healthy, since: 6},
		}},
		{"a source error is missing data", cfg(restart.HealthChecks, consulHTTP), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 2, cc("http", ConsulPassing, "")), now: 5, state: Pending, reason: "3s of 10s"},
			{snap: &Snapshot{Provider: ProviderConsul, At: at(6), Err: errConsulDn}, now: 20, state: Pending, reason: "Consul checks unreadable: Consul at http://127.0.0.1:8500 refused"},
			{snap: snap(ProviderConsul, 21, cc("http", ConsulPassing, "")), now: 25, state: Pending, reason: "4s of 10s"},
		}},
		{"check results from the old process do not count after a task restart", cfg(restart.HealthChecks, nomadHTTP), []step{
			{alloc: app(1), snap: snap(ProviderNomad, 2, nc("http", NomadSuccess, "", "")), now: 4, state: Pending, reason: "2s of 10s"},
			{alloc: restartedApp(5, 1), now: 16, state: Pending, reason: "check http (nomad): no result since the restart"},
			{snap: snap(ProviderNomad, 6, ncAt("http", NomadSuccess, 6)), now: 15, state: Pending, reason: "9s of 10s"},
			{now: 16, state: Healthy, since: 6},
		}},
		{"snapshots from before the restart and out of order are ignored", cfg(restart.HealthChecks, nomadHTTP), []step{
			{alloc: app(1), snap: snap(ProviderNomad, -1, nc("http", NomadSuccess, "", "")), now: 20, state: Pending, reason: "Nomad checks not yet read"},
			{snap: snap(ProviderNomad, 5, nc("http", NomadFailure, "", "")), now: 5, state: Pending, reason: "failure"},
			{snap: snap(ProviderNomad, 4, nc("http", NomadSuccess, "", "")), now: 6, state: Pending, reason: "failure"},
		}},
		{"checks are ignored in running mode", cfg(restart.HealthRunning, nomadHTTP), []step{
			{alloc: app(1), snap: snap(ProviderNomad, 2, nc("http", NomadFailure, "", "")), now: 11, state: Healthy, since: 1},
		}},
		{"checks deadline keeps the failing check as reason", cfg(restart.HealthChecks, consulHTTP), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 2, cc("http", ConsulCritical, "refused")), now: 60, state: Failed,
				reason: "not healthy within the healthy deadline of 1m0s: check http (consul) critical: refused"},
		}},
		{"a gate taken up long after the start gives a full period", func() Config {
			c := cfg(restart.HealthChecks, consulHTTP)
			c.DeadlineFrom = at(200)
			return c
		}(), []step{
			{alloc: app(1), snap: snap(ProviderConsul, 200, cc("http", ConsulPassing, "")), now: 205, state: Pending, reason: "min healthy time: 5s of 10s"},
			{now: 210, state: Healthy, since: 200},
		}},
		{"healthy is not undone by the deadline", cfg(restart.HealthRunning), []step{
			{alloc: app(1), now: 100, state: Healthy, since: 1},
		}},
		{"none is healthy at once", cfg(restart.HealthNone), []step{
			{now: 0, state: Healthy, since: 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { runSteps(t, tt.cfg, tt.steps) })
	}
}

// runSteps feeds a new gate of cfg each step's observations and checks its verdict.
func runSteps(t *testing.T, cfg Config, steps []step) {
	t.Helper()
	g := NewReadiness(cfg)
	for i, s := range steps {
		if s.alloc != nil {
			g.ObserveAlloc(s.alloc)
		}
		if s.snap != nil {
			g.ObserveChecks(*s.snap)
		}
		v := g.Evaluate(at(s.now))
		if v.State != s.state || !strings.Contains(v.Reason, s.reason) {
			t.Fatalf("step %d at %gs: got %s %q (waiting %q), want %s containing %q", i, s.now, v.State, v.Reason, v.Waiting, s.state, s.reason)
		}
		if s.state == Healthy && !v.Since.Equal(at(s.since)) {
			t.Fatalf("step %d: healthy since %s, want %s", i, v.Since.Sub(t0), at(s.since).Sub(t0))
		}
		if s.state != Healthy && (len(v.Waiting) == 0 || v.Waiting[0] != v.Reason) {
			t.Fatalf("step %d: Waiting %q does not start with Reason %q", i, v.Waiting, v.Reason)
		}
	}
}

func TestGateWaitingListsEverything(t *testing.T) {
	g := NewReadiness(Config{Mode: restart.HealthChecks, Checks: []CheckSpec{consulHTTP, consulWarn}, Since: t0, MinHealthy: time.Second})
	g.ObserveAlloc(runningAlloc(map[string]float64{"app": 1}))
	g.ObserveChecks(*snap(ProviderConsul, 2, cc("http", ConsulCritical, "a"), cc("load", ConsulCritical, "b")))
	v := g.Evaluate(at(3))
	want := []string{"check http (consul) critical: a", "check load (consul) critical: b"}
	if strings.Join(v.Waiting, "|") != strings.Join(want, "|") {
		t.Fatalf("waiting %q, want %q", v.Waiting, want)
	}
	if got := g.Providers(); len(got) != 1 || got[0] != ProviderConsul {
		t.Fatalf("providers %v, want [consul]", got)
	}
}

func TestEvaluateMatchesUnresolvedNamesByService(t *testing.T) {
	hostCheck := CheckSpec{Provider: ProviderConsul, Service: "api", Name: "node ${attr.unique.hostname}", OnUpdate: OnUpdateIgnoreWarnings}
	specs := []CheckSpec{consulHTTP, hostCheck}
	tests := []struct {
		name     string
		observed []Check
		ok       bool
		reasons  string
	}{
		{"the leftover check takes the unresolved name and its on_update", []Check{cc("http", ConsulPassing, ""), cc("node n1", ConsulWarning, "")}, true, ""},
		{"an exact name is not taken by the unresolved one", []Check{cc("http", ConsulCritical, "x")}, false,
			"check node ${attr.unique.hostname} (consul) not registered|check http (consul) critical: x"},
		{"nothing registered", nil, false, "check http (consul) not registered|check node ${attr.unique.hostname} (consul) not registered"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checks, reasons := match(ProviderConsul, specs, tt.observed)
			ok := len(reasons) == 0
			for _, c := range checks {
				if !c.ok {
					ok = false
					reasons = append(reasons, c.why)
				}
			}
			if ok != tt.ok || strings.Join(reasons, "|") != tt.reasons {
				t.Fatalf("got %v %q, want %v %q", ok, reasons, tt.ok, tt.reasons)
			}
		})
	}
}

func TestSourcesRefuseWhatIsMissing(t *testing.T) {
	g := NewReadiness(Config{Mode: restart.HealthChecks, Checks: []CheckSpec{consulHTTP}, Since: t0})
	err := Sources{}.Watch(context.Background(), g, "0123456789")
	if err == nil || err.Error() != "allocation 01234567 has Consul service checks but no Consul address is set: set -consul-address or CONSUL_HTTP_ADDR, or choose -health running" {
		t.Fatalf("watch: %v", err)
	}
	g = NewReadiness(Config{Mode: restart.HealthRunning, Checks: []CheckSpec{consulHTTP}, Since: t0})
	if err := (Sources{}).Watch(context.Background(), g, "0123456789"); err != nil {
		t.Fatalf("running mode needs no source: %v", err)
	}
}

// BenchmarkGate measures one observation and one verdict for an allocation with 20
// checks of each provider, the work the engine does per allocation in flight per change.
func BenchmarkGate(b *testing.B) {
	var specs []CheckSpec
	var nomad, consul []Check
	for i := range 20 {
		name := fmt.Sprintf("c%d", i)
		specs = append(specs,
			CheckSpec{Provider: ProviderNomad, Service: "web", Name: name, OnUpdate: OnUpdateRequireHealthy},
			CheckSpec{Provider: ProviderConsul, Service: "api", Name: name, OnUpdate: OnUpdateIgnoreWarnings})
		nomad = append(nomad, nc(name, NomadSuccess, ModeHealthiness, ""))
		consul = append(consul, cc(name, ConsulWarning, ""))
	}
	g := NewReadiness(Config{Mode: restart.HealthChecks, Checks: specs, Since: t0, MinHealthy: 10 * time.Second, Deadline: time.Hour})
	g.ObserveAlloc(runningAlloc(map[string]float64{"app": 1, "proxy": 1}))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		now := t0.Add(time.Duration(i) * time.Millisecond)
		if i%2 == 0 {
			g.ObserveChecks(Snapshot{Provider: ProviderNomad, At: now, Checks: nomad})
		} else {
			g.ObserveChecks(Snapshot{Provider: ProviderConsul, At: now, Checks: consul})
		}
		if v := g.Evaluate(now); v.State == Failed {
			b.Fatalf("verdict %+v", v)
		}
	}
}
