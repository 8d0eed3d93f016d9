package engine

import (
	"context"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// budgetChecksLate is how long (Nomad's time) the checks of the jobs below fail after their
// task starts: a window in which one allocation restarted by hand fails its checks while
// the others pass. It must outlast the budget's wait of budgetChecksWait (real time,
// budgetChecksWait*gateScale of Nomad's) with room to spare.
const (
	budgetChecksLate = 60 * time.Second
	budgetChecksWait = time.Second
)

// TestBudgetCountsFailingChecks: a 4-allocation group one of whose allocations (not in the
// first batch) runs but fails its checks before the restart; with -max-unavailable 1 the
// first batch waits, saying which check fails, and at the deadline -on-error fail stops
// the restart with nothing restarted. One case per check provider.
func TestBudgetCountsFailingChecks(t *testing.T) {
	for _, provider := range []string{"nomad", "consul"} {
		t.Run(provider, func(t *testing.T) {
			env := startGateSim(t, "")
			script := "pass_after=" + budgetChecksLate.String()
			job := budgetE2EJob(provider, script)
			env.registerJob(t, job) // healthy once the checks pass, budgetChecksLate after start
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()

			spec := restart.Spec{Health: restart.HealthChecks, Yes: true, OnError: restart.OnErrorFail,
				MaxUnavailable: &restart.BatchSize{N: 1}, HealthyDeadline: budgetChecksWait, HealthyDeadlineGiven: true}
			p, err := env.e.Plan(ctx, Request{Job: "web", Spec: spec})
			if err != nil {
				t.Fatal(err)
			}
			// The last allocation in batch order restarts by hand: its checks fail again
			// for budgetChecksLate, while the others' pass.
			target := p.Record.Allocs[len(p.Record.Allocs)-1].ID
			a, _, err := env.client.Allocations().Info(target, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := env.client.Allocations().RestartAllTasks(a, nil); err != nil {
				t.Fatal(err)
			}
			waitChecks(ctx, t, env, provider, target)
			before := taskRestarts(t, env)

			rec := env.plan(t, "web", spec)
			if rec.Allocs[0].ID == target {
				t.Fatalf("the failing allocation is in the first batch: the test proves nothing")
			}
			final, dt := env.driveGate(t, rec)
			first := final.Allocs[0]
			if final.Status != restart.StatusFailed || first.State != restart.AllocFailed ||
				!strings.Contains(first.Error, "availability budget") || !strings.Contains(first.Error, "1 failing its health checks, allocation "+short(target)) {
				t.Fatalf("status %s (%s), first allocation %s %q\n%s", final.Status, final.Reason, first.State, first.Error, dt.log.messages())
			}
			if !strings.Contains(dt.log.messages(), "check ready-"+provider) {
				t.Errorf("no event names the failing check:\n%s", dt.log.messages())
			}
			after := taskRestarts(t, env)
			for id, n := range before {
				if after[id] != n {
					t.Errorf("allocation %s restarted while the budget was spent (%d restarts, then %d)", id, n, after[id])
				}
			}
		})
	}
}

// TestBudgetChecksPassingRestarts: the same job, every check passing, restarts normally.
func TestBudgetChecksPassingRestarts(t *testing.T) {
	env := startGateSim(t, "")
	env.registerJob(t, budgetE2EJob("nomad", "pass"))
	// The checks' first results may predate the tasks' start (the deployment judged
	// health by the script): the restart begins once every check reports passing.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	waitChecks(ctx, t, env, "nomad", "")
	rec := env.plan(t, "web", restart.Spec{Health: restart.HealthChecks, Yes: true, OnError: restart.OnErrorFail,
		MaxUnavailable: &restart.BatchSize{N: 1}})
	final, dt := env.driveGate(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
	}
	env.checkOnce(t, final)
	if strings.Contains(dt.log.messages(), "availability budget") {
		t.Errorf("a batch waited for the budget:\n%s", dt.log.messages())
	}
}

// budgetE2EJob is checkedJob with four allocations and one provider's check scripted.
func budgetE2EJob(provider, script string) *api.Job {
	nomadScript, consulScript := script, ""
	if provider == "consul" {
		nomadScript, consulScript = "", script
	}
	return checkedJob("web", 4, nomadScript, consulScript, 100*time.Millisecond, 10*time.Minute)
}

// waitChecks waits until the failing allocation's check fails ("": none) and every other
// allocation's passes, as the provider reports them.
func waitChecks(ctx context.Context, t *testing.T, env *simEnv, provider, failing string) {
	t.Helper()
	consul, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(env.sim.ConsulAddr(), "http://")})
	if err != nil {
		t.Fatal(err)
	}
	for {
		stubs, _, err := env.client.Jobs().Allocations("web", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok := len(stubs) == 4
		for _, s := range stubs {
			if s.ClientStatus != "running" || s.TaskStates["app"] == nil || s.TaskStates["app"].State != "running" {
				ok = false
				continue
			}
			status := ""
			if provider == "nomad" {
				checks, err := env.client.Allocations().Checks(s.ID, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range checks {
					status = c.Status
				}
			} else {
				checks, _, err := consul.Health().Checks("web-api", nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range checks {
					if strings.HasPrefix(c.ServiceID, health.ServicePrefix(s.ID)) {
						status = c.Status
					}
				}
			}
			want := map[bool]map[string]string{true: {"nomad": "failure", "consul": "critical"},
				false: {"nomad": "success", "consul": "passing"}}[s.ID == failing][provider]
			ok = ok && status == want
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("checks never settled with only %q failing", failing)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// taskRestarts is the restart count of each allocation's task.
func taskRestarts(t *testing.T, env *simEnv) map[string]uint64 {
	t.Helper()
	stubs, _, err := env.client.Jobs().Allocations("web", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, s := range stubs {
		if ts := s.TaskStates["app"]; ts != nil {
			out[s.ID] = ts.Restarts
		}
	}
	return out
}
