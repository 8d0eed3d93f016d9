package nomadsim

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/testhttp"
)

// scaleTo scales group g of the job through the HTTP API and fails the test on an error.
func scaleTo(t *testing.T, cl *api.Client, jobID string, count int64, jobModifyIndex uint64) *api.JobRegisterResponse {
	t.Helper()
	resp, _, err := cl.Jobs().ScaleWithRequest(jobID, &api.ScalingRequest{
		Count: &count, Target: map[string]string{"Job": jobID, "Group": "g"}, Message: "test", JobModifyIndex: jobModifyIndex,
	}, nil)
	if err != nil {
		t.Fatalf("scale %s to %d: %v", jobID, count, err)
	}
	return resp
}

// settledJob registers the job and waits for its allocations to run and its deployment to
// be successful.
func settledJob(t *testing.T, c *Cluster, cl *api.Client, job *api.Job) *api.Job {
	t.Helper()
	registerRunning(t, c, cl, job)
	got, _, err := cl.Jobs().Info(*job.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// waitDeployment waits for the job's latest deployment of version to reach a final status.
func waitDeployment(t *testing.T, cl *api.Client, jobID string, version uint64) *api.Deployment {
	t.Helper()
	return waitLatestDeployment(t, cl, jobID, "the deployment of version "+strconv.Itoa(int(version))+" to end", func(d *api.Deployment) bool {
		return d.JobVersion == version && !sim.DeploymentActive(d)
	})
}

func allocByName(t *testing.T, cl *api.Client, jobID, name string) *api.Allocation {
	t.Helper()
	stubs, _, err := cl.Jobs().Allocations(jobID, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stubs {
		if s.Name == name {
			a, _, err := cl.Allocations().Info(s.ID, nil)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	t.Fatalf("no allocation %s", name)
	return nil
}

// TestScaleUpDeploymentIncludesInPlaceAllocs: a scale-up of a group with an update strategy
// makes a deployment for the new version that the allocation updated in place joins (its
// health reset, healthy again min_healthy_time after the update), and the deployment ends
// successful once it and the new allocation are healthy, as in Nomad.
func TestScaleUpDeploymentIncludesInPlaceAllocs(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := settledJob(t, c, cl, serviceJob("up", 1))
	first := allocByName(t, cl, "up", "up.g[0]")
	resp := scaleTo(t, cl, "up", 2, *job.JobModifyIndex)

	d := waitDeployment(t, cl, "up", 1)
	if d.Status != api.DeploymentStatusSuccessful {
		t.Fatalf("scale-up deployment %s: %s (%s), want successful", d.ID, d.Status, d.StatusDescription)
	}
	st := d.TaskGroups["g"]
	if st.DesiredTotal != 2 || st.PlacedAllocs != 2 || st.HealthyAllocs != 2 {
		t.Errorf("deployment group state: DesiredTotal %d PlacedAllocs %d HealthyAllocs %d, want 2 2 2", st.DesiredTotal, st.PlacedAllocs, st.HealthyAllocs)
	}
	a := allocByName(t, cl, "up", "up.g[0]")
	if a.ID != first.ID {
		t.Fatalf("up.g[0] was replaced (%s, was %s); a scale updates it in place", a.ID, first.ID)
	}
	if a.DeploymentID != d.ID || *a.Job.Version != 1 || a.EvalID != resp.EvalID {
		t.Errorf("in-place updated allocation: DeploymentID %s Version %d EvalID %s, want %s 1 %s", a.DeploymentID, *a.Job.Version, a.EvalID, d.ID, resp.EvalID)
	}
	if a.DeploymentStatus == nil || a.DeploymentStatus.Healthy == nil || !*a.DeploymentStatus.Healthy {
		t.Fatalf("in-place updated allocation's deployment status %+v, want healthy", a.DeploymentStatus)
	}
	st0 := statusTime(t, cl, "up")
	if got := a.DeploymentStatus.Timestamp.Sub(st0); got < time.Second {
		t.Errorf("in-place updated allocation healthy %v after the scale, want at least its min_healthy_time (1s): its health is watched afresh", got)
	}
	if first.DeploymentStatus == nil || !a.DeploymentStatus.Timestamp.After(first.DeploymentStatus.Timestamp) {
		t.Errorf("in-place updated allocation kept its old health (%v)", a.DeploymentStatus.Timestamp)
	}
	versions, _, _, err := cl.Jobs().Versions("up", false, nil)
	if err != nil || len(versions) != 2 || versions[0].Stable == nil || !*versions[0].Stable {
		t.Errorf("job versions after the scale-up: %d (err %v), want 2 with the newest stable", len(versions), err)
	}
}

// statusTime is the time of the job's latest scaling event of group g.
func statusTime(t *testing.T, cl *api.Client, jobID string) time.Time {
	t.Helper()
	s, _, err := cl.Jobs().ScaleStatus(jobID, nil)
	if err != nil || len(s.TaskGroups["g"].Events) == 0 {
		t.Fatalf("scale status: %+v %v", s, err)
	}
	return time.Unix(0, int64(s.TaskGroups["g"].Events[0].Time))
}

// TestScaleDownMakesDeployment: a scale-down of a group with an update strategy stops the
// highest name index (it keeps its version) and makes a deployment of the remaining
// allocations, updated in place, which ends successful.
func TestScaleDownMakesDeployment(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := settledJob(t, c, cl, serviceJob("down", 2))
	waitDeployment(t, cl, "down", 0)
	resp := scaleTo(t, cl, "down", 1, *job.JobModifyIndex)
	d := waitDeployment(t, cl, "down", 1)
	if d.Status != api.DeploymentStatusSuccessful {
		t.Fatalf("scale-down deployment: %s (%s), want successful", d.Status, d.StatusDescription)
	}
	if st := d.TaskGroups["g"]; st.DesiredTotal != 1 || st.PlacedAllocs != 1 || st.HealthyAllocs != 1 {
		t.Errorf("deployment group state: DesiredTotal %d PlacedAllocs %d HealthyAllocs %d, want 1 1 1", st.DesiredTotal, st.PlacedAllocs, st.HealthyAllocs)
	}
	kept, gone := allocByName(t, cl, "down", "down.g[0]"), allocByName(t, cl, "down", "down.g[1]")
	if kept.DeploymentID != d.ID || *kept.Job.Version != 1 {
		t.Errorf("kept allocation: DeploymentID %s Version %d, want %s 1", kept.DeploymentID, *kept.Job.Version, d.ID)
	}
	if gone.DesiredStatus != api.AllocDesiredStatusStop || *gone.Job.Version != 0 || gone.DeploymentID == d.ID {
		t.Errorf("stopped allocation: DesiredStatus %s Version %d DeploymentID %s, want stop, version 0, its old deployment", gone.DesiredStatus, *gone.Job.Version, gone.DeploymentID)
	}
	ev, _, err := cl.Evaluations().Info(resp.EvalID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ev.DeploymentID != d.ID {
		t.Errorf("scale evaluation's DeploymentID %q, want %s", ev.DeploymentID, d.ID)
	}
	du := ev.PlanAnnotations.DesiredTGUpdates["g"]
	if du.Stop != 1 || du.InPlaceUpdate != 1 || du.Ignore != 0 || du.Place != 0 {
		t.Errorf("scale evaluation's plan: Stop %d InPlaceUpdate %d Ignore %d Place %d, want 1 1 0 0 (as Nomad plans it)", du.Stop, du.InPlaceUpdate, du.Ignore, du.Place)
	}
}

// TestScaleWithoutUpdateStrategyMakesNoDeployment: a group without an update strategy
// (max_parallel 0) gets no deployment for a scale.
func TestScaleWithoutUpdateStrategyMakesNoDeployment(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := serviceJob("plain", 1)
	job.TaskGroups[0].Update.MaxParallel = ptr(0)
	job = settledJob(t, c, cl, job)
	scaleTo(t, cl, "plain", 2, *job.JobModifyIndex)
	if err := c.WaitJobRunning(ctxT(t), "default", "plain"); err != nil {
		t.Fatal(err)
	}
	ds, _, err := cl.Jobs().Deployments("plain", false, nil)
	if err != nil || len(ds) != 0 {
		t.Errorf("deployments %d (err %v), want none", len(ds), err)
	}
	if a := allocByName(t, cl, "plain", "plain.g[0]"); a.DeploymentID != "" || *a.Job.Version != 1 {
		t.Errorf("in-place updated allocation: DeploymentID %q Version %d, want none and 1", a.DeploymentID, *a.Job.Version)
	}
}

// TestScaleSameCountNewVersion: Nomad's scale writes a new job version even when the count
// does not change.
func TestScaleSameCountNewVersion(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := settledJob(t, c, cl, serviceJob("same", 1))
	waitDeployment(t, cl, "same", 0)
	resp := scaleTo(t, cl, "same", 1, 0)
	got, _, err := cl.Jobs().Info("same", nil)
	if err != nil {
		t.Fatal(err)
	}
	if *got.Version != 1 || resp.JobModifyIndex <= *job.JobModifyIndex || *got.JobModifyIndex != resp.JobModifyIndex {
		t.Errorf("after a scale to the same count: Version %d JobModifyIndex %d (answered %d, was %d), want version 1 and a new index",
			*got.Version, *got.JobModifyIndex, resp.JobModifyIndex, *job.JobModifyIndex)
	}
	if d := waitDeployment(t, cl, "same", 1); d.Status != api.DeploymentStatusSuccessful {
		t.Errorf("deployment of the same-count scale: %s, want successful", d.Status)
	}
}

// TestScaleRefusals: Nomad's refusals of a scale request, with its status codes and texts.
func TestScaleRefusals(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := serviceJob("ref", 1)
	job.TaskGroups[0].Scaling = &api.ScalingPolicy{Min: ptr(int64(1)), Max: ptr(int64(3)), Enabled: ptr(false)}
	job = settledJob(t, c, cl, job)
	waitDeployment(t, cl, "ref", 0)
	slow := serviceJob("slow", 1)
	// A deployment that stays running for the test's duration.
	slow.TaskGroups[0].Update = &api.UpdateStrategy{MaxParallel: ptr(1), MinHealthyTime: ptr(time.Hour), HealthyDeadline: ptr(2 * time.Hour), ProgressDeadline: ptr(3 * time.Hour)}
	if _, _, err := cl.Jobs().Register(slow, nil); err != nil {
		t.Fatal(err)
	}
	sys := api.NewSystemJob("sys", "sys", "global", 50)
	sys.Datacenters = []string{"dc1"}
	sys.AddTaskGroup(api.NewTaskGroup("g", 1).AddTask(serviceJob("x", 1).TaskGroups[0].Tasks[0]))
	if _, _, err := cl.Jobs().Register(sys, nil); err != nil {
		t.Fatal(err)
	}
	stale := *job.JobModifyIndex - 1
	cases := []struct {
		name, job, body string
		status          int
		text            string
	}{
		{"over policy max", "ref", `{"Count":5,"Target":{"Group":"g"}}`, 400, "group count was greater than scaling policy maximum: 5 > 3"},
		{"under policy min", "ref", `{"Count":0,"Target":{"Group":"g"}}`, 400, "group count was less than scaling policy minimum: 0 < 1"},
		{"unknown group", "ref", `{"Count":2,"Target":{"Group":"nope"}}`, 400, `task group "nope" specified for scaling does not exist in job`},
		{"stale JobModifyIndex", "ref", `{"Count":2,"Target":{"Group":"g"},"JobModifyIndex":` + strconv.Itoa(int(stale)) + `}`, 500,
			"Enforcing job modify index " + strconv.Itoa(int(stale)) + ": job exists with conflicting job modify index: " + strconv.Itoa(int(*job.JobModifyIndex))},
		{"active deployment", "slow", `{"Count":2,"Target":{"Group":"g"}}`, 400, "job scaling blocked due to active deployment"},
		{"negative count", "ref", `{"Count":-1,"Target":{"Group":"g"}}`, 400, "scaling action count can't be negative"},
		{"no group", "ref", `{"Count":2,"Target":{}}`, 400, "missing task group name for scaling action"},
		{"other job in payload", "ref", `{"Count":2,"Target":{"Group":"g","Job":"other"}}`, 400, "job ID in payload did not match URL"},
		{"count with error", "ref", `{"Count":2,"Error":true,"Target":{"Group":"g"}}`, 400, "scaling action should not contain count if error is true"},
		{"no such job", "nojob", `{"Count":2,"Target":{"Group":"g"}}`, 404, `job "nojob" not found`},
		{"system job past 1", "sys", `{"Count":2,"Target":{"Group":"g"}}`, 400, `jobs of type "system" can only be scaled between 0 and 1`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawPut(t, c, "/v1/job/"+tc.job+"/scale", tc.body)
			if status != tc.status || body != tc.text {
				t.Errorf("PUT scale %s = %d %q, want %d %q", tc.body, status, body, tc.status, tc.text)
			}
		})
	}
	after, _, err := cl.Jobs().Info("ref", nil)
	if err != nil || *after.Version != 0 {
		t.Errorf("a refused scale changed the job (err %v)", err)
	}
	// The api client's error carries the status for callers that classify it.
	_, _, err = cl.Jobs().Scale("slow", "g", ptr(2), "", false, nil, nil)
	var ue api.UnexpectedResponseError
	if !errors.As(err, &ue) || ue.StatusCode() != 400 || !strings.Contains(ue.Body(), "blocked due to active deployment") {
		t.Errorf("api client error %v, want a 400 naming the active deployment", err)
	}
}

// TestScaleWithoutCountRecordsEvent: a count-less request only records an event, answered
// with the job's ModifyIndex and no evaluation.
func TestScaleWithoutCountRecordsEvent(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100})
	job := settledJob(t, c, cl, serviceJob("ev", 1))
	resp, _, err := cl.Jobs().ScaleWithRequest("ev", &api.ScalingRequest{Target: map[string]string{"Group": "g"}, Message: "just saying"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	after, _, err := cl.Jobs().Info("ev", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.EvalID != "" || resp.JobModifyIndex != *after.ModifyIndex || *after.Version != *job.Version {
		t.Errorf("count-less scale: EvalID %q JobModifyIndex %d (job ModifyIndex %d) version %d, want no eval, the ModifyIndex, no new version",
			resp.EvalID, resp.JobModifyIndex, *after.ModifyIndex, *after.Version)
	}
	s, _, err := cl.Jobs().ScaleStatus("ev", nil)
	if err != nil || len(s.TaskGroups["g"].Events) != 1 || s.TaskGroups["g"].Events[0].Message != "just saying" || s.TaskGroups["g"].Events[0].Count != nil {
		t.Errorf("scale status %+v (err %v), want one count-less event", s, err)
	}
}

// rawPut sends a JSON body and returns the status and body as Nomad's HTTP agent answers.
func rawPut(t *testing.T, c *Cluster, path, body string) (int, string) {
	t.Helper()
	r, err := testhttp.Exchange(ctxT(t), nil, http.MethodPut, c.Addr()+path, strings.NewReader(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status, string(r.Body)
}

// TestJobMaxCount: a configured job_max_count shows in the agent's configuration and bounds
// the job's groups' counts summed: a scale to the limit passes, one past it is refused with
// Nomad's 500 and text, as is a registration past it; 0 is no limit; a negative one does
// not start, as Nomad's agent does not.
func TestJobMaxCount(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 100, JobMaxCount: ptr(4)})
	self, err := cl.Agent().Self()
	if err != nil {
		t.Fatal(err)
	}
	if server, _ := self.Config["Server"].(map[string]any); server["JobMaxCount"] != float64(4) {
		t.Errorf("agent self Server %v, want JobMaxCount 4", self.Config["Server"])
	}
	job := serviceJob("capped", 1)
	h := api.NewTaskGroup("h", 1)
	h.AddTask(job.TaskGroups[0].Tasks[0])
	job.AddTaskGroup(h)
	job = settledJob(t, c, cl, job)
	if status, body := rawPut(t, c, "/v1/job/capped/scale", `{"Count":4,"Target":{"Group":"g"}}`); status != 500 ||
		body != "total count was greater than configured job_max_count: 5 > 4" {
		t.Errorf("scale past the limit = %d %q, want 500 naming 5 > 4", status, body)
	}
	scaleTo(t, cl, "capped", 3, *job.JobModifyIndex) // 3 + 1: the limit itself passes
	big, _ := json.Marshal(map[string]any{"Job": serviceJob("big", 5)})
	if status, body := rawPut(t, c, "/v1/jobs", string(big)); status != 500 ||
		body != "1 error occurred:\n\t* total count was greater than configured job_max_count: 5 > 4\n\n" {
		t.Errorf("register past the limit = %d %q, want 500 with the validation's list", status, body)
	}

	c0, cl0 := startCluster(t, Options{TimeScale: 100, JobMaxCount: ptr(0)})
	unlimited := settledJob(t, c0, cl0, serviceJob("free", 1))
	scaleTo(t, cl0, "free", 60000, *unlimited.JobModifyIndex) // never placed: the test ends first
	if _, err := Start(context.Background(), Options{JobMaxCount: ptr(-1)}); err == nil || !strings.Contains(err.Error(), "cannot be negative") {
		t.Errorf("negative job_max_count: %v, want refused", err)
	}

	_, clDefault := startCluster(t, Options{TimeScale: 100})
	if self, err = clDefault.Agent().Self(); err != nil {
		t.Fatal(err)
	}
	if server, _ := self.Config["Server"].(map[string]any); server["JobMaxCount"] != nil {
		t.Errorf("agent self Server %v, want JobMaxCount null when not configured", self.Config["Server"])
	}
}
