package sim

import (
	"fmt"
	"net/http"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// trackedScalingEvents is how many scaling events Nomad keeps per group
// (JobTrackedScalingEvents), newest first.
const trackedScalingEvents = 20

// defaultJobMaxCount is the servers' job_max_count when their configuration does not set
// it (structs.JobDefaultMaxCount).
const defaultJobMaxCount = 50000

// JobMaxCount is the most allocations the servers let a job have in all (0: no limit), as
// Nomad's agent sets its server's JobMaxCount (command/agent/agent.go).
func (c *Cluster) JobMaxCount() int {
	if m := c.Options.JobMaxCount; m != nil {
		return *m
	}
	return defaultJobMaxCount
}

// errJobMaxCount is Nomad's refusal of a job of total allocations, past limit: a plain
// error of its RPC (nomad/job_endpoint.go Scale, job_endpoint_hooks.go), which the HTTP
// agent answers with a 500 and the text; job registration wraps it in its validation list.
func errJobMaxCount(total, limit int) string {
	return fmt.Sprintf("total count was greater than configured job_max_count: %d > %d", total, limit)
}

// ValidateScaleRequest makes the checks Nomad's JobScaleRequest.Validate makes before the
// job is looked up, with its wording (all 400s).
func ValidateScaleRequest(req *api.ScalingRequest, namespace string) error {
	if ns := req.Target["Namespace"]; ns != "" && ns != namespace {
		return ErrBadRequest("namespace in payload did not match header")
	}
	if req.Target["Group"] == "" {
		return ErrBadRequest("missing task group name for scaling action")
	}
	if req.Count != nil {
		if *req.Count < 0 {
			return ErrBadRequest("scaling action count can't be negative")
		}
		if req.Error {
			return ErrBadRequest("scaling action should not contain count if error is true")
		}
	}
	return nil
}

// ScaleLocked is Nomad's Job.Scale once the request is valid and the job found. With a
// count it refuses, in Nomad's order: a system job past 1, an unknown group, a count outside
// the group's scaling policy (enabled or not), a job whose groups' counts would add up to
// more than job_max_count, a job whose latest deployment is active, and a JobModifyIndex
// that is not the job's (check-and-set); then it registers a new job
// version (always, even for the same count) and evaluates it. Without a count it only
// records the event. Every accepted request records a scaling event. Callers hold c.Mu.
func (c *Cluster) ScaleLocked(j *JobEntry, req *api.ScalingRequest) (*RegResult, error) {
	group := req.Target["Group"]
	cur := j.Current()
	if Deref(cur.Type) == api.JobTypeSystem && req.Count != nil && *req.Count > 1 {
		return nil, ErrBadRequest(`jobs of type "system" can only be scaled between 0 and 1`)
	}
	tg := FindGroup(cur, group)
	if tg == nil {
		return nil, ErrBadRequest(fmt.Sprintf("task group %q specified for scaling does not exist in job", group))
	}
	prevCount := int64(Deref(tg.Count))
	now := c.Clock.Now()
	ev := &api.ScalingEvent{Message: req.Message, Error: req.Error, Meta: req.Meta, PreviousCount: prevCount, Time: uint64(now.UnixNano())}
	var res *RegResult
	if req.Count != nil {
		if err := checkScaleLocked(j, cur, tg, *req.Count, req.JobModifyIndex, c.JobMaxCount()); err != nil {
			return nil, err
		}
		next := CloneJob(cur)
		FindGroup(next, group).Count = Ptr(int(*req.Count))
		r, err := c.registerVersionLocked(next, "job-scaling", true)
		if err != nil {
			return nil, err
		}
		res = r
		ev.Count = req.Count
		if r.EvalID != "" {
			ev.EvalID = &r.EvalID
		}
	}
	i := c.Bump(TableScaling)
	ev.CreateIndex = i
	events := append([]api.ScalingEvent{*ev}, j.ScaleEvents[group]...)
	if len(events) > trackedScalingEvents {
		events = events[:trackedScalingEvents]
	}
	j.ScaleEvents[group] = events
	if res == nil {
		// Nomad answers a count-less request with the job's ModifyIndex (not its
		// JobModifyIndex) and no evaluation.
		res = &RegResult{JobModifyIndex: Deref(cur.ModifyIndex)}
	}
	res.Index = i
	return res, nil
}

// checkScaleLocked holds Nomad's refusals of a count: the scaling policy's bounds, the
// servers' job_max_count (maxCount, 0: none) over the job's total, an active deployment of
// the job, a stale JobModifyIndex.
func checkScaleLocked(j *JobEntry, cur *api.Job, tg *api.TaskGroup, count int64, jobModifyIndex uint64, jobMax int) error {
	if p := tg.Scaling; p != nil {
		// Nomad reads a policy without max as -1 (its registration refuses one); min
		// defaults to the group's count when the job is registered.
		minCount, maxCount := Deref(p.Min), int64(-1)
		if p.Max != nil {
			maxCount = *p.Max
		}
		if count < minCount {
			return ErrBadRequest(fmt.Sprintf("group count was less than scaling policy minimum: %d < %d", count, minCount))
		}
		if maxCount < count {
			return ErrBadRequest(fmt.Sprintf("group count was greater than scaling policy maximum: %d > %d", count, maxCount))
		}
	}
	// Nomad sums in Go ints: the other groups' counts and the one asked for.
	if total := int64(submittedCount(cur)-Deref(tg.Count)) + count; jobMax > 0 && total > int64(jobMax) {
		return simhttp.Errorf(http.StatusInternalServerError, errJobMaxCount(int(total), jobMax))
	}
	if d := j.LatestDeployment(); d != nil && DeploymentActive(d) && d.JobCreateIndex == Deref(cur.CreateIndex) {
		return ErrBadRequest("job scaling blocked due to active deployment")
	}
	if jobModifyIndex > 0 && jobModifyIndex != Deref(cur.JobModifyIndex) {
		// A plain error in Nomad's RPC: the HTTP agent answers it with a 500.
		return simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf(
			"Enforcing job modify index %d: job exists with conflicting job modify index: %d", jobModifyIndex, Deref(cur.JobModifyIndex)))
	}
	return nil
}
