package health_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// These tests run the check sources over real HTTP against nomadsim (Nomad's allocation
// checks endpoint and its Consul health API), feed a Gate with them, and check the
// verdicts against the checks' scripts, on nomadsim's clock.

// timeScale is slower than simtest.TimeScale: the checks' scripts pass and fail seconds
// apart on nomadsim's clock while the sources read them on real time (their watch waits
// and retries), and the verdicts these tests expect need each state to last long enough
// to be read.
const timeScale = 20

func startSim(t *testing.T) (*nomadsim.Cluster, *cluster.Nomad) {
	t.Helper()
	sim := simtest.Start(t, nomadsim.Options{TimeScale: timeScale, Seed: 11})
	client := simtest.Client(t, sim)
	n := cluster.NewNomadWithOptions(client, cluster.Options{
		Retry:     cluster.RetryPolicy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxElapsed: 5 * time.Second},
		WatchWait: time.Second,
	})
	return sim, n
}

// mixedJob has a Nomad-provider group service and a Consul-provider task service, whose
// checks follow the scripts given.
func mixedJob(id, nomadScript, consulScript string) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.Datacenters = []string{"dc1", "dc2"}
	task := api.NewTask("app", "raw_exec").SetConfig("command", "/bin/sleep")
	task.Resources = &api.Resources{CPU: new(100), MemoryMB: new(64)}
	task.Services = []*api.Service{{Name: id + "-api", PortLabel: "http", Provider: "consul", Tags: []string{"v1"},
		Checks: []api.ServiceCheck{{Name: "api-http", Type: "http", Path: "/", Interval: 2 * time.Second, Timeout: time.Second}}}}
	tg := api.NewTaskGroup("web", 1).AddTask(task)
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}, {Label: "admin"}}}}
	tg.Services = []*api.Service{{Name: id + "-admin", PortLabel: "admin", Provider: "nomad",
		Checks: []api.ServiceCheck{
			{Name: "admin-tcp", Type: "tcp", Interval: 2 * time.Second, Timeout: time.Second},
			{Name: "admin-ready", Type: "tcp", Interval: 2 * time.Second, Timeout: time.Second, OnUpdate: "ignore"},
		}}}
	tg.Meta = map[string]string{
		"nomadsim.check.admin-tcp":   nomadScript,
		"nomadsim.check.api-http":    consulScript,
		"nomadsim.check.admin-ready": "fail", // a readiness check: its failure must not count
	}
	j.TaskGroups = []*api.TaskGroup{tg}
	return j
}

