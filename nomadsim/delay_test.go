package nomadsim

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func groupServiceJob(id string, delay time.Duration) *api.Job {
	job := serviceJob(id, 1)
	tg := job.TaskGroups[0]
	tg.ShutdownDelay = ptr(delay)
	tg.Services = []*api.Service{{Name: id, PortLabel: "http", Provider: "nomad"}}
	return job
}

func TestRestartHonoursGroupShutdownDelay(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	a := runningAlloc(t, c, cl, groupServiceJob("web", 5*time.Second))
	waitFor(t, "service registered", func() bool {
		regs, _, _ := cl.Allocations().Services(a.ID, nil)
		return len(regs) == 1
	})
	done := make(chan error, 1)
	before := c.Now()
	go func() { done <- cl.Allocations().Restart(a, "", nil) }()
	waitFor(t, "service deregistered during the restart", func() bool {
		regs, _, _ := cl.Allocations().Services(a.ID, nil)
		return len(regs) == 0
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := c.Now().Sub(before); got < 5*time.Second {
		t.Errorf("restart returned after %v, before the 5s group shutdown_delay", got)
	}
	waitFor(t, "service back", func() bool {
		regs, _, _ := cl.Allocations().Services(a.ID, nil)
		return len(regs) == 1
	})
}

func TestStopShutdownDelay(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	a := runningAlloc(t, c, cl, groupServiceJob("web", 30*time.Second))
	// With no_shutdown_delay the allocation stops without waiting the 30 s.
	before := c.Now()
	if _, err := cl.Allocations().Stop(a, &api.QueryOptions{Params: map[string]string{"no_shutdown_delay": "true"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "complete", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		return x.ClientStatus == "complete"
	})
	if got := c.Now().Sub(before); got >= 30*time.Second {
		t.Errorf("no_shutdown_delay stop took %v", got)
	}
	x, _, _ := cl.Allocations().Info(a.ID, nil)
	if !*x.DesiredTransition.NoShutdownDelay {
		t.Errorf("NoShutdownDelay not recorded")
	}
	// The replacement stops with the delay.
	next, _, _ := cl.Allocations().Info(x.NextAllocation, nil)
	waitFor(t, "replacement running", func() bool {
		next, _, _ = cl.Allocations().Info(x.NextAllocation, nil)
		return next.ClientStatus == "running"
	})
	before = c.Now()
	if _, err := cl.Allocations().Stop(next, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "complete", func() bool {
		y, _, _ := cl.Allocations().Info(next.ID, nil)
		return y.ClientStatus == "complete"
	})
	if got := c.Now().Sub(before); got < 30*time.Second {
		t.Errorf("stop took %v, less than the 30s shutdown_delay", got)
	}
}

func TestIneligibleNodesBlockThenUnblock(t *testing.T) {
	c, cl := startCluster(t, Options{})
	for _, n := range c.Nodes() {
		c.SetNodeEligibility(n.ID, false)
	}
	if _, _, err := cl.Jobs().Register(serviceJob("web", 1), nil); err != nil {
		t.Fatal(err)
	}
	evals, _, _ := cl.Jobs().Evaluations("web", nil)
	if b := evalWith(evals, "blocked"); b == nil || b.FailedTGAllocs["g"] == nil {
		t.Fatalf("no blocked evaluation: %+v", evals)
	}
	c.SetNodeEligibility(c.Nodes()[0].ID, true)
	if err := c.WaitJobRunning(ctxT(t), "default", "web"); err != nil {
		t.Fatal(err)
	}
	evals, _, _ = cl.Jobs().Evaluations("web", nil)
	for _, ev := range evals {
		if ev.Status == "blocked" {
			t.Errorf("evaluation %s still blocked", ev.ID)
		}
	}
}

func TestTaskShutdownDelayEvents(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := serviceJob("web", 1)
	job.TaskGroups[0].Tasks[0].ShutdownDelay = 2 * time.Second
	a := runningAlloc(t, c, cl, job)
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	var x *api.Allocation
	waitFor(t, "complete", func() bool {
		x, _, _ = cl.Allocations().Info(a.ID, nil)
		return x.ClientStatus == "complete"
	})
	got := strings.Join(eventTypes(x.TaskStates["main"]), ",")
	if want := "Received,Task Setup,Started,Killing,Waiting for shutdown delay,Terminated,Killed"; got != want {
		t.Errorf("events %s, want %s", got, want)
	}
}
