package httpapi

import (
	"net/http"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *server) handleEvaluations(w http.ResponseWriter, r *http.Request) {
	status := r.URL.Query().Get("status")
	jobFilter := r.URL.Query().Get("job")
	c.listRead(w, r, "read-job", func(q simhttp.Query, allowed func(ns string) bool) (uint64, any, error) {
		out := []*api.Evaluation{}
		for _, ev := range c.Evals {
			if (q.Namespace != "*" && ev.Namespace != q.Namespace) || !matchPrefix(ev.ID, q.Prefix) || !allowed(ev.Namespace) {
				continue
			}
			if (status != "" && ev.Status != status) || (jobFilter != "" && ev.JobID != jobFilter) {
				continue
			}
			out = append(out, ev)
		}
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		out, err := filterList(q.Filter, out)
		return c.TableIndex(sim.TableEvals), out, err
	})
}

func (c *server) handleEvaluation(w http.ResponseWriter, r *http.Request) {
	c.readOne(w, r, sim.TableEvals, "eval not found", c.evalRef)
}

func (c *server) handleEvaluationAllocations(w http.ResponseWriter, r *http.Request) {
	c.readAllocsOf(w, r, c.evalRef, func(a *api.Allocation, id string) bool { return a.EvalID == id })
}

// evalRef finds an evaluation for readOne and readAllocsOf. Callers hold c.Mu.
func (c *server) evalRef(id string) (objectRef, bool) {
	ev := c.Evals[id]
	if ev == nil {
		return objectRef{}, false
	}
	return objectRef{v: ev, ns: ev.Namespace, jobID: ev.JobID, index: ev.ModifyIndex}, true
}

// objectRef is what the reads of one deployment or evaluation by ID need of it.
type objectRef struct {
	v         any // the object, as the endpoint answers it
	ns, jobID string
	index     uint64 // its ModifyIndex
}

// readOne answers the blocking read of one object of table by the path's ID: find looks it
// up under c.Mu (unknown: a 404 saying missing); reading it needs read-job in its namespace.
func (c *server) readOne(w http.ResponseWriter, r *http.Request, table, missing string, find func(id string) (objectRef, bool)) {
	id := r.PathValue("id")
	c.checkedRead(w, r, nil, func(simhttp.Query) (uint64, any, error) {
		o, ok := find(id)
		if !ok {
			return c.TableIndex(table), nil, sim.NotFound(missing)
		}
		if err := c.authorize(r, o.ns, "read-job"); err != nil {
			return c.TableIndex(table), nil, err
		}
		return o.index, o.v, nil
	})
}

// readAllocsOf answers the blocking read of the allocations of the object (a deployment, an
// evaluation) the path's ID names: those of its job that belongs keeps; none when find
// does not know it.
func (c *server) readAllocsOf(w http.ResponseWriter, r *http.Request, find func(id string) (objectRef, bool), belongs func(a *api.Allocation, id string) bool) {
	id := r.PathValue("id")
	c.checkedRead(w, r, nil, func(simhttp.Query) (uint64, any, error) {
		out := []allocStub{}
		if o, ok := find(id); ok {
			if err := c.authorize(r, o.ns, "read-job"); err != nil {
				return c.TableIndex(sim.TableAllocs), nil, err
			}
			if j := c.Jobs[sim.JobKey{Namespace: o.ns, ID: o.jobID}]; j != nil {
				for _, ar := range j.SortedAllocs() {
					if belongs(ar.Alloc, id) {
						out = append(out, listStub(ar, true, false))
					}
				}
			}
		}
		return c.TableIndex(sim.TableAllocs), out, nil
	})
}
