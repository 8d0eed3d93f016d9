package nomadsim

import (
	"encoding/json"
	"testing"
	"time"

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
