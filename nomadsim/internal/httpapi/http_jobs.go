package httpapi

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// lookupJob is the job id of namespace ns, or Nomad's 404.
func (c *server) lookupJob(ns, id string) (*sim.JobEntry, error) {
	j := c.Jobs[sim.JobKey{Namespace: ns, ID: id}]
	if j == nil {
		return nil, sim.NotFound("job not found")
	}
	return j, nil
}

func (c *server) handleJobs(w http.ResponseWriter, r *http.Request) {
	register := func(q simhttp.Query) { c.register(w, r, q, "") }
	serveMethods(w, r, methodHandlers{
		http.MethodGet:  func(q simhttp.Query) { c.listJobs(w, r, q) },
		http.MethodPut:  register,
		http.MethodPost: register,
	})
}

// listJobs answers Nomad's jobs list: the jobs of the namespace ("*" for every namespace the
// token may list), with a prefix of their ID and a filter applied to the job itself; each
// stub carries the job's Meta only when the request asks for it with meta=true.
func (c *server) listJobs(w http.ResponseWriter, r *http.Request, q simhttp.Query) {
	withMeta, err := parseBoolParam(r, "meta")
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	allowed, err := c.authorizeList(r, q.Namespace, "list-jobs")
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	filter, err := newListFilter(q.Filter)
	if err != nil {
		writeRPCError(w, err)
		return
	}
	c.blocking(w, r, q, func() (uint64, any, error) {
		out := []sim.JobStub{}
		for _, j := range c.SortedJobs(q.Namespace) {
			if q.Prefix != "" && !matchPrefix(j.Key.ID, q.Prefix) {
				continue
			}
			// Nomad applies the filter before it skips the namespaces the token may not
			// list: a job there that the filter cannot be applied to fails the list too.
			ok, err := jobMatches(filter, j)
			if err != nil {
				return 0, nil, err
			}
			if ok && allowed(j.Key.Namespace) {
				out = append(out, c.listedJobStub(j, withMeta))
			}
		}
		return c.TableIndex(sim.TableJobs, sim.TableAllocs), out, nil
	})
}

// jobMatches applies the jobs list's filter to the job as Nomad's state store holds it.
func jobMatches(filter *listFilter, j *sim.JobEntry) (bool, error) {
	if filter.ev == nil {
		return true, nil
	}
	datum, err := jobFilterDatum(j.Current())
	if err != nil {
		return false, err
	}
	return filter.match(datum)
}

// listedJobStub is the job's stub as the jobs list shows it: without Meta unless asked.
func (c *server) listedJobStub(j *sim.JobEntry, withMeta bool) sim.JobStub {
	stub := c.JobStub(j)
	if !withMeta {
		stub.Meta = nil
	}
	return stub
}

// parseBoolParam reads a boolean query parameter (false when absent) as Nomad's HTTP agent
// does, with its error, a 500, when the value is not a boolean.
func parseBoolParam(r *http.Request, name string) (bool, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("Failed to parse value of %q (%v) as a bool: %v", name, s, err))
	}
	return v, nil
}

// decodeJobBody decodes the body of a request that carries a job (register, plan, validate)
// into req, whose Job field job points at, and refuses, as Nomad's HTTP agent does, a body
// without a job and one whose job has no ID. Nomad's endpoints word the missing ID each its
// own way: missingID is the endpoint's text ("" where the endpoint does not check the ID).
func decodeJobBody(r *http.Request, req any, job **api.Job, missingID string) error {
	if err := decodeBody(r, req); err != nil {
		return err
	}
	if *job == nil {
		return sim.ErrBadRequest("Job must be specified")
	}
	if missingID != "" && (*job).ID == nil {
		return sim.ErrBadRequest(missingID)
	}
	return nil
}

