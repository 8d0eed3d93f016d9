package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// checkedJob is a job whose group has a Nomad-native service "name" with a TCP check on a
// dynamic port. Nothing listens there, so on a real agent the check fails; the case is
// about the endpoint's shape, which is the same for any status.
func checkedJob(id, name string) *api.Job {
	job := sleepJob(id, 1)
	g := job.TaskGroups[0]
	g.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	g.Services = []*api.Service{{
		Name:      name,
		PortLabel: "http",
		Provider:  "nomad",
		Checks: []api.ServiceCheck{{
			Type:     "tcp",
			Interval: time.Second,
			Timeout:  time.Second,
		}},
	}}
	return job
}

func TestChecksEndpointShape(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("checks")
		service := id + "-svc"
		tg.register(t, checkedJob(id, service))
		stub := tg.waitRunning(t, id, 1)[0]

		// The checks endpoint has no blocking query (it ignores index): poll it. Nomad first
		// shows a stub result, pending "nomad: waiting to run", until the check has run.
		ctx := tg.ctx(t)
		for ran := false; !ran; {
			checks, err := tg.api.Allocations().Checks(stub.ID, (&api.QueryOptions{}).WithContext(ctx))
			if ctx.Err() != nil {
				t.Fatalf("no check result for allocation %s within %v (last error %v, last answer %+v)", stub.ID, tg.patience, err, checks)
			}
			if err != nil {
				t.Fatalf("checks of allocation %s: %v", stub.ID, err)
			}
			if len(checks) > 1 {
				t.Fatalf("checks: got %d results, want 1: %+v", len(checks), checks)
			}
			for key, c := range checks {
				checkShape(t, id, service, key, c)
				ran = c.Status != "pending"
			}
			if !ran {
				time.Sleep(200 * time.Millisecond)
			}
		}

		// The raw answer is a JSON object keyed by check ID, without query metadata headers.
		r := tg.do(t, "GET", "/v1/client/allocation/"+stub.ID+"/checks", tg.token, nil)
		if r.status != 200 || r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Nomad-Index") != "" {
			t.Errorf("raw checks answer: %d, Content-Type %q, X-Nomad-Index %q; want 200 JSON without an index (no blocking query)", r.status, r.header.Get("Content-Type"), r.header.Get("X-Nomad-Index"))
		}
	})
}

// checkShape checks one result of the checks endpoint.
func checkShape(t *testing.T, jobID, service, key string, c api.AllocCheckStatus) {
	t.Helper()
	if c.ID != key || len(key) != 64 {
		t.Errorf("check keyed %q has ID %q; want the same 64-hex-digit ID", key, c.ID)
	}
	if want := fmt.Sprintf("service: %q check", service); c.Check != want {
		t.Errorf("check name %q, want %q (Nomad's default name)", c.Check, want)
	}
	if c.Group != jobID+".g[0]" || c.Service != service || c.Mode != "healthiness" || c.Task != "" {
		t.Errorf("check Group %q Service %q Mode %q Task %q, want %s.g[0] %s healthiness and no task (a group service)", c.Group, c.Service, c.Mode, c.Task, jobID, service)
	}
	switch c.Status {
	case "pending":
		if c.Output != "nomad: waiting to run" || c.StatusCode != 0 {
			t.Errorf("pending check: Output %q StatusCode %d, want Nomad's stub \"nomad: waiting to run\"", c.Output, c.StatusCode)
		}
	case "success", "failure":
		if c.Output == "" {
			t.Errorf("check %s without Output", c.Status)
		}
	default:
		t.Errorf("check Status %q, want pending, success or failure", c.Status)
	}
	if c.Timestamp <= 0 {
		t.Errorf("check Timestamp %d, want Unix seconds", c.Timestamp)
	}
}
