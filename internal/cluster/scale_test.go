package cluster_test

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestScaleGroupE2E: JobScale reads counts, the scaling policy and the update strategy;
// ScaleGroup scales with Nomad's scale endpoint (a scaling event with our message, a new
// JobModifyIndex) and the deployment Nomad makes for it carries that index.
func TestScaleGroupE2E(t *testing.T) {
	sim := startSim(t, nomadsim.Options{})
	job := serviceJob("default", "web", 1)
	job.TaskGroups[0].Scaling = &api.ScalingPolicy{Min: new(int64(1)), Max: new(int64(4)), Policy: map[string]any{}}
	simtest.RegisterRunning(t, sim, job)
	n := newNomad(t, sim, "")
	ctx := testCtx(t)

	js, err := n.JobScale(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	g := js.Groups["web"]
	if js.Type != "service" || g.Count != 1 || !g.Scaling || g.Min != 1 || g.Max != 4 || !g.Rolling || js.JobModifyIndex == 0 {
		t.Fatalf("JobScale %+v group %+v", js, g)
	}
	res, err := n.ScaleGroup(ctx, "default", "web", "web", 2, js.JobModifyIndex, "nomad-restart test: surge")
	if err != nil {
		t.Fatal(err)
	}
	if res.JobModifyIndex <= js.JobModifyIndex || res.EvalID == "" {
		t.Fatalf("scale result %+v, want a new JobModifyIndex past %d and an evaluation", res, js.JobModifyIndex)
	}
	after, err := n.JobScale(ctx, "default", "web")
	if err != nil || after.Groups["web"].Count != 2 || after.JobModifyIndex != res.JobModifyIndex || after.Version != js.Version+1 {
		t.Fatalf("after the scale: %+v %v, want count 2, a new version, JobModifyIndex %d", after, err, res.JobModifyIndex)
	}
	st, _, err := n.Client().Jobs().ScaleStatus("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if evs := st.TaskGroups["web"].Events; len(evs) != 1 || evs[0].Message != "nomad-restart test: surge" || evs[0].Count == nil || *evs[0].Count != 2 {
		t.Fatalf("scaling events %+v", evs)
	}
	// The group has an update strategy: Nomad makes a deployment for the new version.
	var idx uint64
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, next, err := n.LatestDeployment(ctx, "default", "web", idx)
		if err != nil {
			t.Fatal(err)
		}
		if d != nil && d.JobSpecModifyIndex == res.JobModifyIndex {
			if d.JobVersion != after.Version {
				t.Errorf("deployment of version %d, want %d", d.JobVersion, after.Version)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no deployment for the scale; latest %+v", d)
		}
		idx = next
	}
}

// TestScaleGroupPermission: a token without scale-job (or submit-job) is refused with
// ErrPermissionDenied; one with scale-job scales.
func TestScaleGroupPermission(t *testing.T) {
	sim := startSim(t, nomadsim.Options{ACLs: true})
	simtest.RegisterRunning(t, sim, serviceJob("default", "web", 1))
	ctx := testCtx(t)
	reader := simtest.Token(t, sim, "reader", `namespace "default" { capabilities = ["read-job"] }`)
	scaler := simtest.Token(t, sim, "scaler", `namespace "default" { capabilities = ["read-job", "scale-job"] }`)
	js, err := newNomad(t, sim, reader).JobScale(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	_, err = newNomad(t, sim, reader).ScaleGroup(ctx, "default", "web", "web", 2, js.JobModifyIndex, "x")
	if !errors.Is(err, cluster.ErrPermissionDenied) {
		t.Fatalf("reader scaling: %v, want permission denied", err)
	}
	if _, err := newNomad(t, sim, scaler).ScaleGroup(ctx, "default", "web", "web", 2, js.JobModifyIndex, "x"); err != nil {
		t.Fatalf("scale-job token: %v", err)
	}
}

// TestJobScaleMaxCount: JobScale tells the servers' job_max_count where the token may read
// the agent's configuration (agent:read): as configured, or Nomad's default when unset.
// Without agent:read it is unknown until a scale past it is refused: the refusal is a
// *JobMaxCountError with Nomad's text, not transient, and teaches the limit.
func TestJobScaleMaxCount(t *testing.T) {
	ctx := testCtx(t)
	def := startSim(t, nomadsim.Options{})
	simtest.RegisterRunning(t, def, serviceJob("default", "web", 1))
	if js, err := newNomad(t, def, "").JobScale(ctx, "default", "web"); err != nil || js.MaxCount != 50000 {
		t.Fatalf("unset job_max_count: %+v %v, want MaxCount 50000 (Nomad's default)", js, err)
	}

	sim := startSim(t, nomadsim.Options{ACLs: true, JobMaxCount: new(3)})
	simtest.RegisterRunning(t, sim, serviceJob("default", "web", 2))
	if js, err := newNomad(t, sim, sim.BootstrapToken()).JobScale(ctx, "default", "web"); err != nil || js.MaxCount != 3 {
		t.Fatalf("management token: %+v %v, want MaxCount 3", js, err)
	}
	scaler := simtest.Token(t, sim, "scaler", `namespace "default" { capabilities = ["read-job", "scale-job"] }`)
	n := newNomad(t, sim, scaler)
	js, err := n.JobScale(ctx, "default", "web")
	if err != nil || js.MaxCount != 0 {
		t.Fatalf("without agent:read: %+v %v, want MaxCount 0 (unknown)", js, err)
	}
	_, err = n.ScaleGroup(ctx, "default", "web", "web", 5, js.JobModifyIndex, "x")
	var tooMany *cluster.JobMaxCountError
	if !errors.As(err, &tooMany) || tooMany.Total != 5 || tooMany.Max != 3 || cluster.IsTransient(err) ||
		tooMany.Nomad != "total count was greater than configured job_max_count: 5 > 3" {
		t.Fatalf("scale past the limit: %v, want a permanent *JobMaxCountError 5 > 3", err)
	}
	if js, err := n.JobScale(ctx, "default", "web"); err != nil || js.MaxCount != 3 || js.Groups["web"].Count != 2 {
		t.Fatalf("after the refusal: %+v %v, want MaxCount 3 learnt, count still 2", js, err)
	}
}
