package sim

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// RegResult is what a job write answers (Nomad's JobRegisterResponse, with the query meta
// fields its HTTP agent embeds).
type RegResult struct {
	EvalID          string
	EvalCreateIndex uint64
	JobModifyIndex  uint64
	Warnings        string
	Index           uint64
	LastContact     int64
	KnownLeader     bool
	NextToken       string
}

func ErrBadRequest(msg string) error { return simhttp.Errorf(http.StatusBadRequest, msg) }

func errDeploymentTerminal(d *api.Deployment) error {
	return simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("can't promote terminal deployment (status %q)", d.Status))
}

func EqualJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// CloneJob deep-copies a job through JSON, so stored versions never share state with
// callers.
func CloneJob(j *api.Job) *api.Job {
	b, err := json.Marshal(j)
	if err != nil {
		return nil
	}
	var out api.Job
	if err := json.Unmarshal(b, &out); err != nil {
		return nil
	}
	return &out
}

// RegisterJob registers (or updates) a job as the jobs endpoint does and returns the
// evaluation's ID.
func (c *Cluster) RegisterJob(job *api.Job) (string, error) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	res, err := c.RegisterLocked(CloneJob(job), "job-register")
	if err != nil {
		return "", err
	}
	return res.EvalID, nil
}

// ValidateJob applies the checks Nomad's job endpoint makes before anything else: the job's
// own validation, then the servers' job_max_count over its groups' counts (jobMax, 0: no
// limit), as Nomad's job validator lists them.
func ValidateJob(job *api.Job, jobMax int) error {
	if job == nil {
		return ErrBadRequest("Job must be specified")
	}
	var errs []string
	if Deref(job.ID) == "" {
		errs = append(errs, "Missing job ID")
	}
	if len(job.TaskGroups) == 0 {
		errs = append(errs, "Missing job task groups")
	}
	switch Deref(job.Type) {
	case "", api.JobTypeService, api.JobTypeBatch, api.JobTypeSystem, api.JobTypeSysbatch:
	default:
		errs = append(errs, fmt.Sprintf("Invalid job type: %q", Deref(job.Type)))
	}
	seen := map[string]bool{}
	for k, tg := range job.TaskGroups {
		name := Deref(tg.Name)
		if name == "" {
			errs = append(errs, fmt.Sprintf("Job task group %d missing name", k+1))
			continue
		}
		if seen[name] {
			errs = append(errs, fmt.Sprintf("Job task group %d redefines '%s' from group %d", k+1, name, k))
		}
		seen[name] = true
		if gerrs := validateGroup(tg); len(gerrs) > 0 {
			errs = append(errs, fmt.Sprintf("Task group %s validation failed: %s", name, simhttp.MultiError(gerrs...)))
		}
	}
	if total := submittedCount(job); jobMax > 0 && total > jobMax {
		errs = append(errs, errJobMaxCount(total, jobMax))
	}
	if len(errs) == 0 {
		return nil
	}
	return simhttp.Errorf(http.StatusInternalServerError, simhttp.MultiError(errs...))
}

// validateGroup lists a group's validation errors in the order of Nomad's
// TaskGroup.Validate (the checks nomadsim makes of them): its own, its tasks' names, then
// each task's own list, nested (a real agent answers with the nested lists as they are).
func validateGroup(tg *api.TaskGroup) []string {
	var errs []string
	if tg.Count != nil && *tg.Count < 0 {
		errs = append(errs, "Task group count can't be negative")
	}
	if len(tg.Tasks) == 0 {
		errs = append(errs, "Missing tasks for task group")
	}
	tasks := map[string]int{}
	for i, t := range tg.Tasks {
		if t.Name == "" {
			errs = append(errs, fmt.Sprintf("Task %d missing name", i+1))
		} else if first, ok := tasks[t.Name]; ok {
			errs = append(errs, fmt.Sprintf("Task %d redefines '%s' from task %d", i+1, t.Name, first+1))
		} else {
			tasks[t.Name] = i
		}
	}
	for _, t := range tg.Tasks {
		var terrs []string
		if t.Name == "" {
			terrs = append(terrs, "Missing task name")
		}
		if t.Driver == "" {
			terrs = append(terrs, "Missing task driver")
		}
		if len(terrs) > 0 {
			errs = append(errs, fmt.Sprintf("Task %s validation failed: %s", t.Name, simhttp.MultiError(terrs...)))
		}
	}
	return errs
}

