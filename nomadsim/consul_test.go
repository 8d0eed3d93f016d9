package nomadsim

import (
	"encoding/json"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"
)

func TestConsulServicesFollowTasks(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	task := job.TaskGroups[0].Tasks[0]
	task.Services = []*api.Service{{Name: "web", PortLabel: "http", Provider: "consul", Checks: []api.ServiceCheck{{Name: "alive", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
	task.Meta = map[string]string{"nomadsim.check.alive": "pass_after=2s"}
	a := runningAlloc(t, c, cl, job)
	type check struct{ CheckID, Status, ServiceID, Name string }
	read := func() []check {
		_, body := get(t, c.ConsulAddr()+"/v1/health/checks/web")
		var out []check
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("consul body %q: %v", body, err)
		}
		return out
	}
	wantID := "_nomad-task-" + a.ID + "-main-web-http"
	waitFor(t, "consul check passing", func() bool {
		cs := read()
		return len(cs) == 1 && cs[0].Status == "passing" && cs[0].ServiceID == wantID
	})
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "old instance deregistered", func() bool {
		for _, ch := range read() {
			if ch.ServiceID == wantID {
				return false
			}
		}
		return true
	})
}

func TestScriptCheckOverride(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	tg := job.TaskGroups[0]
	tg.Services = []*api.Service{{Name: "web", PortLabel: "http", Provider: "nomad", Checks: []api.ServiceCheck{{Name: "alive", Type: "tcp", Interval: time.Second, Timeout: time.Second}}}}
	a := runningAlloc(t, c, cl, job)
	status := func() string {
		checks, err := cl.Allocations().Checks(a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, chk := range checks {
			return chk.Status
		}
		return ""
	}
	waitFor(t, "passing", func() bool { return status() == "success" })
	c.ScriptCheck("default", "web", "alive", "fail")
	if got := status(); got != "failure" {
		t.Errorf("after override: %s", got)
	}
	c.ScriptCheck("default", "web", "alive", "pass_after=1s")
	if got := status(); got != "failure" {
		t.Errorf("right after pass_after override: %s", got)
	}
	waitFor(t, "passing again", func() bool { return status() == "success" })
}

// TestDrainCheckGoesWithRestart: a check registered through Consul's catalog API on an
// allocation's instances (nomad-restart's drain) goes when Nomad deregisters the instance
// for an in-place restart, as Consul deletes a service's checks with it, so the instance
// registered anew has none of it.
func TestDrainCheckGoesWithRestart(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	tg := job.TaskGroups[0]
	tg.Services = []*api.Service{{Name: "web-group", PortLabel: "http", Provider: "consul"}}
	tg.Tasks[0].Services = []*api.Service{{Name: "web-task", PortLabel: "http", Provider: "consul"}}
	a := runningAlloc(t, c, cl, job)
	consul := consulClient(t, c)
	drains := func() []string {
		state, _, err := consul.Health().State("critical", nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, ch := range state {
			ids = append(ids, ch.CheckID)
		}
		return ids
	}
	idx := map[string]uint64{}
	for _, name := range []string{"web-group", "web-task"} {
		entries, _, err := consul.Catalog().Service(name, "", nil)
		if err != nil || len(entries) != 1 {
			t.Fatalf("catalog %s: %+v %v", name, entries, err)
		}
		e := entries[0]
		idx[name] = e.CreateIndex
		_, err = consul.Catalog().Register(&consulapi.CatalogRegistration{
			Node: e.Node, Address: e.Address, Datacenter: e.Datacenter, SkipNodeUpdate: true,
			Check: &consulapi.AgentCheck{Node: e.Node, CheckID: "nomad-restart-drain:" + e.ServiceID,
				Name: "nomad-restart drain", Status: "critical", ServiceID: e.ServiceID},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := drains(); len(got) != 2 {
		t.Fatalf("critical checks after the drain: %v", got)
	}
	if err := cl.Allocations().Restart(a, "", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both instances registered anew", func() bool {
		for name, before := range idx {
			entries, _, err := consul.Catalog().Service(name, "", nil)
			if err != nil || len(entries) != 1 || entries[0].CreateIndex <= before {
				return false
			}
		}
		return true
	})
	if got := drains(); len(got) != 0 {
		t.Fatalf("critical checks after the restart: %v, want none", got)
	}
}

func consulClient(t *testing.T, c *Cluster) *consulapi.Client {
	t.Helper()
	cfg := consulapi.DefaultConfig()
	cfg.Address = c.ConsulAddr()
	cl, err := consulapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
