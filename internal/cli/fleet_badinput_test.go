package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestFleetBadSelections runs every kind of wrong fleet command line and checks that each
// gives exit 1, exactly one line on stderr naming the problem, no mutating request to
// Nomad, no variable written and no allocation restarted.
func TestFleetBadSelections(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{},
		simpleJob("mix-web", api.JobTypeService, 2), simpleJob("mix-batch", api.JobTypeBatch, 1), simpleJob("mix-sb", api.JobTypeSysbatch, 1))
	ctx := testCtx(t)
	future := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name string
		args []string
		want string // a part of the one stderr line
	}{
		{"bad expression", []string{"-jobs", `Name ==`}, `Invalid -jobs expression "Name =="`},
		{"unknown field", []string{"-jobs", `Nope == "x"`}, `Invalid -jobs expression`},
		{"zero jobs", []string{"-jobs", `Name == "nosuch"`}, `selected no job in namespace "default"`},
		{"zero jobs across namespaces", []string{"-namespace", "*", "-jobs", `Name == "nosuch"`}, `selected no job in namespace "*"`},
		{"surge on a batch job", []string{"-jobs", `Name matches "^mix-"`, "-surge", "1"}, `-surge scales service jobs only`},
		{"reschedule on a sysbatch job", []string{"-jobs", `Name matches "^mix-"`, "-reschedule"}, `"sysbatch" are not allowed to be rescheduled`},
		{"state local", []string{"-jobs", `Name matches "^mix-"`, "-state", "local"}, "-state local cannot keep a fleet"},
		{"state local with dry-run", []string{"-jobs", `Name matches "^mix-"`, "-state=local", "-dry-run"}, "drop -state local"},
		{"a job and -jobs", []string{"-jobs", `Name matches "^mix-"`, "mix-web"}, "-jobs and a job argument"},
		{"max-parallel-jobs 0", []string{"-jobs", `Name matches "^mix-"`, "-max-parallel-jobs", "0"}, `Invalid -max-parallel-jobs value "0"`},
		{"max-failed-jobs negative", []string{"-jobs", `Name matches "^mix-"`, "-max-failed-jobs=-1"}, `Invalid -max-failed-jobs value "-1"`},
		{"max-parallel-jobs not a number", []string{"-jobs", `Name matches "^mix-"`, "-max-parallel-jobs", "two"}, `Invalid -max-parallel-jobs value "two": give a whole number`},
		{"bad order", []string{"-jobs", `Name matches "^mix-"`, "-order", "random"}, `Invalid -order value "random"`},
		{"bad busy", []string{"-jobs", `Name matches "^mix-"`, "-busy", "queue"}, `Invalid -busy value "queue"`},
		{"fleet option without -jobs", []string{"-max-parallel-jobs", "2", "mix-web"}, "-max-parallel-jobs applies to fleet restarts only"},
		{"scheduled fleet, bad expression", []string{"-jobs", `Name ==`, "-at", future}, `Invalid -jobs expression "Name =="`},
		{"scheduled fleet, zero jobs", []string{"-jobs", `Name == "nosuch"`, "-every", "@daily"}, `selected no job in namespace "default"`},
		{"scheduled fleet, surge on a batch job", []string{"-jobs", `Name matches "^mix-"`, "-surge", "1", "-at", future}, `-surge scales service jobs only`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := c.Stats().Mutations
			args := append([]string{"run", "-on-error=fail"}, tc.args...)
			code, out, errOut := e.run(ctx, args...)
			if code != 1 {
				t.Fatalf("exit %d, want 1\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			}
			if lines := strings.Split(strings.TrimRight(errOut, "\n"), "\n"); len(lines) != 1 || strings.TrimSpace(lines[0]) == "" {
				t.Fatalf("want exactly one line on stderr, got %d:\n%s", len(lines), errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Fatalf("stderr %q does not contain %q", errOut, tc.want)
			}
			t.Logf("stderr: %s", strings.TrimSpace(errOut))
			if after := c.Stats().Mutations; after != before {
				t.Fatalf("%d mutating requests reached Nomad", after-before)
			}
		})
	}
	vars, _, err := adminClient(t, c).Variables().PrefixList("nomad-restart", &api.QueryOptions{Namespace: "*"})
	if err != nil || len(vars) != 0 {
		t.Errorf("variables written by refused fleets: %d (%v)", len(vars), err)
	}
	for _, job := range []string{"mix-web", "mix-batch"} {
		assertMainRestarted(t, c, job, 0)
	}
}
