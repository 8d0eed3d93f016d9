package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestDryRun prints the plan with progressive batches (1, then 50% of 5 rounded up, then
// the rest) and what gates each, and changes nothing: no mutating request reaches Nomad
// and no restart is recorded.
func TestDryRun(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{},
		testJob("web", api.JobTypeService), checkedJob("checked", 2, "pass", 3*time.Second, 2*time.Minute))
	e.consul = c.ConsulAddr()
	ctx := testCtx(t)
	before := c.Stats().Mutations

	code, out, errOut := e.run(ctx, "run", "-dry-run", "-on-error=fail", "-state=local", "-batch-size=1,50%", "web")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"Dry run", "would restart 5 allocations in 3 batches", "1st batch, 1 allocation;", "2nd batch, 3 allocations;",
		"3rd batch, 1 allocation;", "batch-size=1,50%", "group single_task", "web.single_task[", "done when its tasks run again (deadline 5m0s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, a := range allocsOf(t, c, "web") {
		if !strings.Contains(out, a.ID[:8]) || !strings.Contains(out, a.NodeID[:8]) {
			t.Errorf("allocation %s or its node %s missing from the plan:\n%s", a.ID[:8], a.NodeID[:8], out)
		}
	}

	code, out, errOut = e.run(ctx, "run", "-dry-run", "-on-error=fail", "-state=local", "-json", "checked")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var rec restart.Record
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rec); err != nil {
		t.Fatalf("-json plan: %v\n%s", err, out)
	}
	if rec.Spec.Health != restart.HealthChecks || rec.Spec.GroupHealth["web"].MinHealthyTime != 3*time.Second || len(rec.Allocs) != 2 {
		t.Fatalf("plan %+v", rec.Spec)
	}

	assertNoMutationsSince(t, c, before)
	if recs, err := e.localStore(t).List(ctx, store.Filter{}); err != nil || len(recs) != 0 {
		t.Fatalf("recorded %d restarts (%v)", len(recs), err)
	}
}

// TestDryRunSurge shows the surge step of a -surge restart and changes nothing.
func TestDryRunSurge(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, simpleJob("one", api.JobTypeService, 1))
	ctx := testCtx(t)
	before := c.Stats().Mutations
	code, out, errOut := e.run(ctx, "run", "-dry-run", "-on-error=fail", "-state=local", "-surge=1", "one")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"surge=1", "Surge: before the 1st batch, scale each targeted group up by 1", "scale each group back"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	assertNoMutationsSince(t, c, before)
	if st, _, err := simtest.Client(t, c).Jobs().ScaleStatus("one", nil); err != nil || st.TaskGroups["web"].Desired != 1 || len(st.TaskGroups["web"].Events) != 0 {
		t.Fatalf("scale status after a dry run: %+v %v", st, err)
	}
}