func deploy(t *testing.T, sim *nomadsim.Cluster, n *cluster.Nomad, job *api.Job) (*api.Job, *restart.Alloc) {
	t.Helper()
	if _, err := sim.RegisterJob(job); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The allocations only: a failing check keeps the deployment running until its deadline.
	if err := sim.WaitAllocsRunning(ctx, "default", *job.ID); err != nil {
		t.Fatal(err)
	}
	stored, _, err := simtest.Client(t, sim).Jobs().Info(*job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	allocs, _, err := n.JobAllocations(ctx, "default", *job.ID)
	if err != nil || len(allocs) != 1 {
		t.Fatalf("allocations: %v, %v", allocs, err)
	}
	return stored, allocs[0]
}

// gateOnSim deploys job on a new simulation and runs the gate on its allocation: gateRun.
func gateOnSim(t *testing.T, job *api.Job, minHealthy, deadline time.Duration) (health.Verdict, []string, time.Time) {
	t.Helper()
	sim, n := startSim(t)
	job, a := deploy(t, sim, n, job)
	return gateRun(t, sim, n, job, a, minHealthy, deadline)
}

// gateRun restarts the allocation's task, runs the sources into a gate and returns the
// final verdict, every distinct thing it waited for on the way, and the task's new start time.
func gateRun(t *testing.T, sim *nomadsim.Cluster, n *cluster.Nomad, job *api.Job, a *restart.Alloc, minHealthy, deadline time.Duration) (health.Verdict, []string, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clock := health.Clock(sim.Now)
	since := sim.Now()
	if err := n.RestartTasks(ctx, a.ID, "app", false); err != nil {
		t.Fatal(err)
	}
	specs := health.AllocChecks(cluster.NewJobSpec(job), a)
	g := health.NewReadiness(health.Config{Mode: restart.HealthChecks, Tasks: []string{"app"}, Checks: specs, Since: since, MinHealthy: minHealthy, Deadline: deadline})

	consul, err := health.NewConsul(health.ConsulConfig{Address: sim.ConsulAddr(), Wait: 2 * time.Second}, clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := consul.Probe(ctx, health.ConsulServices(specs)...); err != nil {
		t.Fatalf("probe: %v", err)
	}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(2)
	go func() {
		defer wg.Done()
		src := health.Sources{Nomad: health.NewNomadChecks(n, clock, nil), Consul: consul, TimeScale: sim.TimeScale()}
		if err := src.Watch(wctx, g, a.ID); err != nil && wctx.Err() == nil {
			t.Errorf("sources: %v", err)
		}
	}()
	var mu sync.Mutex
	var started time.Time
	go func() {
		defer wg.Done()
		var idx uint64
		for wctx.Err() == nil {
			cur, next, err := n.WatchAllocation(wctx, a.ID, idx)
			if err != nil {
				continue
			}
			idx = next
			g.ObserveAlloc(cur)
			mu.Lock()
			started = cur.Tasks["app"].StartedAt
			mu.Unlock()
		}
	}()
	var seen []string
	for {
		v := g.Evaluate(sim.Now())
		for _, w := range v.Waiting {
			if !strings.HasPrefix(w, "min healthy time") && !slices.Contains(seen, w) {
				seen = append(seen, w)
			}
		}
		if strings.HasPrefix(v.Reason, "min healthy time") && !slices.Contains(seen, "min healthy time") {
			seen = append(seen, "min healthy time")
		}
		if v.State != health.Pending {
			mu.Lock()
			defer mu.Unlock()
			return v, seen, started
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no verdict; reasons seen: %q", seen)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestGateAgainstNomadsimChecksPassLate(t *testing.T) {
	v, seen, started := gateOnSim(t, mixedJob("late", "pass_after=8s", "pass_after=5s"), 4*time.Second, 2*time.Minute)
	if v.State != health.Healthy {
		t.Fatalf("verdict %+v; reasons seen %q", v, seen)
	}
	// The Nomad check passes 8s after the task started: the healthy stretch cannot begin
	// before, and the verdict came at least min_healthy_time after it.
	if v.Since.Before(started.Add(8 * time.Second)) {
		t.Fatalf("healthy since %s, only %s after the task started at %s", v.Since, v.Since.Sub(started), started)
	}
	if !v.Since.Before(started.Add(time.Minute)) {
		t.Fatalf("healthy since %s, %s after the start: the sources lag", v.Since, v.Since.Sub(started))
	}
	want := []string{"check api-http (consul) critical", "check admin-tcp (nomad) failure", "min healthy time"}
	for _, w := range want {
		if !containsSub(seen, w) {
			t.Errorf("never waited for %q; reasons seen %q", w, seen)
		}
	}
	// Pending counts against a readiness check, as in Nomad's tracker; failing does not.
	if containsSub(seen, "admin-ready (nomad) failure") {
		t.Errorf("the failing readiness check held health back: %q", seen)
	}
}

func TestGateAgainstNomadsimFailingCheckMissesDeadline(t *testing.T) {
	v, seen, _ := gateOnSim(t, mixedJob("broken", "pass", "fail"), 2*time.Second, 20*time.Second)
	if v.State != health.Failed || !strings.Contains(v.Reason, "healthy deadline of 20s: check api-http (consul) critical: simulated check failure") {
		t.Fatalf("verdict %+v; reasons seen %q", v, seen)
	}
}

func TestGateAgainstNomadsimFlappingCheckResetsTimer(t *testing.T) {
	// The Nomad check passes 6s, fails 6s, and so on: more than min_healthy_time in
	// total, never for min_healthy_time in a row.
	v, seen, _ := gateOnSim(t, mixedJob("flappy", "flap=6s", "pass"), 10*time.Second, 40*time.Second)
	if v.State != health.Failed || !strings.Contains(v.Reason, "healthy deadline of 40s") {
		t.Fatalf("verdict %+v; reasons seen %q", v, seen)
	}
	if !containsSub(seen, "check admin-tcp (nomad) failure") || !containsSub(seen, "min healthy time") {
		t.Fatalf("the check never flapped: %q", seen)
	}
}

// unreachableConsul is a Consul source of an address nothing listens on, and that address.
func unreachableConsul(t *testing.T) (*health.Consul, string) {
	t.Helper()
	addr := simtest.ClosedAddr(t)
	c, err := health.NewConsul(health.ConsulConfig{Address: addr}, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, addr
}

func TestConsulProbeRefused(t *testing.T) {
	c, addr := unreachableConsul(t)
	err := c.Probe(context.Background())
	want := fmt.Sprintf("Consul at http://%s refused the connection: set -consul-address or CONSUL_HTTP_ADDR, or choose -health running", addr)
	if err == nil || err.Error() != want {
		t.Fatalf("probe: %v\nwant %s", err, want)
	}
}

func TestConsulWatchReportsUnreachable(t *testing.T) {
	c, _ := unreachableConsul(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan health.Snapshot, 1)
	go func() {
		_ = c.Watch(ctx, "a1", []string{"web"}, func(s health.Snapshot) {
			select {
			case got <- s:
			default:
			}
		})
	}()
	s := <-got
	cancel()
	if s.Err == nil || !strings.Contains(s.Err.Error(), "refused the connection") || s.Provider != health.ProviderConsul {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestConsulWatchRefusesUnresolvedService(t *testing.T) {
	c, err := health.NewConsul(health.ConsulConfig{Address: "127.0.0.1:1"}, time.Now, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Watch(context.Background(), "a1", []string{"web-${node.unique.name}"}, func(health.Snapshot) {})
	if err == nil || !strings.Contains(err.Error(), "choose -health running") {
		t.Fatalf("watch: %v", err)
	}
}

func TestNomadChecksReadError(t *testing.T) {
	sim, n := startSim(t)
	s := health.NewNomadChecks(n, sim.Now, nil).Read(context.Background(), "00000000-0000-0000-0000-000000000000")
	if s.Err == nil || !errors.Is(s.Err, cluster.ErrAllocNotFound) {
		t.Fatalf("snapshot %+v", s)
	}
}

func containsSub(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
