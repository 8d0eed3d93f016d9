package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestFleetACLSelectsOnlyListableNamespaces runs a fleet across namespaces ("*") with a
// token that may list and restart the jobs of namespace team-a only: the fleet selects
// team-a's jobs, restarts each once, and neither reads into nor writes anything in team-b.
func TestFleetACLSelectsOnlyListableNamespaces(t *testing.T) {
	c := startSim(t, nomadsim.Options{ACLs: true})
	admin := adminClient(t, c)
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.Namespaces().Register(&api.Namespace{Name: ns}, nil); err != nil {
			t.Fatalf("namespace %s: %v", ns, err)
		}
	}
	registerFleetJobs(t, c, "team-a", "fa", 2, 2)
	registerFleetJobs(t, c, "team-b", "fb", 2, 2)
	vars := `variables { path "nomad-restart/*" { capabilities = ["write", "read", "list", "destroy"] } }`
	token, err := c.CreateToken("team-a-operator", map[string]string{"team-a-operator": `
namespace "team-a" { capabilities = ["list-jobs", "read-job", "alloc-lifecycle"] ` + vars + ` }
namespace "default" { ` + vars + ` }`})
	if err != nil {
		t.Fatal(err)
	}
	e := newCLIEnv(t, c)
	e.token = token
	ctx := testCtx(t)

	code, out, errOut := e.run(ctx, "run", "-namespace", "*", "-jobs", `Name matches "^f"`, "-max-parallel-jobs", "2", "-on-error=fail")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 0 || !strings.Contains(out, "Fleet restarted 2 jobs successfully!") || !strings.Contains(out, "[team-a/fa-0]") {
		t.Fatalf("run -namespace '*' -jobs: exit %d", code)
	}
	id := fleetIDIn(t, out)
	f := fleetOf(t, ctx, e, id)
	if f.Namespace != "default" || f.Selection.Namespace != "*" || f.Status != restart.StatusSucceeded {
		t.Errorf("fleet recorded in %q, selection %q, status %s", f.Namespace, f.Selection.Namespace, f.Status)
	}
	for _, j := range f.Jobs {
		if j.Namespace != "team-a" || j.Status != fleet.JobSucceeded {
			t.Errorf("job %s/%s in the fleet: %s", j.Namespace, j.JobID, j.Status)
		}
	}
	checkFleetOnce(t, ctx, c, e, f)
	for _, job := range []string{"fb-0", "fb-1"} {
		counts, err := simtest.CountRestarts(ctx, admin, "team-b", job)
		if err != nil || len(counts.InPlace) != 0 || len(counts.Replaced) != 0 {
			t.Errorf("job %s of team-b restarted: %v (%v)", job, counts, err)
		}
	}
	bVars, _, err := admin.Variables().PrefixList("nomad-restart", &api.QueryOptions{Namespace: "team-b"})
	if err != nil || len(bVars) != 0 {
		t.Errorf("variables written in team-b: %d (%v)", len(bVars), err)
	}
}

// TestFleetACLVariablesDenied refuses, in one line and before any record or restart, a
// fleet whose token may not keep the fleet's record (in "default" for '*') or its jobs'
// restarts (in their namespace) in Nomad Variables.
func TestFleetACLVariablesDenied(t *testing.T) {
	c := startSim(t, nomadsim.Options{ACLs: true})
	admin := adminClient(t, c)
	if _, err := admin.Namespaces().Register(&api.Namespace{Name: "team-a"}, nil); err != nil {
		t.Fatal(err)
	}
	registerFleetJobs(t, c, "team-a", "fa", 2, 1)
	vars := `variables { path "nomad-restart/*" { capabilities = ["write", "read", "list", "destroy"] } }`
	jobs := `capabilities = ["list-jobs", "read-job", "alloc-lifecycle"]`
	cases := []struct {
		name, rules, want string
	}{
		{"no variables in the fleet's home", `namespace "team-a" { ` + jobs + ` ` + vars + ` }`,
			`Nomad denied "write" on variable "nomad-restart/~fleets/`},
		{"no variables in the jobs' namespace", `namespace "team-a" { ` + jobs + ` } namespace "default" { ` + vars + ` }`,
			`cannot keep the restarts of the fleet's jobs in namespace "team-a"`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			token, err := c.CreateToken(fmt.Sprintf("operator-%d", i), map[string]string{fmt.Sprintf("operator-%d", i): tc.rules})
			if err != nil {
				t.Fatal(err)
			}
			e := newCLIEnv(t, c)
			e.token = token
			code, out, errOut := e.run(testCtx(t), "run", "-namespace", "*", "-jobs", `Name matches "^fa-"`, "-on-error=fail")
			if lines := strings.Split(strings.TrimSpace(errOut), "\n"); code != 1 || len(lines) != 1 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, want 1 and one line with %q\nstdout:\n%s\nstderr:\n%s", code, tc.want, out, errOut)
			}
			t.Logf("stderr: %s", errOut)
		})
	}
	all, _, err := admin.Variables().PrefixList("nomad-restart", &api.QueryOptions{Namespace: "*"})
	if err != nil || len(all) != 0 {
		t.Errorf("variables written by refused fleets: %d (%v)", len(all), err)
	}
	for _, job := range []string{"fa-0", "fa-1"} {
		if counts, err := simtest.CountRestarts(testCtx(t), admin, "team-a", job); err != nil || len(counts.InPlace) != 0 {
			t.Errorf("job %s restarted by a refused fleet: %v (%v)", job, counts, err)
		}
	}
}
