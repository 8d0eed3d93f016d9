package nomadsim

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

// answeringJob is a job of one allocation whose group serves port http under two services,
// web (Nomad's provider) and web-consul, each with check ready (pass_after=readyAfter), and
// whose group waits delay before its tasks are killed.
func answeringJob(readyAfter, delay time.Duration) *api.Job {
	job := serviceJob("web", 1)
	tg := job.TaskGroups[0]
	tg.ShutdownDelay = ptr(delay)
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	check := []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}
	tg.Services = []*api.Service{
		{Name: "web", PortLabel: "http", Provider: "nomad", Checks: check},
		{Name: "web-consul", PortLabel: "http", Provider: "consul", Checks: check},
	}
	tg.Meta = map[string]string{"nomadsim.check.ready": "pass_after=" + readyAfter.String()}
	return job
}

// probe is one GET / of an instance on a new connection: its status, or 0 and the error.
func probe(port int) (int, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/")
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// readySince reports whether the allocation's task main started again at least readyAfter
// before now: an answer then is no error (a machine that stalls the test that long).
func readySince(t *testing.T, cl *api.Client, allocID string, readyAfter time.Duration, now time.Time) bool {
	t.Helper()
	a, _, err := cl.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := a.TaskStates["main"]
	return ts.Restarts > 0 && ts.State == "running" && now.Sub(ts.StartedAt) >= readyAfter
}

func TestServeInstancesAnswerAsTheWorkload(t *testing.T) {
	const readyAfter, delay = 4 * time.Second, 10 * time.Second
	c, cl := startCluster(t, Options{TimeScale: 10, ServeInstances: true})
	a := runningAlloc(t, c, cl, answeringJob(readyAfter, delay))

	// Both catalogs name the instance's real address and port.
	regs, _, err := cl.Allocations().Services(a.ID, nil)
	if err != nil || len(regs) != 1 {
		t.Fatalf("services of the allocation: %v %v", regs, err)
	}
	port := regs[0].Port
	if regs[0].Address != "127.0.0.1" || port < sim.InstancePortMin || port >= sim.InstancePortMax {
		t.Fatalf("registered at %s:%d, want 127.0.0.1 and a port in [%d, %d)", regs[0].Address, port, sim.InstancePortMin, sim.InstancePortMax)
	}
	consul, err := consulapi.NewClient(&consulapi.Config{Address: c.ConsulAddr()})
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := consul.Health().Service("web-consul", "", false, nil)
	if err != nil || len(entries) != 1 || entries[0].Service.Address != "127.0.0.1" || entries[0].Service.Port != port {
		t.Fatalf("Consul's health entries: %+v %v, want the port %d", entries, err, port)
	}
	catalog, _, err := consul.Catalog().Service("web-consul", "", nil)
	if err != nil || len(catalog) != 1 || catalog[0].ServiceAddress != "127.0.0.1" || catalog[0].ServicePort != port {
		t.Fatalf("Consul's catalog: %+v %v, want the port %d", catalog, err, port)
	}
	waitFor(t, "the instance to answer 200", func() bool { code, _ := probe(port); return code == http.StatusOK })

	// An in-place restart: the services go, the process serves through the group
	// shutdown_delay, then it exits (refused) and answers again once its check's script
	// passes, readyAfter after it started again.
	done := make(chan error, 1)
	go func() { done <- cl.Allocations().Restart(a, "", nil) }()
	waitFor(t, "the services deregistered", func() bool {
		regs, _, _ := cl.Allocations().Services(a.ID, nil)
		return len(regs) == 0
	})
	if code, err := probe(port); code != http.StatusOK {
		t.Errorf("during the shutdown delay the instance answered %d %v, want 200", code, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if code, err := probe(port); !refused(err) && !readySince(t, cl, a.ID, readyAfter, c.Now()) {
		t.Errorf("after the restart call returned: %d %v, want connection refused", code, err)
	}
	waitFor(t, "the instance to answer again", func() bool { code, _ := probe(port); return code == http.StatusOK })
	answered := c.Now()
	x, _, err := cl.Allocations().Info(a.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if started := x.TaskStates["main"].StartedAt; answered.Sub(started) < readyAfter {
		t.Errorf("answered %v after the task started again, before its check's %v", answered.Sub(started), readyAfter)
	}
	regs, _, _ = cl.Allocations().Services(a.ID, nil)
	if len(regs) != 1 || regs[0].Port != port {
		t.Errorf("after the restart the allocation is registered as %+v, want port %d kept", regs, port)
	}

	// A stop: the services go, the process serves through the delay, then the port
	// refuses for good.
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the services deregistered", func() bool {
		regs, _, _ := cl.Allocations().Services(a.ID, nil)
		return len(regs) == 0
	})
	if code, err := probe(port); code != http.StatusOK {
		t.Errorf("during the stop's shutdown delay the instance answered %d %v, want 200", code, err)
	}
	waitFor(t, "the allocation complete", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		return x.ClientStatus == api.AllocClientStatusComplete
	})
	if _, err := probe(port); !refused(err) {
		t.Errorf("after the stop: %v, want connection refused", err)
	}
}

func TestServeInstancesCloseWithTheCluster(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 50, ServeInstances: true})
	a := runningAlloc(t, c, cl, answeringJob(time.Second, 0))
	regs, _, err := cl.Allocations().Services(a.ID, nil)
	if err != nil || len(regs) != 1 {
		t.Fatalf("services: %v %v", regs, err)
	}
	waitFor(t, "the instance to answer 200", func() bool { code, _ := probe(regs[0].Port); return code == http.StatusOK })
	_ = c.Close()
	if _, err := probe(regs[0].Port); !refused(err) {
		t.Errorf("after Close: %v, want connection refused", err)
	}
}

