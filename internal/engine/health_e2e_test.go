package engine

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// gateScale runs nomadsim fast enough for checks that pass seconds after a start.
const gateScale = 20

// startGateSim is an engine on nomadsim whose gates read Nomad's clock from the simulation
// and Consul from the simulation's health API (or consulAddr when given).
func startGateSim(t testing.TB, consulAddr string) *simEnv {
	t.Helper()
	return startGateSimScale(t, consulAddr, gateScale)
}

// startGateSimScale is startGateSim at another time scale: a slower one where a test needs
// every change of a check to be seen (a flap).
func startGateSimScale(t testing.TB, consulAddr string, scale float64) *simEnv {
	t.Helper()
	sim, client := simtest.StartWithClient(t, nomadsim.Options{TimeScale: scale, Seed: 3})
	s, err := store.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if consulAddr == "" {
		consulAddr = sim.ConsulAddr()
	}
	e := New(Config{Cluster: cluster.NewNomad(client), Store: s, Holder: "gate:1", Health: HealthConfig{
		Clock: sim.Now, TimeScale: scale,
		Consul: health.ConsulConfig{Address: consulAddr, Wait: time.Second},
	}})
	return &simEnv{sim: sim, client: client, e: e, store: s}
}

// checkedJob is a service job of count allocations whose group has a Nomad-native service
// (check "ready-nomad") and whose task has a Consul service (check "ready-consul"), scripted
// as given ("" leaves a provider out); the update block sets the gate's times.
func checkedJob(id string, count int, nomadScript, consulScript string, minHealthy, deadline time.Duration) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.Datacenters = []string{"dc1", "dc2"}
	task := api.NewTask("app", "raw_exec").SetConfig("command", "/bin/sleep")
	task.Resources = &api.Resources{CPU: ptr(10), MemoryMB: ptr(16)}
	tg := api.NewTaskGroup("web", count).AddTask(task)
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}, {Label: "admin"}}}}
	tg.Meta = map[string]string{}
	if consulScript != "" {
		task.Services = []*api.Service{{Name: id + "-api", PortLabel: "http", Provider: "consul",
			Checks: []api.ServiceCheck{{Name: "ready-consul", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
		tg.Meta["nomadsim.check.ready-consul"] = consulScript
	}
	if nomadScript != "" {
		tg.Services = []*api.Service{{Name: id + "-admin", PortLabel: "admin", Provider: "nomad",
			Checks: []api.ServiceCheck{{Name: "ready-nomad", Type: "tcp", Interval: time.Second, Timeout: time.Second}}}}
		tg.Meta["nomadsim.check.ready-nomad"] = nomadScript
	}
	tg.Update = &api.UpdateStrategy{MinHealthyTime: ptr(minHealthy), HealthyDeadline: ptr(deadline)}
	j.TaskGroups = []*api.TaskGroup{tg}
	return j
}

// doneTimes records, on the simulation's clock, when each allocation was recorded done.
type doneTimes struct {
	mu  sync.Mutex
	at  map[string]time.Time
	log eventLog
	now func() time.Time
}

func (d *doneTimes) sink(e restart.Event) {
	d.log.sink(e)
	if e.Type == restart.EventAllocDone {
		d.mu.Lock()
		d.at[e.AllocID] = d.now()
		d.mu.Unlock()
	}
}

func (env *simEnv) driveGate(t *testing.T, rec *restart.Record) (*restart.Record, *doneTimes) {
	t.Helper()
	dt := &doneTimes{at: map[string]time.Time{}, now: env.sim.Now}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	final, err := env.e.Drive(ctx, rec.Namespace, rec.ID, dt.sink)
	if err != nil {
		t.Fatalf("Drive: %v\n%s", err, dt.log.messages())
	}
	return final, dt
}

// TestGateWaitsForLateChecks: checks of both providers that pass 5s (Nomad's time) after
// the task starts, and 1s of min-healthy time: no allocation may count as done before 6s
// after its task started again, and every allocation must be restarted exactly once.
func TestGateWaitsForLateChecks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		nomad, consul string
		reschedule    bool
	}{
		{"mixed providers in place", "pass_after=5s", "pass_after=5s", false},
		{"nomad only in place", "pass_after=5s", "", false},
		{"consul only, reschedule", "", "pass_after=5s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startGateSim(t, "")
			env.registerJob(t, checkedJob("web", 3, tc.nomad, tc.consul, time.Second, time.Minute))
			rec := env.plan(t, "web", restart.Spec{Health: restart.HealthAuto, Yes: true, OnError: restart.OnErrorFail, Reschedule: tc.reschedule})
			if rec.Spec.Health != restart.HealthChecks {
				t.Fatalf("auto resolved to %q, want checks", rec.Spec.Health)
			}
			if g := rec.Spec.GroupHealth["web"]; g.MinHealthyTime != time.Second || g.HealthyDeadline != time.Minute {
				t.Fatalf("group times %+v, want the update block's 1s and 1m", g)
			}
			final, dt := env.driveGate(t, rec)
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
			}
			env.checkOnce(t, final)
			for _, p := range final.Allocs {
				id := p.ID
				if p.Replacement != "" {
					id = p.Replacement
				}
				a, _, err := env.client.Allocations().Info(id, nil)
				if err != nil {
					t.Fatal(err)
				}
				started := a.TaskStates["app"].StartedAt
				done, ok := dt.at[p.ID]
				if !ok {
					t.Fatalf("no done event for %s", p.ID)
				}
				if got := done.Sub(started); got < 6*time.Second {
					t.Errorf("allocation %s done %s after its task started; the checks pass after 5s and must then hold 1s", p.ID, got)
				}
			}
			if !strings.Contains(dt.log.messages(), "ready-") {
				t.Errorf("no event says which check was awaited:\n%s", dt.log.messages())
			}
		})
	}
}

