package engine

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// budgetEngine is env's engine with a short retry budget, so that the give-ups below come
// in a fraction of a second.
func (env *simEnv) budgetEngine(budget time.Duration) *Engine {
	return New(Config{Cluster: cluster.NewNomad(env.client), Store: env.store, Holder: "budget:1", Retry: cluster.RetryPolicy{MaxElapsed: budget},
		Health: HealthConfig{Clock: env.sim.Now, TimeScale: env.sim.TimeScale(), Consul: health.ConsulDialer{Config: health.ConsulConfig{Address: env.sim.ConsulAddr(), Wait: time.Second}}}})
}

// giveUps are the record's warnings of a retry budget spent.
func giveUps(rec *restart.Record) []restart.Event {
	var out []restart.Event
	for _, e := range rec.Events {
		if e.Type == restart.EventWarning && strings.HasPrefix(e.Message, "Nomad kept failing ") {
			out = append(out, e)
		}
	}
	return out
}

// TestSurgeScaleUnavailableEnds: Nomad answering every scale request with a passing failure
// (500 "No cluster leader") is retried within the engine's budget, then recorded as a
// warning and the restart fails with Nomad's text: the surge never waits silently for ever.
// Nothing was scaled or restarted.
func TestSurgeScaleUnavailableEnds(t *testing.T) {
	env := startSurgeSim(t, 1, "pass")
	rec := env.plan(t, "web", surgeSpec(restart.Spec{Surge: 1}))
	env.sim.SetFault(nomadsim.Fault{Path: "/v1/job/web/scale", Status: 500, Body: "No cluster leader"})
	env.e = env.budgetEngine(300 * time.Millisecond)
	final, dt := env.driveGate(t, rec)
	if final.Status != restart.StatusFailed || !strings.Contains(final.Reason, "No cluster leader") || !strings.Contains(final.Reason, "gave up after") {
		t.Fatalf("status %s %q, want failed naming Nomad's answer and the give-up\n%s", final.Status, final.Reason, dt.log.messages())
	}
	w := giveUps(final)
	if len(w) != 1 || !strings.Contains(w[0].Message, `Nomad kept failing the scale-up of group "web"`) || !strings.Contains(w[0].Message, "No cluster leader") {
		t.Fatalf("warnings %+v, want one naming the scale-up and Nomad's answer\n%s", w, dt.log.messages())
	}
	if final.Allocs[0].State != restart.AllocPending {
		t.Errorf("planned allocation %s, want untouched", final.Allocs[0].State)
	}
	if c := groupCount(t, env.client); c != 1 {
		t.Errorf("count %d, want 1", c)
	}
}

// TestRestartUnavailableEnds: an allocation whose restart Nomad keeps failing in a way that
// passes (500 "No cluster leader") fails once the engine's budget is spent, with a warning
// in the record before the failure, and -on-error fail ends the restart.
func TestRestartUnavailableEnds(t *testing.T) {
	env := startSim(t, false)
	env.register(t, "web", "service", map[string]int{"web": 1})
	rec := env.plan(t, "web", restart.Spec{Yes: true, OnError: restart.OnErrorFail})
	env.sim.SetFault(nomadsim.Fault{Path: "/v1/client/allocation/:id/restart", Status: 500, Body: "No cluster leader"})
	env.e = env.budgetEngine(300 * time.Millisecond)
	final, dt := env.driveGate(t, rec)
	if final.Status != restart.StatusFailed || final.Allocs[0].State != restart.AllocFailed || !strings.Contains(final.Allocs[0].Error, "No cluster leader") {
		t.Fatalf("status %s, allocation %s %q: want both failed with Nomad's answer\n%s", final.Status, final.Allocs[0].State, final.Allocs[0].Error, dt.log.messages())
	}
	w := giveUps(final)
	if len(w) != 1 || w[0].AllocID != final.Allocs[0].ID || !strings.Contains(w[0].Message, "Nomad kept failing the restart of allocation") {
		t.Fatalf("warnings %+v, want one of the allocation naming its restart\n%s", w, dt.log.messages())
	}
}