// submittedCount is the job's groups' counts summed as the server sees them: the HTTP agent
// canonicalizes the job first, which gives a group without a count its scaling policy's
// min, else 1.
func submittedCount(job *api.Job) int {
	n := 0
	for _, tg := range job.TaskGroups {
		switch {
		case tg.Count != nil:
			n += *tg.Count
		case tg.Scaling != nil && tg.Scaling.Min != nil:
			n += int(*tg.Scaling.Min)
		default:
			n++
		}
	}
	return n
}

// RegisterLocked stores a new version of the job (when its spec changed) and evaluates it.
// Callers hold c.Mu.
func (c *Cluster) RegisterLocked(job *api.Job, trigger string) (*RegResult, error) {
	return c.registerVersionLocked(job, trigger, false)
}

// registerVersionLocked is RegisterLocked; with always it stores a new version even for an
// unchanged spec, as a scale does (Nomad's Job.Scale writes the job without comparing it,
// and the state store bumps the version of every write).
func (c *Cluster) registerVersionLocked(job *api.Job, trigger string, always bool) (*RegResult, error) {
	if err := ValidateJob(job, c.JobMaxCount()); err != nil {
		return nil, err
	}
	if job.Namespace == nil || *job.Namespace == "" {
		job.Namespace = Ptr("default")
	}
	if c.Namespaces[*job.Namespace] == nil {
		return nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("job %q is in nonexistent namespace %q", *job.ID, *job.Namespace))
	}
	if job.Region == nil || *job.Region == "" {
		job.Region = Ptr(c.Options.Region)
	}
	job.Canonicalize()
	if len(job.Datacenters) == 0 {
		// Nomad's structs.Job.Canonicalize: a job that names no datacenter runs in any.
		job.Datacenters = []string{"*"}
	}
	if job.NodePool == nil || *job.NodePool == "" {
		// The server puts a job without a node pool in the default pool.
		job.NodePool = Ptr("default")
	}
	if job.DispatchIdempotencyToken == nil {
		// Nomad's structs.Job holds a plain string: a job read back always has one.
		job.DispatchIdempotencyToken = Ptr("")
	}
	k := JobKey{*job.Namespace, *job.ID}
	j := c.Jobs[k]
	now := c.Clock.Now()
	var prev *api.Job
	if j != nil {
		prev = j.Current()
	}
	if prev != nil && !always && !SpecChanged(prev, job) {
		// Nomad creates no new version for an unchanged spec, but still evaluates it.
		ev := c.CreateEval(j, trigger, EvalOpts{})
		return &RegResult{EvalID: ev.ID, EvalCreateIndex: ev.CreateIndex, JobModifyIndex: Deref(prev.JobModifyIndex), Index: ev.CreateIndex}, nil
	}
	i := c.Bump(TableJobs)
	job.Version = Ptr(uint64(0))
	job.CreateIndex = Ptr(i)
	if prev != nil {
		job.Version = Ptr(*prev.Version + 1)
		job.CreateIndex = prev.CreateIndex
	}
	job.ModifyIndex = Ptr(i)
	job.JobModifyIndex = Ptr(i)
	job.SubmitTime = Ptr(now.UnixNano())
	job.Stable = Ptr(false)
	job.Status = Ptr(jobPending)
	if (job.IsPeriodic() || job.IsParameterized()) && !Deref(job.Stop) {
		job.Status = Ptr(jobRunning) // Nomad's getJobStatus: they run until stopped
	}
	if j == nil {
		j = &JobEntry{Key: k, Allocs: map[string]*AllocRun{}, ScaleEvents: map[string][]api.ScalingEvent{}}
		c.Jobs[k] = j
	}
	j.Versions = append(j.Versions, job)
	// Nomad keeps the latest versions only (JobTrackedVersions, 6 by default).
	if len(j.Versions) > 6 {
		j.Versions = append([]*api.Job{}, j.Versions[len(j.Versions)-6:]...)
	}
	j.modifyIndex = i
	c.publishJob(j, "JobRegistered")
	if job.IsPeriodic() || job.IsParameterized() {
		return &RegResult{JobModifyIndex: i, Index: i}, nil
	}
	ev := c.CreateEval(j, trigger, EvalOpts{})
	return &RegResult{EvalID: ev.ID, EvalCreateIndex: ev.CreateIndex, JobModifyIndex: i, Index: ev.CreateIndex}, nil
}

// SpecChanged compares two jobs ignoring the fields the server sets.
func SpecChanged(a, b *api.Job) bool {
	x, y := *a, *b
	for _, j := range []*api.Job{&x, &y} {
		j.Version, j.CreateIndex, j.ModifyIndex, j.JobModifyIndex = nil, nil, nil, nil
		j.SubmitTime, j.Stable, j.Status, j.StatusDescription = nil, nil, nil, nil
	}
	return !EqualJSON(&x, &y)
}

