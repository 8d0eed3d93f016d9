package conformance

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// scaleGroup scales group g of the job through the api client, with the JobModifyIndex as
// check-and-set (0: none).
func (tg *target) scaleGroup(t *testing.T, jobID string, count int64, jobModifyIndex uint64) *api.JobRegisterResponse {
	t.Helper()
	resp, _, err := tg.api.Jobs().ScaleWithRequest(jobID, &api.ScalingRequest{
		Count: &count, Target: map[string]string{"Job": jobID, "Group": "g"}, Message: "conformance", JobModifyIndex: jobModifyIndex,
	}, (&api.WriteOptions{}).WithContext(tg.ctx(t)))
	if err != nil {
		t.Fatalf("scale job %s to %d: %v", jobID, count, err)
	}
	return resp
}

// waitDeploymentOf waits until the job's latest deployment is of the version and over.
func (tg *target) waitDeploymentOf(t *testing.T, jobID string, version uint64) *api.Deployment {
	t.Helper()
	return tg.waitLatestDeployment(t, jobID, fmt.Sprintf("finished deployment of version %d", version), func(d *api.Deployment) bool {
		return d.JobVersion == version && d.Status != "running" && d.Status != "paused" && d.Status != "pending"
	})
}

// allocNamed reads the job's allocation of that name (any status).
func (tg *target) allocNamed(t *testing.T, jobID, name string) *api.Allocation {
	t.Helper()
	stubs, _, err := tg.api.Jobs().Allocations(jobID, true, nil)
	if err != nil {
		t.Fatalf("allocations of %s: %v", jobID, err)
	}
	for _, s := range stubs {
		if s.Name == name {
			a, _, err := tg.api.Allocations().Info(s.ID, nil)
			if err != nil {
				t.Fatalf("allocation %s: %v", s.ID, err)
			}
			return a
		}
	}
	t.Fatalf("job %s has no allocation %s:\n%s", jobID, name, describeAllocs(stubs))
	return nil
}

// TestScaleUpDeploymentCompletes: a scale-up of a group with an update block makes a
// deployment for the new version that the allocation updated in place joins, its health
// reset and set again min_healthy_time after the update; the deployment ends successful.
func TestScaleUpDeploymentCompletes(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("scale-up")
		reg := tg.deploySleepJob(t, id, 1)
		first := tg.allocNamed(t, id, id+".g[0]")
		resp := tg.scaleGroup(t, id, 2, reg.JobModifyIndex)

		d := tg.waitDeploymentOf(t, id, 1)
		if d.Status != "successful" {
			t.Fatalf("deployment of the scale-up: %s (%s), want successful", d.Status, d.StatusDescription)
		}
		if d.JobSpecModifyIndex != resp.JobModifyIndex {
			t.Errorf("deployment JobSpecModifyIndex %d, want the scale's JobModifyIndex %d", d.JobSpecModifyIndex, resp.JobModifyIndex)
		}
		if st := d.TaskGroups["g"]; st == nil || st.DesiredTotal != 2 || st.PlacedAllocs != 2 || st.HealthyAllocs != 2 {
			t.Errorf("deployment state of g: %+v, want DesiredTotal, PlacedAllocs and HealthyAllocs 2", st)
		}
		a := tg.allocNamed(t, id, id+".g[0]")
		if a.ID != first.ID || a.DeploymentID != d.ID || *a.Job.Version != 1 || a.EvalID != resp.EvalID {
			t.Errorf("g[0] after the scale: ID %s DeploymentID %s version %d EvalID %s, want %s (updated in place) %s 1 %s",
				a.ID, a.DeploymentID, *a.Job.Version, a.EvalID, first.ID, d.ID, resp.EvalID)
		}
		s, _, err := tg.api.Jobs().ScaleStatus(id, nil)
		if err != nil || len(s.TaskGroups["g"].Events) == 0 {
			t.Fatalf("scale status: %+v (err %v)", s, err)
		}
		scaledAt := time.Unix(0, int64(s.TaskGroups["g"].Events[0].Time))
		if ds := a.DeploymentStatus; ds == nil || ds.Healthy == nil || !*ds.Healthy || ds.Timestamp.Sub(scaledAt) < time.Second {
			t.Errorf("g[0] deployment status %+v, scaled at %v: want healthy again no sooner than min_healthy_time (1s) after the scale", ds, scaledAt)
		}
	})
}

