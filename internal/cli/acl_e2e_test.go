package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestACLCombinations follows Nomad's ACL tests of `nomad job restart`, plus where the
// record goes with -state auto.
func TestACLCombinations(t *testing.T) {
	c := startSim(t, nomadsim.Options{ACLs: true})
	register(t, c, simpleJob("secure", api.JobTypeService, 2))
	n := 0
	token := func(rules string) string {
		t.Helper()
		n++
		name := fmt.Sprintf("policy-%d", n)
		s, err := c.CreateToken("token-"+name, map[string]string{name: rules})
		if err != nil {
			t.Fatalf("token %q: %v", rules, err)
		}
		return s
	}
	ns := func(caps string, extra string) string {
		return `namespace "default" { capabilities = [` + caps + `] ` + extra + ` }`
	}
	vars := `variables { path "nomad-restart/*" { capabilities = ["write", "read", "list", "destroy"] } }`
	cases := []struct {
		name  string
		token string
		job   string
		code  int
		want  string
	}{
		{"no token", "", "secure", 1, "Permission denied"},
		{"alloc-lifecycle alone", token(ns(`"alloc-lifecycle"`, "")), "secure", 1, "Permission denied"},
		{"read-job alone", token(ns(`"read-job"`, "")), "secure", 1, `needs the alloc-lifecycle capability in namespace "default"`},
		{"alloc-lifecycle and read-job, record kept locally", token(ns(`"alloc-lifecycle", "read-job"`, "")), "secure", 0, "(state: local)"},
		{"prefix without list-jobs", token(ns(`"alloc-lifecycle", "read-job"`, "")), "secu", 1, "No job(s) with prefix or ID"},
		{"prefix with list-jobs", token(ns(`"alloc-lifecycle", "read-job", "list-jobs"`, "")), "secu", 0, "Job restarted successfully!"},
		{"variables write, record in Nomad", token(ns(`"alloc-lifecycle", "read-job"`, vars)), "secure", 0, "(state: nomad)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLIEnv(t, c)
			e.token = tc.token
			code, out, errOut := e.run(testCtx(t), "run", "-on-error=fail", tc.job)
			t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
			if code != tc.code || !strings.Contains(out+errOut, tc.want) {
				t.Fatalf("exit %d (want %d), want %q in:\n%s\n%s", code, tc.code, tc.want, out, errOut)
			}
		})
	}
}