// DeregisterLocked stops (and with purge deletes) a job.
func (c *Cluster) DeregisterLocked(j *JobEntry, purge bool) *RegResult {
	cur := j.Current()
	if !Deref(cur.Stop) {
		stopped := CloneJob(cur)
		stopped.Stop = Ptr(true)
		i := c.Bump(TableJobs)
		stopped.Version = Ptr(*cur.Version + 1)
		stopped.ModifyIndex, stopped.JobModifyIndex = Ptr(i), Ptr(i)
		stopped.SubmitTime = Ptr(c.NowNano())
		stopped.Stable = Ptr(false)
		j.Versions = append(j.Versions, stopped)
		c.publishJob(j, "JobDeregistered")
	}
	ev := c.CreateEval(j, "job-deregister", EvalOpts{})
	if purge {
		delete(c.Jobs, j.Key)
		c.Bump(TableJobs)
		c.publishJob(j, "JobDeregistered")
	}
	return &RegResult{EvalID: ev.ID, EvalCreateIndex: ev.CreateIndex, JobModifyIndex: Deref(j.Current().JobModifyIndex), Index: ev.CreateIndex}
}

// Summary computes the job summary from its allocations (Nomad keeps it incrementally).
func (c *Cluster) Summary(j *JobEntry) *api.JobSummary {
	s := &api.JobSummary{JobID: j.Key.ID, Namespace: j.Key.Namespace, Summary: map[string]api.TaskGroupSummary{}, Children: &api.JobChildrenSummary{},
		CreateIndex: Deref(j.Current().CreateIndex), ModifyIndex: j.modifyIndex}
	for _, tg := range j.Current().TaskGroups {
		s.Summary[*tg.Name] = api.TaskGroupSummary{}
	}
	for _, ar := range j.Allocs {
		g := s.Summary[ar.Alloc.TaskGroup]
		switch ar.ServerClientStatus() {
		case api.AllocClientStatusPending:
			g.Starting++
		case api.AllocClientStatusRunning:
			g.Running++
		case api.AllocClientStatusComplete:
			g.Complete++
		case api.AllocClientStatusFailed:
			g.Failed++
		case api.AllocClientStatusLost:
			g.Lost++
		}
		s.Summary[ar.Alloc.TaskGroup] = g
	}
	for _, ev := range j.Evals {
		if ev.Status == api.EvalStatusBlocked {
			for g, n := range ev.QueuedAllocations {
				tg := s.Summary[g]
				tg.Queued += n
				s.Summary[g] = tg
			}
			for g, m := range ev.FailedTGAllocs {
				tg := s.Summary[g]
				tg.Queued += m.CoalescedFailures + 1
				s.Summary[g] = tg
			}
		}
	}
	return s
}

// JobStub is Nomad's JobListStub: the api module's stub plus the fields newer servers add.
type JobStub struct {
	*api.JobListStub
	NodePool    string
	Multiregion *api.Multiregion
}

func (c *Cluster) JobStub(j *JobEntry) JobStub {
	job := j.Current()
	return JobStub{NodePool: Deref(job.NodePool), Multiregion: job.Multiregion, JobListStub: &api.JobListStub{
		ID: j.Key.ID, ParentID: Deref(job.ParentID), Name: Deref(job.Name), Namespace: j.Key.Namespace,
		Datacenters: job.Datacenters, Type: Deref(job.Type), Priority: Deref(job.Priority),
		Periodic: job.IsPeriodic(), ParameterizedJob: job.IsParameterized(), Stop: Deref(job.Stop),
		Status: Deref(job.Status), StatusDescription: Deref(job.StatusDescription), JobSummary: c.Summary(j),
		CreateIndex: Deref(job.CreateIndex), ModifyIndex: Deref(job.ModifyIndex), JobModifyIndex: Deref(job.JobModifyIndex),
		SubmitTime: Deref(job.SubmitTime), Meta: job.Meta,
	}}
}

// SortedJobs lists jobs in the namespace ("*" for all) ordered as Nomad's state store
// does: by namespace, then ID.
func (c *Cluster) SortedJobs(ns string) []*JobEntry {
	var out []*JobEntry
	for k, j := range c.Jobs {
		if ns == "*" || k.Namespace == ns {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *JobEntry) int {
		return cmp.Or(cmp.Compare(a.Key.Namespace, b.Key.Namespace), cmp.Compare(a.Key.ID, b.Key.ID))
	})
	return out
}