// TestScaleDownMakesDeployment: a scale-down of a group with an update block stops the
// highest name index, which keeps its version, and makes a deployment of the allocation left
// (updated in place), which ends successful.
func TestScaleDownMakesDeployment(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("scale-down")
		reg := tg.deploySleepJob(t, id, 2)
		resp := tg.scaleGroup(t, id, 1, reg.JobModifyIndex)

		d := tg.waitDeploymentOf(t, id, 1)
		if d.Status != "successful" {
			t.Fatalf("deployment of the scale-down: %s (%s), want successful", d.Status, d.StatusDescription)
		}
		if st := d.TaskGroups["g"]; st == nil || st.DesiredTotal != 1 || st.PlacedAllocs != 1 || st.HealthyAllocs != 1 {
			t.Errorf("deployment state of g: %+v, want DesiredTotal, PlacedAllocs and HealthyAllocs 1", st)
		}
		kept, gone := tg.allocNamed(t, id, id+".g[0]"), tg.allocNamed(t, id, id+".g[1]")
		if kept.DeploymentID != d.ID || *kept.Job.Version != 1 || kept.DesiredStatus != "run" {
			t.Errorf("g[0]: DeploymentID %s version %d desired %s, want %s 1 run", kept.DeploymentID, *kept.Job.Version, kept.DesiredStatus, d.ID)
		}
		if gone.DesiredStatus != "stop" || *gone.Job.Version != 0 || gone.DeploymentID == d.ID {
			t.Errorf("g[1]: desired %s version %d DeploymentID %s, want stop, still version 0, not in the new deployment", gone.DesiredStatus, *gone.Job.Version, gone.DeploymentID)
		}
		ev, _, err := tg.api.Evaluations().Info(resp.EvalID, nil)
		if err != nil {
			t.Fatalf("scale evaluation: %v", err)
		}
		if ev.TriggeredBy != "job-scaling" || ev.DeploymentID != d.ID {
			t.Errorf("scale evaluation: TriggeredBy %q DeploymentID %q, want job-scaling %s", ev.TriggeredBy, ev.DeploymentID, d.ID)
		}
		if ev.PlanAnnotations == nil || ev.PlanAnnotations.DesiredTGUpdates["g"] == nil {
			t.Fatalf("scale evaluation has no plan annotations for g: %+v", ev.PlanAnnotations)
		}
		if du := ev.PlanAnnotations.DesiredTGUpdates["g"]; du.Stop != 1 || du.InPlaceUpdate != 1 || du.Place != 0 || du.Ignore != 0 {
			t.Errorf("scale evaluation's plan for g: %+v, want Stop 1, InPlaceUpdate 1, nothing else", du)
		}
	})
}

