package httpapi

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
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

func (c *server) handleJobVersions(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error) {
		out := &jobVersionsResponse{KnownLeader: true}
		for k := len(j.Versions) - 1; k >= 0; k-- {
			out.Versions = append(out.Versions, j.Versions[k])
		}
		out.Index = c.TableIndex(sim.TableJobs)
		return out.Index, out, nil
	}, sim.TableJobs)
}

func (c *server) handleJobSubmission(w http.ResponseWriter, r *http.Request) {
	version, err := strconv.ParseUint(r.URL.Query().Get("version"), 10, 64)
	if err != nil {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Unable to parse job submission version parameter"))
		return
	}
	c.jobRead(w, r, "read-job", func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error) {
		sub := j.Submissions[version]
		if sub == nil {
			return c.TableIndex(sim.TableJobs), nil, sim.NotFound("job source not found")
		}
		return c.TableIndex(sim.TableJobs), sub, nil
	}, sim.TableJobs)
}

func (c *server) handleJobStable(w http.ResponseWriter, r *http.Request) {
	var req api.JobStabilityRequest
	c.jobWrite(w, r, &req, func() string { return req.JobID }, func(j *sim.JobEntry, q simhttp.Query, id string) (uint64, any, error) {
		jv := j.VersionAt(req.JobVersion)
		if jv == nil {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("job %q at version %d not found", id, req.JobVersion))
		}
		jv.Stable = sim.Ptr(req.Stable)
		i := c.Bump(sim.TableJobs)
		return i, map[string]any{"JobModifyIndex": i, "Index": i}, nil
	})
}

func (c *server) handleJobRevert(w http.ResponseWriter, r *http.Request) {
	var req api.JobRevertRequest
	c.jobWrite(w, r, &req, func() string { return req.JobID }, func(j *sim.JobEntry, q simhttp.Query, id string) (uint64, any, error) {
		cur := j.Current()
		if req.EnforcePriorVersion != nil && *req.EnforcePriorVersion != *cur.Version {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("current job has version %d; enforcing version %d", *cur.Version, *req.EnforcePriorVersion))
		}
		if req.JobVersion == *cur.Version {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("can't revert to current version %d", req.JobVersion))
		}
		jv := j.VersionAt(req.JobVersion)
		if jv == nil {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, fmt.Sprintf("job %q in namespace %q at version %d not found", id, q.Namespace, req.JobVersion))
		}
		res, err := c.RegisterLocked(sim.CloneJob(jv), "job-register")
		if err != nil {
			return 0, nil, err
		}
		res.KnownLeader = true
		return res.Index, res, nil
	})
}
