package nomadsim

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestRegisterAndRun(t *testing.T) {
	c, cl := startCluster(t, Options{})
	resp, _, err := cl.Jobs().Register(serviceJob("sleepy", 3), nil)
	if err != nil {
		t.Fatalf("register: %v", err)
	}
	if resp.EvalID == "" || resp.JobModifyIndex == 0 {
		t.Fatalf("register response lacks eval or index: %+v", resp)
	}
	if err := c.WaitJobRunning(ctxT(t), "default", "sleepy"); err != nil {
		t.Fatal(err)
	}
	allocs, meta, err := cl.Jobs().Allocations("sleepy", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 3 || meta.LastIndex == 0 {
		t.Fatalf("got %d allocs, index %d", len(allocs), meta.LastIndex)
	}
	names := map[string]bool{}
	for _, a := range allocs {
		if a.ClientStatus != api.AllocClientStatusRunning {
			t.Errorf("alloc %s is %s", a.ID, a.ClientStatus)
		}
		names[a.Name] = true
	}
	for _, n := range []string{"sleepy.g[0]", "sleepy.g[1]", "sleepy.g[2]"} {
		if !names[n] {
			t.Errorf("missing alloc name %s in %v", n, names)
		}
	}
	job, _, err := cl.Jobs().Info("sleepy", nil)
	if err != nil {
		t.Fatal(err)
	}
	if *job.Status != "running" || *job.Version != 0 {
		t.Errorf("job status %s version %d", *job.Status, *job.Version)
	}
}