// TestScaleRefusals: Nomad's refusals of a scale request, with their status codes and texts;
// a refused scale leaves the job as it was.
func TestScaleRefusals(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id, slowID := tg.id("scale-refusals"), tg.id("scale-blocked")
		job := sleepJob(id, 1)
		job.TaskGroups[0].Scaling = &api.ScalingPolicy{Min: ptr(int64(1)), Max: ptr(int64(3)), Enabled: ptr(false)}
		reg := tg.register(t, job)
		tg.waitDeploymentSuccessful(t, id)
		slow := sleepJob(slowID, 1)
		// A deployment that runs for the case's whole life.
		slow.TaskGroups[0].Update = &api.UpdateStrategy{MinHealthyTime: ptr(time.Hour), HealthyDeadline: ptr(2 * time.Hour), ProgressDeadline: ptr(3 * time.Hour)}
		tg.register(t, slow)
		tg.waitRunning(t, slowID, 1)

		stale := reg.JobModifyIndex - 1
		cases := []struct {
			name, job, body string
			status          int
			text            string
		}{
			{"over the policy max", id, `{"Count":5,"Target":{"Group":"g"}}`, 400, "group count was greater than scaling policy maximum: 5 > 3"},
			{"under the policy min", id, `{"Count":0,"Target":{"Group":"g"}}`, 400, "group count was less than scaling policy minimum: 0 < 1"},
			{"unknown group", id, `{"Count":2,"Target":{"Group":"nope"}}`, 400, `task group "nope" specified for scaling does not exist in job`},
			{"stale JobModifyIndex", id, fmt.Sprintf(`{"Count":2,"Target":{"Group":"g"},"JobModifyIndex":%d}`, stale), 500,
				fmt.Sprintf("Enforcing job modify index %d: job exists with conflicting job modify index: %d", stale, reg.JobModifyIndex)},
			{"active deployment", slowID, `{"Count":2,"Target":{"Group":"g"}}`, 400, "job scaling blocked due to active deployment"},
			{"negative count", id, `{"Count":-1,"Target":{"Group":"g"}}`, 400, "scaling action count can't be negative"},
			{"no group", id, `{"Count":2,"Target":{}}`, 400, "missing task group name for scaling action"},
			{"another job in the payload", id, `{"Count":2,"Target":{"Group":"g","Job":"other"}}`, 400, "job ID in payload did not match URL"},
			{"count with error", id, `{"Count":2,"Error":true,"Target":{"Group":"g"}}`, 400, "scaling action should not contain count if error is true"},
			{"no such job", tg.id("no-such-job"), `{"Count":2,"Target":{"Group":"g"}}`, 404, fmt.Sprintf("job %q not found", tg.id("no-such-job"))},
		}
		for _, c := range cases {
			r := tg.do(t, "PUT", "/v1/job/"+c.job+"/scale", tg.token, strings.NewReader(c.body))
			if r.status != c.status || string(r.body) != c.text {
				t.Errorf("%s: PUT scale %s = %d %q, want %d %q", c.name, c.body, r.status, r.body, c.status, c.text)
			}
		}
		after, _, err := tg.api.Jobs().Info(id, nil)
		if err != nil {
			t.Fatalf("read job: %v", err)
		}
		if *after.Version != 0 || *after.JobModifyIndex != reg.JobModifyIndex || *after.TaskGroups[0].Count != 1 {
			t.Errorf("after refused scales: version %d JobModifyIndex %d count %d, want 0 %d 1", *after.Version, *after.JobModifyIndex, *after.TaskGroups[0].Count, reg.JobModifyIndex)
		}
	})
}

// TestScaleSameCountAndWithoutCount: a scale to the group's current count still writes a new
// job version; a request without a count only records a scaling event, answered with the
// job's ModifyIndex and no evaluation.
func TestScaleSameCountAndWithoutCount(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("scale-same")
		reg := tg.deploySleepJob(t, id, 1)
		resp := tg.scaleGroup(t, id, 1, reg.JobModifyIndex)
		job, _, err := tg.api.Jobs().Info(id, nil)
		if err != nil {
			t.Fatalf("read job: %v", err)
		}
		if *job.Version != 1 || resp.JobModifyIndex <= reg.JobModifyIndex || *job.JobModifyIndex != resp.JobModifyIndex || resp.EvalID == "" {
			t.Errorf("scale to the same count: version %d, JobModifyIndex %d (answered %d, registered %d), EvalID %q; want version 1, a new index, an evaluation",
				*job.Version, *job.JobModifyIndex, resp.JobModifyIndex, reg.JobModifyIndex, resp.EvalID)
		}
		if d := tg.waitDeploymentOf(t, id, 1); d.Status != "successful" {
			t.Errorf("deployment of the same-count scale: %s (%s), want successful", d.Status, d.StatusDescription)
		}

		noCount, _, err := tg.api.Jobs().ScaleWithRequest(id, &api.ScalingRequest{Target: map[string]string{"Group": "g"}, Message: "only an event"}, nil)
		if err != nil {
			t.Fatalf("count-less scale: %v", err)
		}
		job, _, err = tg.api.Jobs().Info(id, nil)
		if err != nil {
			t.Fatalf("read job: %v", err)
		}
		if noCount.EvalID != "" || noCount.EvalCreateIndex != 0 || noCount.JobModifyIndex != *job.ModifyIndex || *job.Version != 1 {
			t.Errorf("count-less scale: EvalID %q EvalCreateIndex %d JobModifyIndex %d (job ModifyIndex %d) version %d; want no evaluation, the job's ModifyIndex, no new version",
				noCount.EvalID, noCount.EvalCreateIndex, noCount.JobModifyIndex, *job.ModifyIndex, *job.Version)
		}
		s, _, err := tg.api.Jobs().ScaleStatus(id, nil)
		if err != nil {
			t.Fatalf("scale status: %v", err)
		}
		events := s.TaskGroups["g"].Events
		if len(events) != 2 || events[0].Message != "only an event" || events[0].Count != nil || events[0].EvalID != nil ||
			events[1].Count == nil || *events[1].Count != 1 || events[1].PreviousCount != 1 || events[1].EvalID == nil || *events[1].EvalID != resp.EvalID {
			t.Errorf("scaling events, newest first: %+v; want the count-less one, then the scale to 1 with its evaluation", events)
		}
	})
}

