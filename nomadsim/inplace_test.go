package nomadsim

import (
	"testing"
)

// TestInPlaceUpdateTakesEvalID: an allocation updated in place (here by a scale-up, whose
// count change is not destructive) carries the new evaluation's ID, so that evaluation's
// allocations list it, as Nomad's scheduler does.
func TestInPlaceUpdateTakesEvalID(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 50})
	job := serviceJob("web", 1)
	a := runningAlloc(t, c, cl, job)
	job.TaskGroups[0].Count = ptr(2)
	resp, _, err := cl.Jobs().Register(job, nil)
	if err != nil {
		t.Fatal(err)
	}
	x, _, err := cl.Allocations().Info(a.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if x.EvalID != resp.EvalID {
		t.Errorf("in-place updated allocation's EvalID %s, want the update's evaluation %s (was %s)", x.EvalID, resp.EvalID, a.EvalID)
	}
	stubs, _, err := cl.Evaluations().Allocations(resp.EvalID, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range stubs {
		found = found || s.ID == a.ID
	}
	if !found {
		t.Errorf("evaluation %s does not list the in-place updated allocation %s", resp.EvalID, a.ID)
	}
}

// TestJobDispatchTokenEmpty: Nomad answers "" for a job's DispatchIdempotencyToken, never null.
func TestJobDispatchTokenEmpty(t *testing.T) {
	c, cl := startCluster(t, Options{})
	runningAlloc(t, c, cl, serviceJob("web", 1))
	job, _, err := cl.Jobs().Info("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if job.DispatchIdempotencyToken == nil || *job.DispatchIdempotencyToken != "" {
		t.Errorf("DispatchIdempotencyToken %v, want a pointer to \"\"", job.DispatchIdempotencyToken)
	}
}
