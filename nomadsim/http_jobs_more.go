package nomadsim

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// More job sub-resources: submission, services, stable, revert, and job validation.

func (c *Cluster) handleJobSubmission(w http.ResponseWriter, r *http.Request) {
	version, err := strconv.ParseUint(r.URL.Query().Get("version"), 10, 64)
	if err != nil {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Unable to parse job submission version parameter"))
		return
	}
	c.jobRead(w, r, "read-job", func(j *jobEntry, q simhttp.Query) (uint64, any, error) {
		sub := j.submissions[version]
		if sub == nil {
			return c.tableIndex(tJobs), nil, notFound("job source not found")
		}
		return c.tableIndex(tJobs), sub, nil
	}, tJobs)
}

func (c *Cluster) handleJobServices(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *jobEntry, q simhttp.Query) (uint64, any, error) {
		out := []*api.ServiceRegistration{}
		for _, ar := range j.sortedAllocs() {
			for _, reg := range sortedRegs(ar.svcs) {
				if !ar.svcs[reg.ID].consul {
					out = append(out, reg)
				}
			}
		}
		return c.tableIndex(tServices), out, nil
	}, tServices)
}

func (c *Cluster) handleJobStable(w http.ResponseWriter, r *http.Request) {
	var req api.JobStabilityRequest
	q, id, ok := c.jobWriteRequest(w, r, &req, func() string { return req.JobID })
	if !ok {
		return
	}
	c.write(w, func() (uint64, any, error) {
		j, err := c.lookupJob(q.Namespace, id)
		if err != nil {
			return 0, nil, err
		}
		jv := j.version(req.JobVersion)
		if jv == nil {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("job %q at version %d not found", id, req.JobVersion))
		}
		jv.Stable = ptr(req.Stable)
		i := c.bump(tJobs)
		return i, map[string]any{"JobModifyIndex": i, "Index": i}, nil
	})
}

func (c *Cluster) handleJobRevert(w http.ResponseWriter, r *http.Request) {
	var req api.JobRevertRequest
	q, id, ok := c.jobWriteRequest(w, r, &req, func() string { return req.JobID })
	if !ok {
		return
	}
	c.write(w, func() (uint64, any, error) {
		j, err := c.lookupJob(q.Namespace, id)
		if err != nil {
			return 0, nil, err
		}
		cur := j.current()
		if req.EnforcePriorVersion != nil && *req.EnforcePriorVersion != *cur.Version {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("current job has version %d; enforcing version %d", *cur.Version, *req.EnforcePriorVersion))
		}
		if req.JobVersion == *cur.Version {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("can't revert to current version %d", req.JobVersion))
		}
		jv := j.version(req.JobVersion)
		if jv == nil {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("job %q in namespace %q at version %d not found", id, q.Namespace, req.JobVersion))
		}
		res, err := c.registerLocked(cloneJob(jv), "job-register")
		if err != nil {
			return 0, nil, err
		}
		res.KnownLeader = true
		return res.Index, res, nil
	})
}

func (c *Cluster) handleValidateJob(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	var req api.JobValidateRequest
	if err := decodeBody(r, &req); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if req.Job == nil {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Job must be specified"))
		return
	}
	out := &api.JobValidateResponse{DriverConfigValidated: true}
	if err := validateJob(req.Job); err != nil {
		out.Error = err.Error()
		out.ValidationErrors = []string{err.Error()}
	}
	simhttp.WriteJSON(w, out)
}

// jobWriteRequest reads the front of a job write endpoint (PUT or POST) as Nomad's agent does:
// the query options, the submit-job capability in the namespace, the JSON body into req, and
// that the body's job ID (bodyJobID, read once req is decoded) is the path's. It answers the
// error itself and reports ok false on any failure.
func (c *Cluster) jobWriteRequest(w http.ResponseWriter, r *http.Request, req any, bodyJobID func() string) (q simhttp.Query, id string, ok bool) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost) {
		return q, "", false
	}
	if q, ok = query(w, r); !ok {
		return q, "", false
	}
	if err := c.authorize(r, q.Namespace, "submit-job"); err != nil {
		simhttp.WriteError(w, err)
		return q, "", false
	}
	if err := decodeBody(r, req); err != nil {
		simhttp.WriteError(w, err)
		return q, "", false
	}
	id = r.PathValue("id")
	if bodyJobID() != id {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Job ID does not match"))
		return q, "", false
	}
	return q, id, true
}