// WaitJobRunning waits until every allocation the job wants is running (for batch and
// sysbatch jobs: running or complete) as the servers see it, none is pending, and the
// job's latest deployment, if any, is over (or waits only for a manual promotion of its
// Nomad's job restart refuses to run during a deployment. A canary deployment that waits
// for a manual promotion never ends, nor do the canaries' old allocations move to the new
// version: WaitJobRunning waits for ctx then.
func (c *Cluster) WaitJobRunning(ctx context.Context, namespace, jobID string) error {
	if namespace == "" {
		namespace = "default"
	}
	return c.waitUntil(ctx, "job "+strconv.Quote(jobID)+" to run", func() (bool, error) {
		return c.jobRunning(namespace, jobID)
	})
}

// waitUntil polls cond at every index change (and every 50ms of real time, for changes
// that take none) until it holds, fails or ctx ends.
func (c *Cluster) waitUntil(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ch := c.Index.Changed()
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nomadsim: waiting for %s: %w", what, ctx.Err())
		case <-ch:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitAllocsRunning waits, as WaitJobRunning does, for the job's allocations to run as
// the servers see them, without waiting for its deployment to end: for tests of
// deployments themselves, or of checks that keep a deployment from ending.
func (c *Cluster) WaitAllocsRunning(ctx context.Context, namespace, jobID string) error {
	if namespace == "" {
		namespace = "default"
	}
	return c.waitUntil(ctx, "the allocations of job "+strconv.Quote(jobID)+" to run", func() (bool, error) {
		ok, _, err := c.allocsRunning(namespace, jobID)
		return ok, err
	})
}

func (c *Cluster) jobRunning(ns, id string) (bool, error) {
	ok, settled, err := c.allocsRunning(ns, id)
	return ok && settled, err
}

// allocsRunning reports whether the job's allocations run, and whether its latest
// deployment is over.
func (c *Cluster) allocsRunning(ns, id string) (running, settled bool, err error) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	j := c.Jobs[JobKey{ns, id}]
	if j == nil {
		return false, false, fmt.Errorf("nomadsim: job %q not found in namespace %q", id, ns)
	}
	job := j.Current()
	batch := Deref(job.Type) == api.JobTypeBatch || Deref(job.Type) == api.JobTypeSysbatch
	want := 0
	for _, tg := range job.TaskGroups {
		want += Deref(tg.Count)
	}
	system := Deref(job.Type) == api.JobTypeSystem || Deref(job.Type) == api.JobTypeSysbatch
	for _, ev := range j.Evals {
		if ev.Status == api.EvalStatusBlocked {
			return false, false, nil
		}
	}
	got := 0
	for _, ar := range j.Allocs {
		if ar.ServerTerminal() {
			continue
		}
		switch ar.ServerClientStatus() {
		case api.AllocClientStatusRunning:
			if ar.Alloc.Job != nil && *ar.Alloc.Job.Version != *job.Version {
				return false, false, nil
			}
			got++
		case api.AllocClientStatusComplete:
			if batch {
				got++
			}
		case api.AllocClientStatusPending:
			return false, false, nil
		}
	}
	if system {
		got, want = min(got, 1), 1
	}
	return got >= want, deploymentSettled(j.LatestDeployment()), nil
}

// deploymentSettled reports whether a deployment (nil for none) is over: successful,
// failed or cancelled, the states Nomad's job restart accepts.
func deploymentSettled(d *api.Deployment) bool {
	if d == nil {
		return true
	}
	switch d.Status {
	case api.DeploymentStatusSuccessful, api.DeploymentStatusFailed, api.DeploymentStatusCancelled:
		return true
	}
	return false
}

// WaitDeploymentDone waits until no deployment of the job is running, paused or pending.
func (c *Cluster) WaitDeploymentDone(ctx context.Context, namespace, jobID string) error {
	if namespace == "" {
		namespace = "default"
	}
	return c.waitUntil(ctx, "the deployment of job "+strconv.Quote(jobID)+" to end", func() (bool, error) {
		c.Mu.Lock()
		defer c.Mu.Unlock()
		j := c.Jobs[JobKey{namespace, jobID}]
		if j == nil {
			return false, fmt.Errorf("nomadsim: job %q not found in namespace %q", jobID, namespace)
		}
		for _, d := range j.Deployments {
			if !deploymentSettled(d) {
				return false, nil
			}
		}
		return true, nil
	})
}
