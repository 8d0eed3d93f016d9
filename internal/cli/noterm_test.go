package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestCommandsThatAskNothingRunWithoutATerminal runs, off a terminal and without -yes, every
// command that asks nothing and changes nothing (a dry run with its default -on-error ask,
// or with -batch-wait ask; status; schedules), as a script or a CI job does: each exits 0
// with nothing on stderr and writes nothing to Nomad (but for status' lease probe, see
// probesLease). A real run that could ask is still refused there.
func TestCommandsThatAskNothingRunWithoutATerminal(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 2))
	ctx := testCtx(t)
	id, _ := e.runDetached(t, ctx, "web") // a record for status to show

	cases := []struct {
		name string
		args []string
		want string // in stdout
		// probesLease: status of a restart in flight says whether a process drives it by
		// taking the restart's lease and releasing it at once (store.LeaseFree): two writes
		// to the lease variable, none to the restart or the job.
		probesLease bool
	}{
		{"dry run with the defaults", []string{"run", "-dry-run", "web"}, "on-error=ask", false},
		{"dry run with -batch-wait ask", []string{"run", "-dry-run", "-batch-size=1", "-batch-wait=ask", "web"}, "then asks before the next batch", false},
		{"dry run as JSON", []string{"run", "-dry-run", "-json", "web"}, `"OnError":"ask"`, false},
		{"status", []string{"status"}, id, false},
		{"status of one restart", []string{"status", id}, "web", true},
		{"status as JSON", []string{"status", "-json"}, id, false},
		{"schedules", []string{"schedules"}, "No schedules", false},
		{"schedules as JSON", []string{"schedules", "-json"}, "[]", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := c.Stats().Mutations
			code, out, errOut := e.run(ctx, tc.args...)
			if code != 0 || errOut != "" {
				t.Fatalf("%q off a terminal: exit %d\nstderr: %s\nstdout: %s", tc.args, code, errOut, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("%q: output lacks %q:\n%s", tc.args, tc.want, out)
			}
			if !tc.probesLease {
				assertNoMutationsSince(t, c, before)
			}
		})
	}

	var plan restart.Record
	_, out, _ := e.run(ctx, "run", "-dry-run", "-json", "web")
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Allocs) != 2 || plan.Spec.OnError != restart.OnErrorAsk {
		t.Fatalf("dry-run plan as JSON: %v %+v\n%s", err, plan.Spec, out)
	}
	before := c.Stats().Mutations

	// Without -dry-run, "ask" still needs someone to answer: refused before anything changes.
	code, out, errOut := e.run(ctx, "run", "web")
	if code != 1 || !strings.Contains(errOut, `Invalid -on-error value "ask": "ask" needs an interactive terminal`) || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("run off a terminal: exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
	assertNoMutationsSince(t, c, before)
}

// TestParseRunArgsDryRunAsksNothing: off a terminal, a dry run takes the "ask" options as
// given (its plan shows them) while a run that would ask is refused.
func TestParseRunArgsDryRunAsksNothing(t *testing.T) {
	cases := []struct {
		args    []string
		refused string // "" when accepted
	}{
		{[]string{"-dry-run", "web"}, ""},
		{[]string{"-dry-run", "-json", "web"}, ""},
		{[]string{"-dry-run", "-batch-wait=ask", "-on-error=ask", "web"}, ""},
		{[]string{"web"}, `Invalid -on-error value "ask"`},
		{[]string{"-json", "-on-error=fail", "-batch-wait=ask", "web"}, `Invalid -batch-wait value "ask"`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseRunArgs(tc.args, false)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused == "" && o.spec.OnError != restart.OnErrorAsk:
				t.Fatalf("the plan shows on-error=%s, want the option as given", o.spec.OnError)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("err = %v, want %q", err, tc.refused)
			}
		})
	}
}
