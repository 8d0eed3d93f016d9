package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestRunHealthChecks runs `run` on a job whose Consul check passes 2s (Nomad's time)
// after each start: with Consul reachable the restart waits for it and says so; -health
// running needs no Consul; a check that never passes fails at the group's deadline.
func TestRunHealthChecks(t *testing.T) {
	c := startSim(t, nomadsim.Options{})
	register(t, c, checkedJob("late", 2, "pass_after=2s", 500*time.Millisecond, time.Minute))
	register(t, c, checkedJob("broken", 2, "pass", 500*time.Millisecond, 4*time.Second))
	ctx := testCtx(t)

	e := newCLIEnv(t, c)
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

	c.ScriptCheck("default", "broken", "ready", "fail")
	code, out, errOut = e.run(ctx, "run", "-on-error=fail", "-state=local", "broken")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out+errOut, "not healthy within the healthy deadline of 4s") {
		t.Errorf("output does not give the deadline's reason:\n%s\n%s", out, errOut)
	}
}