// authorizeJobSubmit gives a job that names no namespace the request's, as Nomad's agent
// does before a register or a plan, then checks submit-job in the job's namespace.
func (c *server) authorizeJobSubmit(r *http.Request, q simhttp.Query, job *api.Job) error {
	if job.Namespace == nil || *job.Namespace == "" {
		job.Namespace = sim.Ptr(q.Namespace)
	}
	return c.authorize(r, *job.Namespace, "submit-job")
}

func (c *server) register(w http.ResponseWriter, r *http.Request, q simhttp.Query, pathID string) {
	var req api.JobRegisterRequest
	if err := decodeJobBody(r, &req, &req.Job, "Job ID hasn't been provided"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if sim.Deref(req.Job.Type) == api.JobTypeSystem {
		for _, tg := range req.Job.TaskGroups {
			if tg.Scaling != nil {
				simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Task groups with job type system do not support scaling blocks"))
				return
			}
		}
	}
	if pathID != "" && sim.Deref(req.Job.ID) != pathID {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Job ID does not match name"))
		return
	}
	if err := c.authorizeJobSubmit(r, q, req.Job); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	c.write(w, func() (uint64, any, error) {
		if req.EnforceIndex {
			var cur uint64
			if j := c.Jobs[sim.JobKey{Namespace: *req.Job.Namespace, ID: sim.Deref(req.Job.ID)}]; j != nil {
				cur = sim.Deref(j.Current().JobModifyIndex)
			}
			if cur != req.JobModifyIndex {
				if cur == 0 {
					return 0, nil, simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("Enforcing job modify index %d: job does not exist", req.JobModifyIndex))
				}
				return 0, nil, simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("Enforcing job modify index %d: job exists with conflicting job modify index: %d", req.JobModifyIndex, cur))
			}
		}
		if req.PreserveCounts {
			if j := c.Jobs[sim.JobKey{Namespace: *req.Job.Namespace, ID: sim.Deref(req.Job.ID)}]; j != nil {
				for _, tg := range req.Job.TaskGroups {
					if old := sim.FindGroup(j.Current(), sim.Deref(tg.Name)); old != nil {
						tg.Count = sim.Ptr(sim.Deref(old.Count))
					}
				}
			}
		}
		res, err := c.RegisterLocked(sim.CloneJob(req.Job), "job-register")
		if err != nil {
			return 0, nil, err
		}
		if req.Submission != nil {
			if j := c.Jobs[sim.JobKey{Namespace: *req.Job.Namespace, ID: sim.Deref(req.Job.ID)}]; j != nil {
				if j.Submissions == nil {
					j.Submissions = map[uint64]*api.JobSubmission{}
				}
				j.Submissions[*j.Current().Version] = req.Submission
			}
		}
		res.KnownLeader = true
		return res.Index, res, nil
	})
}

func (c *server) handleJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	register := func(q simhttp.Query) { c.register(w, r, q, id) }
	serveMethods(w, r, methodHandlers{
		http.MethodGet: func(simhttp.Query) {
			c.jobRead(w, r, "read-job", func(j *sim.JobEntry, _ simhttp.Query) (uint64, any, error) {
				return sim.Deref(j.Current().ModifyIndex), j.Current(), nil
			}, sim.TableJobs)
		},
		http.MethodPut:    register,
		http.MethodPost:   register,
		http.MethodDelete: func(q simhttp.Query) { c.deregister(w, r, q, id) },
	})
}

// deregister answers DELETE /v1/job/:id: submit-job in the namespace, then the job's stop
// (and its purge with ?purge=true).
func (c *server) deregister(w http.ResponseWriter, r *http.Request, q simhttp.Query, id string) {
	if err := c.authorize(r, q.Namespace, "submit-job"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	purge, _ := strconv.ParseBool(r.URL.Query().Get("purge"))
	c.write(w, func() (uint64, any, error) {
		j, err := c.lookupJob(q.Namespace, id)
		if err != nil {
			return 0, nil, err
		}
		res := c.DeregisterLocked(j, purge)
		return res.Index, res, nil
	})
}

// jobRead is the shape of every read of a job's sub-resource.
func (c *server) jobRead(w http.ResponseWriter, r *http.Request, capability string, run func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error), tables ...string) {
	id := r.PathValue("id")
	c.checkedRead(w, r, c.inNamespace(r, capability), func(q simhttp.Query) (uint64, any, error) {
		j, err := c.lookupJob(q.Namespace, id)
		if err != nil {
			return c.TableIndex(tables...), nil, err
		}
		return run(j, q)
	})
}

