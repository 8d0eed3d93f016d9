package nomadsim

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// A task loads its configuration as it starts (nomadsim.bad_when): a bad value written
// while it runs changes nothing until it restarts; restarted onto it, its instance answers
// 500 (the share of nomadsim.bad_errors) and its checks fail; restarted onto a good value
// again, it answers 200 and its checks pass.
func TestLoadedBadValueFailsUntilRestartedOntoAGoodOne(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 10, ServeInstances: true})
	put := func(mode string) {
		t.Helper()
		if _, _, err := cl.Variables().Update(&api.Variable{Namespace: "default", Path: "nomad/jobs/web/config", Items: map[string]string{"mode": mode}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("good")
	job := answeringJob(0, 0)
	job.TaskGroups[0].Tasks[0].Services = nil
	job.TaskGroups[0].Tasks[0].Services = []*api.Service{{Name: "app", PortLabel: "http", Provider: "nomad",
		Checks: []api.ServiceCheck{{Name: "health", Type: "http", Path: "/health", Interval: time.Second, Timeout: time.Second}}}}
	job.TaskGroups[0].Services = nil
	job.TaskGroups[0].Meta = map[string]string{"nomadsim.bad_when": "nomad:nomad/jobs/web/config:mode=bad", "nomadsim.bad_errors": "1"}
	a := runningAlloc(t, c, cl, job)
	regs, _, err := cl.Allocations().Services(a.ID, nil)
	if err != nil || len(regs) != 1 {
		t.Fatalf("services: %v %v", regs, err)
	}
	port := regs[0].Port
	answers := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := probe(port)
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the instance answers %d (%v), want %d", got, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	check := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, err := cl.Allocations().Checks(a.ID, nil)
			got := ""
			for _, s := range st {
				got = s.Status
			}
			if err == nil && got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the check is %q (%v), want %q", got, err, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	restartAlloc := func() {
		t.Helper()
		if err := cl.Allocations().Restart(a, "", nil); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.WaitAllocsRunning(ctx, "default", "web"); err != nil {
			t.Fatal(err)
		}
	}
	answers(http.StatusOK)
	check("success")

	put("bad")
	time.Sleep(200 * time.Millisecond) // two simulated seconds: nothing reloads by itself
	answers(http.StatusOK)
	check("success")

	restartAlloc()
	answers(http.StatusInternalServerError)
	check("failure")

	put("good")
	restartAlloc()
	answers(http.StatusOK)
	check("success")
}
