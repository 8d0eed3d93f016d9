package conformance

import (
	"os"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"
)

// consulFor is the Consul that the target registers its services in: the sim's own, or, for
// a real agent, the one CONSUL_CONFORMANCE_ADDR names (the agent must be configured with
// it); nil with a reason to skip when there is none.
func consulFor(t *testing.T, tg *target) *consulapi.Client {
	t.Helper()
	addr := os.Getenv(envConsulAddr)
	if tg.sim != nil {
		addr = tg.sim.ConsulAddr()
	}
	if addr == "" {
		t.Skip(envConsulAddr + " not set: no Consul of the real agent's to check this case against")
	}
	cfg := consulapi.DefaultConfig()
	cfg.Address = addr
	c, err := consulapi.NewClient(cfg)
	if err != nil {
		t.Fatalf("consul client for %s: %v", addr, err)
	}
	return c
}

// TestConsulCheckOnRestart: on an in-place restart Nomad deregisters a group's services and
// registers them anew before it stops the tasks, so Consul shows the instance's check
// critical (or the instance gone) until the check runs again against the new process; it
// never keeps the old process's "passing" across the restart (measured on Nomad 2.0 with
// Consul 1.20: critical 0.06 s after the restart call, passing again at the check's first
// run, 6.3 s later with a 5 s interval and a 4 s warm-up). A gate reads what follows a
// status change as fresh.
func TestConsulCheckOnRestart(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		consul := consulFor(t, tg)
		const every = 5 * time.Second
		id := tg.id("consul-restart")
		service := id + "-svc"
		job := servedCheckJob(id, service, every)
		job.TaskGroups[0].Services[0].Provider = "consul"
		tg.register(t, job)
		stub := tg.waitRunning(t, id, 1)[0]
		ctx := tg.ctx(t)
		status := func() string {
			t.Helper()
			checks, _, err := consul.Health().Checks(service, (&consulapi.QueryOptions{}).WithContext(ctx))
			if err != nil {
				t.Fatalf("consul checks of %s: %v", service, err)
			}
			for _, c := range checks {
				if strings.Contains(c.ServiceID, stub.ID) {
					return c.Status
				}
			}
			return "absent"
		}
		for status() != "passing" {
			if ctx.Err() != nil {
				t.Fatalf("the instance of allocation %s never passed its Consul check within %v", stub.ID, tg.patience)
			}
			time.Sleep(50 * time.Millisecond)
		}
		alloc, _, err := tg.api.Allocations().Info(stub.ID, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		restarted := tg.now()
		if err := tg.api.Allocations().Restart(alloc, "", (&api.QueryOptions{}).WithContext(ctx)); err != nil {
			t.Fatalf("restart allocation %s: %v", alloc.ID, err)
		}
		// Registered anew: not passing within a moment of the restart.
		var seen []string
		for st := status(); st == "passing"; st = status() {
			if tg.now().Sub(restarted) > 2*time.Second {
				t.Fatalf("the check still passed 2 s after the restart: the old process's status was kept")
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Then passing again, at the check's first run against the new process.
		var passedAt time.Time
		for st := status(); ; st = status() {
			if st == "passing" {
				passedAt = tg.now()
				break
			}
			if len(seen) == 0 || seen[len(seen)-1] != st {
				seen = append(seen, st)
			}
			if tg.now().Sub(restarted) > every+5*time.Second {
				t.Fatalf("no passing status within an interval of the restart (seen %v)", seen)
			}
			time.Sleep(20 * time.Millisecond)
		}
		after := tg.waitAlloc(t, alloc.ID, "task server running again", func(a *api.Allocation) bool {
			ts := a.TaskStates["server"]
			return ts != nil && ts.State == "running" && ts.Restarts == 1
		})
		// (A run that falls between the registration and the stop, a few milliseconds,
		// would pass on the old process: the gate's time bound covers that case.)
		if started := after.TaskStates["server"].StartedAt; passedAt.Before(started) {
			t.Errorf("the check passed again at %v, before the task started again at %v: it did not wait for a run",
				passedAt, started)
		}
		for _, st := range seen {
			if st != "critical" && st != "absent" {
				t.Errorf("between the restart and the next run the check was %q; want critical (registered anew) or absent", st)
			}
		}
	})
}
