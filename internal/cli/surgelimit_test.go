package cli

import (
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestRunSurgePastJobMaxCountRefused: `run -surge` past the servers' job_max_count (read
// from the agent's configuration; unset, Nomad's default of 50000) is refused at planning,
// in one line that names the limit and the fix, with exit 1: nothing is recorded, nothing
// changes in the cluster.
func TestRunSurgePastJobMaxCountRefused(t *testing.T) {
	c, e, ctx := startWebEnv(t, 2)
	runRefused(t, ctx, e, c, true, `-surge 100000000 would take job "web" to 100000002 allocations in all, past the 50000 its Nomad servers allow (job_max_count); lower -surge to at most 49998`,
		"run", "-on-error", "fail", "-surge", "100000000", "web")
	runRefused(t, ctx, e, c, true, `lower -surge to at most 49998`,
		"run", "-state=local", "-on-error", "fail", "-surge", "49999", "web")
	if recs := e.localRecords(t, ctx, ""); len(recs) != 0 {
		t.Fatalf("local store: %d records, want none", len(recs))
	}
	if _, out, _ := e.run(ctx, "status"); strings.Contains(out, "web") {
		t.Errorf("status lists a restart of web:\n%s", out)
	}
}

// TestRunSurgeLimitLearntAtScale: with a token that may not read the agent's configuration
// (no agent:read), job_max_count is unknown at planning; Nomad's refusal of the scale-up
// (a 500, permanent) then fails the restart at once with Nomad's text and the fix, rather
// than being retried as a passing failure: nothing was restarted, the count is as it was.
func TestRunSurgeLimitLearntAtScale(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true, JobMaxCount: new(3)})
	register(t, c, simpleJob("web", api.JobTypeService, 2))
	e := newCLIEnvAs(t, c, "surger", `namespace "default" { capabilities = ["read-job", "list-jobs", "alloc-lifecycle", "scale-job"] }`)
	ctx := testCtx(t)
	code, out, errOut := e.run(ctx, "run", "-state=local", "-on-error", "fail", "-yes", "-surge", "2", "web")
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, want := range []string{"total count was greater than configured job_max_count: 4 > 3", "lower -surge to at most 1", "raise the servers' job_max_count"} {
		if !strings.Contains(out+errOut, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	recs := e.localRecords(t, ctx, "")
	if len(recs) != 1 {
		t.Fatalf("local store: %d records, want 1", len(recs))
	}
	rec := recs[0]
	if rec.Status != restart.StatusFailed || !strings.Contains(rec.Reason, "job_max_count: 4 > 3") || strings.Contains(rec.Reason, "\n") {
		t.Errorf("record %s %q, want failed in one line with Nomad's text", rec.Status, rec.Reason)
	}
	for _, a := range rec.Allocs {
		if a.State != restart.AllocPending {
			t.Errorf("allocation %s is %s, want untouched", a.ID, a.State)
		}
	}
	job, _, err := adminClient(t, c).Jobs().Info("web", nil)
	if err != nil || *job.TaskGroups[0].Count != 2 || *job.Version != 0 {
		t.Errorf("job after the refusal: count %d version %d (%v), want 2 and version 0", *job.TaskGroups[0].Count, *job.Version, err)
	}
}
