package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The end-to-end tests' shared steps: run a command in the background, detach a restart,
// read one back, wait for one, and check what the cluster saw.

// cmdResult is what a command run in the background ended with.
type cmdResult struct {
	code     int
	out, err string
}

// goRun runs a command (e.run, runFake, ...) in the background; its result arrives on the
// channel.
func goRun(run func() (int, string, string)) <-chan cmdResult {
	done := make(chan cmdResult, 1)
	go func() {
		code, out, errOut := run()
		done <- cmdResult{code, out, errOut}
	}()
	return done
}

// start runs one command in the background, off a terminal.
func (e cliEnv) start(ctx context.Context, args ...string) <-chan cmdResult {
	return goRun(func() (int, string, string) { return e.run(ctx, args...) })
}

// runDetached runs `run -detach args...`, which must succeed, and returns the restart's
// short ID and the output.
func (e cliEnv) runDetached(t *testing.T, ctx context.Context, args ...string) (id, out string) {
	t.Helper()
	code, out, errOut := e.run(ctx, append([]string{"run", "-detach"}, args...)...)
	if code != 0 {
		t.Fatalf("run -detach: exit %d\n%s\n%s", code, out, errOut)
	}
	id, _ = createdID(t, out)
	return id, out
}

var createdRe = regexp.MustCompile(`Restart ([0-9a-f]{8}) of job "[^"]+" created \(state: (\w+)\)`)

// createdID returns the short ID and store kind `run` printed.
func createdID(t *testing.T, out string) (string, string) {
	t.Helper()
	m := createdRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no created line in:\n%s", out)
	}
	return m[1], m[2]
}

// statusOf reads a restart with `status -json`.
func statusOf(t *testing.T, ctx context.Context, e cliEnv, id string) *restart.Record {
	t.Helper()
	code, out, errOut := e.run(ctx, "status", "-json", id)
	if code != 0 {
		t.Fatalf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	var rec restart.Record
	if err := json.Unmarshal([]byte(out), &rec); err != nil {
		t.Fatalf("status -json: %v\n%s", err, out)
	}
	return &rec
}

// waitRestart waits for the newest restart of job to satisfy cond and returns its short ID.
func waitRestart(t *testing.T, ctx context.Context, e cliEnv, job string, cond func(*restart.Record) bool) string {
	t.Helper()
	var id string
	simtest.WaitFor(t, ctx, "the newest restart of "+job, func() bool {
		code, out, _ := e.run(ctx, "status", "-json", "-job="+job)
		var list []restart.Record
		if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) == 0 {
			return false
		}
		if cond(&list[0]) {
			id = list[0].ID[:8]
			return true
		}
		return false
	})
	return id
}

// assertMainRestarted checks that every running allocation's main task restarted want
// times.
func assertMainRestarted(t *testing.T, c *nomadsim.Cluster, jobID string, want uint64) {
	t.Helper()
	for id, tasks := range restarts(t, c, jobID) {
		if tasks["main"] != want {
			t.Errorf("alloc %s: main restarted %d times, want %d", id[:8], tasks["main"], want)
		}
	}
}

// assertRestartedOnce checks that every running allocation's main task restarted once.
func assertRestartedOnce(t *testing.T, c *nomadsim.Cluster, jobID string) {
	t.Helper()
	assertMainRestarted(t, c, jobID, 1)
}

// assertNoMutationsSince checks that no mutating request reached c since it had counted
// before.
func assertNoMutationsSince(t *testing.T, c *nomadsim.Cluster, before int64) {
	t.Helper()
	if after := c.Stats().Mutations; after != before {
		t.Fatalf("%d mutating requests reached Nomad", after-before)
	}
}