// jobWrite is the shape of a write to an existing job (PUT or POST), read as Nomad's agent
// does: the query options, the submit-job capability in the namespace, the JSON body into
// req, and that the body's job ID (bodyJobID, read once req is decoded) is the path's; it
// answers any of those errors itself. run then writes under c.Mu to the job, which must exist.
func (c *server) jobWrite(w http.ResponseWriter, r *http.Request, req any, bodyJobID func() string, run func(j *sim.JobEntry, q simhttp.Query, id string) (uint64, any, error)) {
	q, ok := c.writeQuery(w, r, "submit-job")
	if !ok {
		return
	}
	if err := decodeBody(r, req); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	id := r.PathValue("id")
	if bodyJobID() != id {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Job ID does not match"))
		return
	}
	c.write(w, func() (uint64, any, error) {
		j, err := c.lookupJob(q.Namespace, id)
		if err != nil {
			return 0, nil, err
		}
		return run(j, q, id)
	})
}

func (c *server) handleJobAllocations(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error) {
		out := []allocStub{}
		for _, ar := range j.SortedAllocs() {
			out = append(out, listStub(ar, true, false))
		}
		return c.TableIndex(sim.TableAllocs), out, nil
	}, sim.TableAllocs)
}

func (c *server) handleJobEvaluations(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error) {
		// Nomad lists a job's evaluations in its state store's order: by ID.
		out := append([]*api.Evaluation{}, j.Evals...)
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		return c.TableIndex(sim.TableEvals), out, nil
	}, sim.TableEvals)
}

func (c *server) handleJobDeployments(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error) {
		out := []*api.Deployment{}
		for k := len(j.Deployments) - 1; k >= 0; k-- {
			out = append(out, j.Deployments[k])
		}
		return c.TableIndex(sim.TableDeployments), out, nil
	}, sim.TableDeployments)
}

func (c *server) handleJobDeployment(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error) {
		d := j.LatestDeployment()
		if d == nil {
			return c.TableIndex(sim.TableDeployments), nil, nil
		}
		return d.ModifyIndex, d, nil
	}, sim.TableDeployments)
}

func (c *server) handleJobSummary(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error) {
		return c.TableIndex(sim.TableJobs, sim.TableAllocs), c.Summary(j), nil
	}, sim.TableJobs, sim.TableAllocs)
}

func (c *server) handleJobEvaluate(w http.ResponseWriter, r *http.Request) {
	q, ok := c.writeQuery(w, r, "read-job", "submit-job")
	if !ok {
		return
	}
	var req api.JobEvaluateRequest
	id := r.PathValue("id")
	if r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			simhttp.WriteError(w, err)
			return
		}
		if req.JobID == "" {
			simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Job ID must be specified"))
			return
		}
		if req.JobID != id {
			simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "JobID not same as job name"))
			return
		}
	}
	c.write(w, func() (uint64, any, error) {
		j, err := c.lookupJob(q.Namespace, id)
		if err != nil {
			return 0, nil, err
		}
		job := j.Current()
		if job.IsPeriodic() || job.IsParameterized() {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, "can't evaluate periodic or parameterized job")
		}
		if req.EvalOptions.ForceReschedule {
			for _, ar := range j.Allocs {
				if ar.Alloc.ClientStatus == api.AllocClientStatusFailed && !ar.ServerTerminal() {
					ar.Alloc.DesiredTransition.ForceReschedule = sim.Ptr(true)
					ar.TouchServer("AllocationUpdated")
				}
			}
		}
		ev := c.CreateEval(j, "job-register", sim.EvalOpts{ForceReschedule: req.EvalOptions.ForceReschedule})
		res := &sim.RegResult{EvalID: ev.ID, EvalCreateIndex: ev.CreateIndex, JobModifyIndex: sim.Deref(job.JobModifyIndex), Index: ev.CreateIndex}
		return res.Index, res, nil
	})
}

