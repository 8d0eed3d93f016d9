package conformance

import (
	"fmt"
	"net/http"
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

// servedCheckJob is a job of one allocation whose task serves HTTP (python3's http.server
// on a real agent) behind a Nomad service "name" with an HTTP check every `every`.
func servedCheckJob(id, name string, every time.Duration) *api.Job {
	server := sleepTask("server")
	server.Config["args"] = []string{"-c", "exec python3 -m http.server --bind 127.0.0.1 ${NOMAD_PORT_http}"}
	job := serviceJob(id, 1, server)
	g := job.TaskGroups[0]
	g.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	g.Services = []*api.Service{{
		Name: name, PortLabel: "http", Provider: "nomad",
		Checks: []api.ServiceCheck{{Type: "http", Path: "/", Interval: every, Timeout: time.Second}},
	}}
	return job
}

// TestChecksKeepLastResultAcrossRestart: Nomad's checks hook has no restart hook, so after
// an in-place restart the checks endpoint still answers the result of the last run, with
// its time from before the restart, until the check runs again (measured on Nomad 2.0: a
// "success" 1.2 s old, 0.16 s after the restart). A gate that took it for the restarted
// task's would call a starting task healthy.
func TestChecksKeepLastResultAcrossRestart(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		const every = 5 * time.Second
		id := tg.id("checks-restart")
		tg.register(t, servedCheckJob(id, id+"-svc", every))
		stub := tg.waitRunning(t, id, 1)[0]
		ctx := tg.ctx(t)
		read := func() api.AllocCheckStatus {
			t.Helper()
			checks, err := tg.api.Allocations().Checks(stub.ID, (&api.QueryOptions{}).WithContext(ctx))
			if err != nil || len(checks) != 1 {
				t.Fatalf("checks of allocation %s: %v %+v, want one result", stub.ID, err, checks)
			}
			for _, c := range checks {
				return c
			}
			panic("unreachable")
		}
		// Restart right after a run, so that the next run is an interval away.
		var last api.AllocCheckStatus
		for first := read(); ; time.Sleep(50 * time.Millisecond) {
			if ctx.Err() != nil {
				t.Fatalf("no new successful run of the check within %v (last %+v)", tg.patience, last)
			}
			last = read()
			if last.Status == "success" && last.Timestamp != first.Timestamp {
				break
			}
		}
		alloc, _, err := tg.api.Allocations().Info(stub.ID, (&api.QueryOptions{}).WithContext(ctx))
		if err != nil {
			t.Fatalf("read allocation: %v", err)
		}
		if err := tg.api.Allocations().Restart(alloc, "", (&api.QueryOptions{}).WithContext(ctx)); err != nil {
			t.Fatalf("restart allocation %s: %v", alloc.ID, err)
		}
		if got := read(); got.Status != last.Status || got.Timestamp != last.Timestamp {
			t.Errorf("right after the restart the check reads %s at %d; want the last run's %s at %d, kept until it runs again",
				got.Status, got.Timestamp, last.Status, last.Timestamp)
		}
		after := tg.waitAlloc(t, alloc.ID, "task server running again after its restart", func(a *api.Allocation) bool {
			ts := a.TaskStates["server"]
			return ts != nil && ts.State == "running" && ts.Restarts == 1
		})
		started := after.TaskStates["server"].StartedAt
		if last.Timestamp > started.Unix() {
			t.Fatalf("the last run before the restart (%d) is after the task's new start (%v)", last.Timestamp, started)
		}
		// The next run comes an interval after the last, and judges the new process.
		deadline := time.Unix(last.Timestamp, 0).Add(2*every + 2*time.Second)
		for {
			c := read()
			if c.Timestamp > started.Unix() {
				if c.Status != "success" {
					t.Errorf("first run after the restart: %s %q, want success (the task serves)", c.Status, c.Output)
				}
				break
			}
			if c.Timestamp != last.Timestamp || c.Status != last.Status {
				t.Fatalf("before its next run the check changed to %s at %d (last run %s at %d, task started %v)", c.Status, c.Timestamp, last.Status, last.Timestamp, started)
			}
			if tg.now().After(deadline) {
				t.Fatalf("no run of the check since the task started at %v, by %v", started, deadline)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestAnswersAreDated: every answer carries a Date header on the agent's clock (Go's HTTP
// server writes it): a client estimating Nomad's clock reads it.
func TestAnswersAreDated(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		before := tg.now().Truncate(time.Second)
		r := tg.do(t, "GET", "/v1/status/leader", tg.token, nil)
		after := tg.now()
		d, err := http.ParseTime(r.header.Get("Date"))
		if err != nil {
			t.Fatalf("Date header %q: %v", r.header.Get("Date"), err)
		}
		if d.Before(before) || d.After(after) {
			t.Errorf("Date %v, want between %v and %v (the agent's clock, to the second)", d, before, after)
		}
	})
}
