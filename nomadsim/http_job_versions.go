package nomadsim

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// A job's versions: the list, the source submitted with each, marking one stable and
// reverting to one.

// jobVersionsResponse is Nomad's JobVersionsResponse with its query meta.
type jobVersionsResponse struct {
	Versions    []*api.Job
	Diffs       []*api.JobDiff
	Index       uint64
	LastContact int64
	KnownLeader bool
	NextToken   string
}

func (c *Cluster) handleJobVersions(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *jobEntry, q simhttp.Query) (uint64, any, error) {
		out := &jobVersionsResponse{KnownLeader: true}
		for k := len(j.versions) - 1; k >= 0; k-- {
			out.Versions = append(out.Versions, j.versions[k])
		}
		out.Index = c.tableIndex(tJobs)
		return out.Index, out, nil
	}, tJobs)
}

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

func (c *Cluster) handleJobStable(w http.ResponseWriter, r *http.Request) {
	var req api.JobStabilityRequest
	c.jobWrite(w, r, &req, func() string { return req.JobID }, func(j *jobEntry, q simhttp.Query, id string) (uint64, any, error) {
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
	c.jobWrite(w, r, &req, func() string { return req.JobID }, func(j *jobEntry, q simhttp.Query, id string) (uint64, any, error) {
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