// scaleStatus is Nomad's JobScaleStatusResponse.
type scaleStatus struct {
	JobID          string
	Namespace      string
	JobCreateIndex uint64
	JobModifyIndex uint64
	JobStopped     bool
	TaskGroups     map[string]api.TaskGroupScaleStatus
}

func (c *server) handleJobScale(w http.ResponseWriter, r *http.Request) {
	scale := func(q simhttp.Query) { c.scaleJob(w, r, q, r.PathValue("id")) }
	serveMethods(w, r, methodHandlers{
		http.MethodGet:  func(simhttp.Query) { c.jobRead(w, r, "read-job-scaling", c.readScaleStatus, sim.TableJobs) },
		http.MethodPut:  scale,
		http.MethodPost: scale,
	})
}

// readScaleStatus is the job's scale status, read under c.Mu.
func (c *server) readScaleStatus(j *sim.JobEntry, _ simhttp.Query) (uint64, any, error) {
	job := j.Current()
	out := &scaleStatus{JobID: j.Key.ID, Namespace: j.Key.Namespace, JobCreateIndex: sim.Deref(job.CreateIndex),
		JobModifyIndex: sim.Deref(job.JobModifyIndex), JobStopped: sim.Deref(job.Stop), TaskGroups: map[string]api.TaskGroupScaleStatus{}}
	for _, tg := range job.TaskGroups {
		st := api.TaskGroupScaleStatus{Desired: sim.Deref(tg.Count), Events: j.ScaleEvents[*tg.Name]}
		for _, ar := range j.Allocs {
			if ar.Alloc.TaskGroup != *tg.Name || ar.Terminal() {
				continue
			}
			st.Placed++
			if ar.ServerClientStatus() == api.AllocClientStatusRunning {
				st.Running++
			}
			if ds := ar.Alloc.DeploymentStatus; ds != nil && ds.Healthy != nil {
				if *ds.Healthy {
					st.Healthy++
				} else {
					st.Unhealthy++
				}
			}
		}
		out.TaskGroups[*tg.Name] = st
	}
	return c.TableIndex(sim.TableJobs, sim.TableAllocs, sim.TableScaling), out, nil
}

