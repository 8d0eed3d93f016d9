package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestRunHealthChecks runs `run` on a job whose Consul check passes 6s (Nomad's time)
// after each start: with Consul reachable the restart waits for it and says so; -health
// running needs no Consul; a check that never passes fails at the group's deadline.
func TestRunHealthChecks(t *testing.T) {
	// 6s of Nomad's time is 300ms of real time: long enough for a loaded machine to see
	// the check failing first.
	c, e := startSimEnv(t, nomadsim.Options{},
		checkedJob("late", 2, "pass_after=6s", 500*time.Millisecond, time.Minute),
		checkedJob("broken", 2, "pass", 500*time.Millisecond, 4*time.Second))
	ctx := testCtx(t)

	e.consul = c.ConsulAddr()
	code, out, errOut := e.run(ctx, "run", "-on-error=fail", "-state=local", "late")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{`waits for: check ready`, "is healthy again"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	noConsul := newCLIEnv(t, c)
	code, out, errOut = noConsul.run(ctx, "run", "-on-error=fail", "-state=local", "-health=running", "late")
	if code != 0 || strings.Contains(out, "check ready") {
		t.Fatalf("-health running: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	// Every allocation fails its check: with the default budget (the batch size, 1) the
	// other one's failing check holds the batch back (the budget counts it); a budget of
	// 2 lets the batch start, and the restarted allocation fails at the deadline.
	c.ScriptCheck("default", "broken", "ready", "fail")
	code, out, errOut = e.run(ctx, "run", "-on-error=fail", "-state=local", "broken")
	if code != 1 || !strings.Contains(out+errOut, "failing its health checks") {
		t.Fatalf("exit %d, want 1 naming the failing checks\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, errOut = e.run(ctx, "run", "-on-error=fail", "-state=local", "-max-unavailable=2", "broken")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out+errOut, "not healthy within the healthy deadline of 4s") {
		t.Errorf("output does not give the deadline's reason:\n%s\n%s", out, errOut)
	}
}

// TestRunHealthChecksWithLifecycleTasks gates a group with a finished prestart task and a
// poststart sidecar on a Nomad-native check, in place with -all-tasks and with
// -reschedule: the finished prestart task is done, not waited for.
func TestRunHealthChecksWithLifecycleTasks(t *testing.T) {
	job := testJob("life", "service")
	for _, tg := range job.TaskGroups {
		if *tg.Name != "multiple_tasks" {
			continue
		}
		tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
		tg.Services = []*api.Service{{Name: "life-http", PortLabel: "http", Provider: "nomad",
			Checks: []api.ServiceCheck{{Name: "alive", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
		tg.Meta = map[string]string{"nomadsim.check.alive": "pass_after=2s"}
		tg.Update.MinHealthyTime = new(500 * time.Millisecond)
		tg.Update.HealthyDeadline = new(time.Minute)
	}
	_, e := startSimEnv(t, nomadsim.Options{}, job)
	ctx := testCtx(t)
	for _, args := range [][]string{{"-all-tasks"}, {"-reschedule"}} {
		full := append(append([]string{"run", "-on-error=fail", "-state=local", "-group=multiple_tasks", "-health=checks"}, args...), "life")
		code, out, errOut := e.run(ctx, full...)
		if code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, out, errOut)
		}
		if !strings.Contains(out, "alive") {
			t.Errorf("%v: the output never names the check it waits for:\n%s", args, out)
		}
	}
}
