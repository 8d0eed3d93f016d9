package simtest

import (
	"context"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// startServed starts a cluster serving instances with ServedJob(id, 2, provider, 1s, 0)
// running.
func startServed(t *testing.T, provider string) *nomadsim.Cluster {
	t.Helper()
	// Slower than TimeScale: the balancer reads the catalog and sends requests in real
	// time, and its counts must see each instance's check change.
	c := Start(t, nomadsim.Options{TimeScale: 10, ServeInstances: true, Seed: 1})
	RegisterRunning(t, c, ServedJob("web", 2, provider, time.Second, 0))
	return c
}

// run starts b, waits until it lists n instances that answer, and starts its counts over.
func run(t *testing.T, b *Balancer, n int) {
	t.Helper()
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Stop() })
	b.WaitAnswering(t, n, 20*time.Second)
	b.Reset()
}

func TestBalancerSteadyTrafficDoesNotFail(t *testing.T) {
	c := startServed(t, "consul")
	b := ConsulBalancer(c, "web")
	run(t, b, 2)
	time.Sleep(c.RealDuration(3 * time.Second))
	r := b.Stop()
	t.Logf("%s in %v", r, r.Elapsed)
	if r.Requests < 30 || r.Failed != 0 {
		t.Errorf("steady traffic: %s, want some 300 requests and none failed", r)
	}
	if len(r.RequestsPerSecond) < 3 || r.Refreshes < 3 {
		t.Errorf("%d seconds counted, %d refreshes in 3s of simulated time", len(r.RequestsPerSecond), r.Refreshes)
	}
}

// TestBalancerCountsRequestsToARestartingInstance: Nomad's service table has no health, so
// a balancer reading it sends to an instance whose process restarts: those requests fail
// (refused), and none once it is ready again.
func TestBalancerCountsRequestsToARestartingInstance(t *testing.T) {
	c := startServed(t, "nomad")
	b := NomadBalancer(c, "web")
	run(t, b, 2)
	client := Client(t, c)
	stubs, _, err := client.Jobs().Allocations("web", false, nil)
	if err != nil || len(stubs) != 2 {
		t.Fatalf("allocations: %v %v", stubs, err)
	}
	a, _, err := client.Allocations().Info(stubs[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Allocations().Restart(a, "", nil); err != nil {
		t.Fatal(err)
	}
	// Down for the start (500ms) and the check's 1s, plus a refresh's lag.
	time.Sleep(c.RealDuration(4 * time.Second))
	r := b.Stop()
	t.Logf("%s; failed per second %v", r, r.FailedPerSecond)
	// A request in flight as the process exits may see its connection closed instead.
	if r.Refused == 0 || r.NoInstance != 0 || r.TimedOut != 0 || r.Status != 0 {
		t.Errorf("restart under traffic: %s, want refused requests", r)
	}
	if last := r.FailedPerSecond[len(r.FailedPerSecond)-1]; last != 0 {
		t.Errorf("%d requests still failed in the last second: %v", last, r.FailedPerSecond)
	}
}

func TestBalancerWithoutInstancesFailsEveryRequest(t *testing.T) {
	c := startServed(t, "consul")
	b := ConsulBalancer(c, "nosuch")
	run(t, b, 0)
	time.Sleep(c.RealDuration(time.Second))
	r := b.Stop()
	if r.Requests == 0 || r.NoInstance != r.Requests || r.Failed != r.Requests {
		t.Errorf("no instance: %s, want every request failed for want of an instance", r)
	}
}