// scaleJob answers a scaling request, in Nomad's order: the HTTP agent decodes the body and
// compares the job ID, then Job.Scale checks the token, validates the request and looks the
// job up.
func (c *server) scaleJob(w http.ResponseWriter, r *http.Request, q simhttp.Query, id string) {
	var req api.ScalingRequest
	if err := decodeBody(r, &req); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if job := req.Target["Job"]; job != "" && job != id {
		simhttp.WriteError(w, sim.ErrBadRequest("job ID in payload did not match URL"))
		return
	}
	if err := c.authorizeAny(r, q.Namespace, "scale-job", "submit-job"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if err := sim.ValidateScaleRequest(&req, q.Namespace); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	c.write(w, func() (uint64, any, error) {
		j := c.Jobs[sim.JobKey{Namespace: q.Namespace, ID: id}]
		if j == nil {
			return 0, nil, sim.NotFound(fmt.Sprintf("job %q not found", id))
		}
		res, err := c.ScaleLocked(j, &req)
		if err != nil {
			return 0, nil, err
		}
		res.KnownLeader = true
		return res.Index, res, nil
	})
}

// handleJobPlan answers a dry run: the scheduler's decisions per group (placements,
// destructive and in-place updates, stops) and, with Diff, a job diff at the level of
// groups (field-level diffs are not computed).
func (c *server) handleJobPlan(w http.ResponseWriter, r *http.Request) {
	q, ok := c.writeQuery(w, r)
	if !ok {
		return
	}
	var req api.JobPlanRequest
	if err := decodeJobBody(r, &req, &req.Job, "Job must have a valid ID"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if id := r.PathValue("id"); *req.Job.ID != id {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Job ID does not match"))
		return
	}
	if err := sim.ValidateJob(req.Job, c.JobMaxCount()); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	job := sim.CloneJob(req.Job)
	if err := c.authorizeJobSubmit(r, q, job); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if job.Region == nil || *job.Region == "" {
		job.Region = sim.Ptr(c.Options.Region)
	}
	job.Canonicalize()
	c.write(w, func() (uint64, any, error) {
		return c.Index.Current(), c.plan(job, req.Diff), nil
	})
}

// plan computes a JobPlanResponse without changing anything. Callers hold c.Mu.
func (c *server) plan(job *api.Job, diff bool) *api.JobPlanResponse {
	out := &api.JobPlanResponse{Annotations: &api.PlanAnnotations{DesiredTGUpdates: map[string]*api.DesiredUpdates{}}}
	j := c.Jobs[sim.JobKey{Namespace: *job.Namespace, ID: *job.ID}]
	var prev *api.Job
	if j != nil {
		prev = j.Current()
		out.JobModifyIndex = sim.Deref(prev.JobModifyIndex)
	}
	jd := &api.JobDiff{Type: "None", ID: *job.ID}
	switch {
	case prev == nil:
		jd.Type = "Added"
	case sim.SpecChanged(prev, job):
		jd.Type = "Edited"
	}
	seen := map[string]bool{}
	for _, tg := range job.TaskGroups {
		name := *tg.Name
		seen[name] = true
		du := &api.DesiredUpdates{}
		gd := &api.TaskGroupDiff{Type: "None", Name: name, Updates: map[string]uint64{}}
		var live []*sim.AllocRun
		if j != nil {
			for _, ar := range sim.GroupAllocs(j, name) {
				if !ar.ClientTerminal() {
					live = append(live, ar)
				}
			}
		}
		count := sim.Deref(tg.Count)
		kept := min(len(live), count)
		switch {
		case prev == nil || sim.FindGroup(prev, name) == nil:
			gd.Type = "Added"
		case !sim.EqualJSON(sim.FindGroup(prev, name), tg):
			gd.Type = "Edited"
			gd.Tasks = taskDiffs(sim.FindGroup(prev, name), tg, sim.DestructiveChange(prev, job, name))
		}
		for _, ar := range live[:kept] {
			switch {
			case ar.Alloc.Job != nil && sim.DestructiveChange(ar.Alloc.Job, job, name):
				du.DestructiveUpdate++
			case ar.Alloc.Job != nil && !sim.EqualJSON(sim.FindGroup(ar.Alloc.Job, name), tg):
				du.InPlaceUpdate++
			default:
				du.Ignore++
			}
		}
		if count > kept {
			du.Place = uint64(count - kept)
		}
		if len(live) > count {
			du.Stop = uint64(len(live) - count)
		}
		for k, v := range map[string]uint64{"create": du.Place, "destroy": du.Stop, "create/destroy update": du.DestructiveUpdate, "in-place update": du.InPlaceUpdate, "ignore": du.Ignore} {
			if v > 0 {
				gd.Updates[k] = v
			}
		}
		out.Annotations.DesiredTGUpdates[name] = du
		jd.TaskGroups = append(jd.TaskGroups, gd)
	}
	if prev != nil {
		for _, tg := range prev.TaskGroups {
			if seen[*tg.Name] {
				continue
			}
			n := uint64(len(sim.GroupAllocs(j, *tg.Name)))
			out.Annotations.DesiredTGUpdates[*tg.Name] = &api.DesiredUpdates{Stop: n}
			jd.TaskGroups = append(jd.TaskGroups, &api.TaskGroupDiff{Type: "Deleted", Name: *tg.Name, Updates: map[string]uint64{"destroy": n}})
		}
	}
	if diff {
		out.Diff = jd
	}
	return out
}
