package cli

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestTargeting plans (-dry-run -json) with -filter, -node and -datacenter and checks the
// allocations kept against Nomad's own view; a bad filter is one line naming -filter.
func TestTargeting(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, testJob("web", api.JobTypeService))
	ctx := testCtx(t)
	all := allocsOf(t, c, "web")
	dcOf := map[string]string{}
	nodes, _, err := adminClient(t, c).Nodes().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		dcOf[n.ID] = n.Datacenter
	}
	want := func(keep func(a *api.Allocation) bool) []string {
		var out []string
		for _, a := range all {
			if keep(a) {
				out = append(out, a.ID)
			}
		}
		sort.Strings(out)
		return out
	}
	plan := func(args ...string) []string {
		t.Helper()
		code, out, errOut := e.run(ctx, append(append([]string{"run", "-dry-run", "-json", "-on-error=fail", "-batch-size=100%"}, args...), "web")...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s\n%s", args, code, out, errOut)
		}
		var rec restart.Record
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		var ids []string
		for _, a := range rec.Allocs {
			ids = append(ids, a.ID)
		}
		sort.Strings(ids)
		return ids
	}
	node := all[0].NodeID
	for _, tc := range []struct {
		name string
		args []string
		keep func(a *api.Allocation) bool
	}{
		{"filter on the group", []string{`-filter=TaskGroup == "single_task"`}, func(a *api.Allocation) bool { return a.TaskGroup == "single_task" }},
		{"node prefix", []string{"-node=" + node[:8]}, func(a *api.Allocation) bool { return a.NodeID == node }},
		{"datacenter", []string{"-datacenter=dc2"}, func(a *api.Allocation) bool { return dcOf[a.NodeID] == "dc2" }},
		{"filter and datacenter", []string{`-filter=TaskGroup == "multiple_tasks"`, "-datacenter=dc1"}, func(a *api.Allocation) bool {
			return a.TaskGroup == "multiple_tasks" && dcOf[a.NodeID] == "dc1"
		}},
	} {
		got, exp := plan(tc.args...), want(tc.keep)
		if len(exp) == 0 || len(exp) == len(all) {
			t.Fatalf("%s: the case selects %d of %d allocations; it must narrow the plan", tc.name, len(exp), len(all))
		}
		if strings.Join(got, ",") != strings.Join(exp, ",") {
			t.Errorf("%s: planned %v, want %v", tc.name, got, exp)
		}
	}
	code, _, errOut := e.run(ctx, "run", "-dry-run", "-on-error=fail", "-filter=TaskGroup ==", "web")
	if code != 1 || !strings.Contains(errOut, "invalid -filter") || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("bad filter: exit %d %q", code, errOut)
	}
}