func TestInstancesOffByDefault(t *testing.T) {
	c, cl := startCluster(t, Options{})
	a := runningAlloc(t, c, cl, answeringJob(0, 0))
	regs, _, err := cl.Allocations().Services(a.ID, nil)
	if err != nil || len(regs) != 1 {
		t.Fatalf("services: %v %v", regs, err)
	}
	if regs[0].Address == "127.0.0.1" || regs[0].Port < 20000 || regs[0].Port >= 30000 {
		t.Errorf("registered at %s:%d, want the node's address and a made-up port in [20000, 30000)", regs[0].Address, regs[0].Port)
	}
	if _, err := probe(regs[0].Port); err == nil {
		t.Errorf("something answers on the made-up port %d", regs[0].Port)
	}
}

// TestStopKeepsTaskServicesThroughGroupDelay: Nomad's group service hook deregisters the
// group's services and waits the group shutdown_delay before any task is killed; a task's
// services go when the task is killed (its service hook's PreKilling).
func TestStopKeepsTaskServicesThroughGroupDelay(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 10})
	job := serviceJob("web", 1)
	tg := job.TaskGroups[0]
	tg.ShutdownDelay = ptr(10 * time.Second)
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	tg.Services = []*api.Service{{Name: "group-svc", PortLabel: "http", Provider: "nomad"}}
	tg.Tasks[0].Services = []*api.Service{{Name: "task-svc", PortLabel: "http", Provider: "nomad"}}
	a := runningAlloc(t, c, cl, job)
	names := func() map[string]bool {
		regs, _, _ := cl.Allocations().Services(a.ID, nil)
		out := map[string]bool{}
		for _, r := range regs {
			out[r.ServiceName] = true
		}
		return out
	}
	waitFor(t, "both services registered", func() bool { n := names(); return n["group-svc"] && n["task-svc"] })
	stopped := c.Now()
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the group service deregistered", func() bool { return !names()["group-svc"] })
	if !names()["task-svc"] {
		t.Errorf("the task service went with the group's, before the group shutdown_delay")
	}
	waitFor(t, "the task service deregistered", func() bool { return !names()["task-svc"] })
	if got := c.Now().Sub(stopped); got < 10*time.Second {
		t.Errorf("the task service went %v after the stop, within the group shutdown_delay of 10s", got)
	}
}
