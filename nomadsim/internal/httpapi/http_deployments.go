package httpapi

import (
	"net/http"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *server) handleDeployments(w http.ResponseWriter, r *http.Request) {
	c.listRead(w, r, "read-job", func(q simhttp.Query, allowed func(ns string) bool) (uint64, any, error) {
		out := []*api.Deployment{}
		for _, d := range c.Deployments {
			if (q.Namespace == "*" || d.Namespace == q.Namespace) && matchPrefix(d.ID, q.Prefix) && allowed(d.Namespace) {
				out = append(out, d)
			}
		}
		sort.Slice(out, func(a, b int) bool { return out[a].CreateIndex > out[b].CreateIndex })
		out, err := filterList(q.Filter, out)
		return c.TableIndex(sim.TableDeployments), out, err
	})
}

func (c *server) handleDeployment(w http.ResponseWriter, r *http.Request) {
	c.readOne(w, r, sim.TableDeployments, "deployment not found", c.deploymentRef)
}

func (c *server) handleDeploymentAllocations(w http.ResponseWriter, r *http.Request) {
	c.readAllocsOf(w, r, c.deploymentRef, func(a *api.Allocation, id string) bool { return a.DeploymentID == id })
}

// deploymentRef finds a deployment for readOne and readAllocsOf. Callers hold c.Mu.
func (c *server) deploymentRef(id string) (objectRef, bool) {
	d := c.Deployments[id]
	if d == nil {
		return objectRef{}, false
	}
	return objectRef{v: d, ns: d.Namespace, jobID: d.JobID, index: d.ModifyIndex}, true
}

// deploymentUpdateResponse is Nomad's DeploymentUpdateResponse.
type deploymentUpdateResponse struct {
	EvalID                string
	EvalCreateIndex       uint64
	DeploymentModifyIndex uint64
	Index                 uint64
}

func (c *server) deploymentWrite(w http.ResponseWriter, r *http.Request, fn func(d *api.Deployment) error) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	id := r.PathValue("id")
	c.Mu.Lock()
	ns := "default"
	if d := c.Deployments[id]; d != nil {
		ns = d.Namespace
	}
	c.Mu.Unlock()
	if err := c.authorize(r, ns, "submit-job"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	c.write(w, func() (uint64, any, error) {
		d := c.Deployments[id]
		if d == nil {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, "deployment not found")
		}
		if err := fn(d); err != nil {
			return 0, nil, err
		}
		res := &deploymentUpdateResponse{DeploymentModifyIndex: d.ModifyIndex, Index: c.Index.Current()}
		if j := c.Jobs[sim.JobKey{Namespace: d.Namespace, ID: d.JobID}]; j != nil && len(j.Evals) > 0 {
			ev := j.Evals[len(j.Evals)-1]
			res.EvalID, res.EvalCreateIndex = ev.ID, ev.CreateIndex
		}
		return res.Index, res, nil
	})
}

func (c *server) handleDeploymentPromote(w http.ResponseWriter, r *http.Request) {
	var req api.DeploymentPromoteRequest
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		if err := decodeBody(r, &req); err != nil {
			simhttp.WriteError(w, err)
			return
		}
	}
	c.deploymentWrite(w, r, func(d *api.Deployment) error {
		groups := req.Groups
		if req.All {
			groups = nil
		}
		return c.Promote(d, groups)
	})
}

func (c *server) handleDeploymentFail(w http.ResponseWriter, r *http.Request) {
	c.deploymentWrite(w, r, func(d *api.Deployment) error {
		if d.Status != api.DeploymentStatusRunning && d.Status != api.DeploymentStatusPaused {
			return simhttp.Errorf(http.StatusInternalServerError, "can't fail terminal deployment")
		}
		d.Status = api.DeploymentStatusFailed
		d.StatusDescription = "Deployment marked as failed"
		c.TouchDeployment(d)
		return nil
	})
}

func (c *server) handleDeploymentPause(w http.ResponseWriter, r *http.Request) {
	var req api.DeploymentPauseRequest
	if err := decodeBody(r, &req); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	c.deploymentWrite(w, r, func(d *api.Deployment) error {
		if d.Status != api.DeploymentStatusRunning && d.Status != api.DeploymentStatusPaused {
			return simhttp.Errorf(http.StatusInternalServerError, "can't pause terminal deployment")
		}
		if req.Pause {
			d.Status, d.StatusDescription = api.DeploymentStatusPaused, "Deployment is paused"
		} else {
			d.Status, d.StatusDescription = api.DeploymentStatusRunning, "Deployment is running"
		}
		c.TouchDeployment(d)
		if !req.Pause {
			c.DeploymentProgressSoon(d)
		}
		return nil
	})
}