// jobMaxCount reads the servers' job_max_count from the agent's configuration
// (/v1/agent/self: config.Server.JobMaxCount, null when its configuration does not set it,
// and then Nomad's default of 50000 applies). It skips the test on a client-only agent,
// whose configuration says nothing of the servers', and where there is no limit.
func (tg *target) jobMaxCount(t *testing.T) int {
	t.Helper()
	r := tg.do(t, "GET", "/v1/agent/self", tg.token, nil)
	if r.status != 200 {
		t.Fatalf("GET /v1/agent/self = %d %q", r.status, r.body)
	}
	var self struct {
		Config struct {
			Server struct {
				Enabled     bool
				JobMaxCount *int
			}
		} `json:"config"`
	}
	if err := json.Unmarshal(r.body, &self); err != nil {
		t.Fatalf("agent self: %v", err)
	}
	s := self.Config.Server
	switch {
	case !s.Enabled:
		t.Skip("the agent is not a server: its configuration does not tell the servers' job_max_count")
	case s.JobMaxCount == nil:
		return 50000
	case *s.JobMaxCount == 0:
		t.Skip("job_max_count is 0 on this agent: no limit to check")
	}
	return *s.JobMaxCount
}

// TestScaleBeyondJobMaxCount: Nomad refuses a scale whose job, its groups' counts summed,
// would pass the servers' job_max_count (as the agent's configuration shows it) with a 500
// and its text, before the deployment and check-and-set checks; a registration past it is
// refused in the validation's list, also a 500. Nothing changes.
func TestScaleBeyondJobMaxCount(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		limit := tg.jobMaxCount(t)
		id := tg.id("max-count")
		job := sleepJob(id, 1)
		h := api.NewTaskGroup("h", 1)
		h.AddTask(sleepTask("main"))
		job.AddTaskGroup(h)
		reg := tg.register(t, job)
		tg.waitRunning(t, id, 2)

		// g to limit: with h's one, the job passes the limit by one. A stale check-and-set
		// index does not matter: the limit is checked first.
		body := fmt.Sprintf(`{"Count":%d,"Target":{"Group":"g"},"JobModifyIndex":%d}`, limit, reg.JobModifyIndex-1)
		r := tg.do(t, "PUT", "/v1/job/"+id+"/scale", tg.token, strings.NewReader(body))
		want := fmt.Sprintf("total count was greater than configured job_max_count: %d > %d", limit+1, limit)
		if r.status != 500 || string(r.body) != want {
			t.Errorf("PUT scale %s = %d %q, want 500 %q", body, r.status, r.body, want)
		}

		big := sleepJob(tg.id("max-count-big"), limit+1)
		payload, err := json.Marshal(map[string]any{"Job": big})
		if err != nil {
			t.Fatal(err)
		}
		r = tg.do(t, "PUT", "/v1/jobs", tg.token, strings.NewReader(string(payload)))
		want = fmt.Sprintf("1 error occurred:\n\t* total count was greater than configured job_max_count: %d > %d\n\n", limit+1, limit)
		if r.status != 500 || string(r.body) != want {
			t.Errorf("PUT /v1/jobs of %d allocations = %d %q, want 500 %q", limit+1, r.status, r.body, want)
		}
		if r.status == 200 {
			_, _, _ = tg.api.Jobs().Deregister(*big.ID, true, nil)
		}

		after, _, err := tg.api.Jobs().Info(id, nil)
		if err != nil {
			t.Fatalf("read job: %v", err)
		}
		if *after.Version != 0 || *after.JobModifyIndex != reg.JobModifyIndex || *after.TaskGroups[0].Count != 1 {
			t.Errorf("after the refused scale: version %d JobModifyIndex %d count %d, want 0 %d 1", *after.Version, *after.JobModifyIndex, *after.TaskGroups[0].Count, reg.JobModifyIndex)
		}
	})
}