// TestGateFailingAndFlappingChecks: a check that never passes, or flaps faster than the
// min-healthy time, fails the allocation at the healthy deadline with the reason; with
// -on-error fail nothing else is touched, with ask the restart asks.
func TestGateFailingAndFlappingChecks(t *testing.T) {
	for _, tc := range []struct {
		name, nomad, consul string
		onError             restart.OnError
		want                string
	}{
		{"nomad check fails, on-error fail", "fail", "pass", restart.OnErrorFail, "ready-nomad"},
		{"consul check flaps, on-error fail", "pass", "flap=1s", restart.OnErrorFail, "not healthy within the healthy deadline"},
		{"consul check fails, on-error ask", "", "fail", restart.OnErrorAsk, "ready-consul"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A flap of 1s is 200ms of real time at this scale: every change is seen.
			env := startGateSimScale(t, "", 5)
			env.registerJob(t, checkedJob("web", 2, tc.nomad, "pass", 3*time.Second, 8*time.Second))
			// Registered passing, then the script changes: the restart must see the new
			// processes' results, not the old ones'.
			if tc.nomad != "" {
				env.sim.ScriptCheck("default", "web", "ready-nomad", tc.nomad)
			}
			env.sim.ScriptCheck("default", "web", "ready-consul", tc.consul)
			rec := env.plan(t, "web", restart.Spec{Health: restart.HealthChecks, OnError: tc.onError})
			if tc.onError == restart.OnErrorAsk {
				wait, cancel := driveAsync(env.e, rec)
				defer cancel()
				r := waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
				if r.Allocs[0].State != restart.AllocFailed || !strings.Contains(r.Allocs[0].Error, tc.want) {
					t.Fatalf("first allocation %s %q, want failed naming %s", r.Allocs[0].State, r.Allocs[0].Error, tc.want)
				}
				if r.Allocs[1].State != restart.AllocPending {
					t.Fatalf("second allocation %s before the answer", r.Allocs[1].State)
				}
				if _, err := env.e.Cancel(context.Background(), rec.Namespace, rec.ID, "test"); err != nil {
					t.Fatal(err)
				}
				final, err := wait()
				if err != nil || final.Status != restart.StatusCanceled {
					t.Fatalf("after cancel: %v, %v", final, err)
				}
				return
			}
			final, dt := env.driveGate(t, rec)
			if final.Status != restart.StatusFailed {
				t.Fatalf("status %s, want failed\n%s", final.Status, dt.log.messages())
			}
			if a := final.Allocs[0]; a.State != restart.AllocFailed || !strings.Contains(a.Error, tc.want) {
				t.Fatalf("first allocation %s %q, want failed naming %q", a.State, a.Error, tc.want)
			}
			if a := final.Allocs[1]; a.State != restart.AllocPending {
				t.Fatalf("second allocation %s, want untouched under -on-error fail", a.State)
			}
		})
	}
}

// TestGateRefusesUnreachableConsul: a job with Consul checks and a Consul that refuses
// connections is refused at planning (nothing changes), unless -health running.
func TestGateRefusesUnreachableConsul(t *testing.T) {
	env := startGateSim(t, "http://127.0.0.1:1")
	env.registerJob(t, checkedJob("web", 1, "", "pass", time.Second, time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := env.e.Plan(ctx, Request{Job: "web", Spec: restart.Spec{Health: restart.HealthAuto}})
	if err == nil || !strings.Contains(err.Error(), "Consul") || !strings.Contains(err.Error(), "-health running") {
		t.Fatalf("Plan: %v, want a refusal naming Consul and -health running", err)
	}
	p, err := env.e.Plan(ctx, Request{Job: "web", Spec: restart.Spec{Health: restart.HealthRunning}})
	if err != nil || p.Record.Spec.Health != restart.HealthRunning {
		t.Fatalf("Plan with -health running: %v", err)
	}
}

// TestGateAutoWithoutChecks: -health auto on a job without checks waits for running only,
// within the update block's healthy deadline; so does -health running, unless
// -healthy-deadline is given.
func TestGateAutoWithoutChecks(t *testing.T) {
	env := startGateSim(t, "http://127.0.0.1:1")
	env.registerJob(t, checkedJob("web", 1, "", "", time.Second, time.Minute))
	fromBlock := map[string]restart.GroupHealth{"web": {HealthyDeadline: time.Minute}}
	for _, tc := range []struct {
		name string
		spec restart.Spec
		want map[string]restart.GroupHealth
	}{
		{"auto", restart.Spec{Health: restart.HealthAuto, Yes: true}, fromBlock},
		{"running", restart.Spec{Health: restart.HealthRunning, Yes: true}, fromBlock},
		{"running with -healthy-deadline", restart.Spec{Health: restart.HealthRunning, Yes: true,
			HealthyDeadline: 2 * time.Minute, HealthyDeadlineGiven: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			p, err := env.e.Plan(ctx, Request{Job: "web", Spec: tc.spec})
			if err != nil {
				t.Fatal(err)
			}
			rec := p.Record
			if rec.Spec.Health != restart.HealthRunning || !maps.Equal(rec.Spec.GroupHealth, tc.want) {
				t.Fatalf("resolved to %q %v, want running %v", rec.Spec.Health, rec.Spec.GroupHealth, tc.want)
			}
			if _, deadline := rec.Spec.HealthTimes("web"); deadline != max(time.Minute, tc.spec.HealthyDeadline) {
				t.Fatalf("healthy deadline %s", deadline)
			}
		})
	}
}
