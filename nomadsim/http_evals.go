package nomadsim

import (
	"net/http"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *Cluster) handleEvaluations(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	q, ok := query(w, r)
	if !ok {
		return
	}
	allowed, err := c.authorizeList(r, q.Namespace, "read-job")
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	status := r.URL.Query().Get("status")
	jobFilter := r.URL.Query().Get("job")
	c.blocking(w, r, q, func() (uint64, any, error) {
		out := []*api.Evaluation{}
		for _, ev := range c.evals {
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
		return c.tableIndex(tEvals), out, err
	})
}

func (c *Cluster) handleEvaluation(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	q, ok := query(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	c.blocking(w, r, q, func() (uint64, any, error) {
		ev := c.evals[id]
		if ev == nil {
			return c.tableIndex(tEvals), nil, notFound("eval not found")
		}
		if err := c.authorize(r, ev.Namespace, "read-job"); err != nil {
			return c.tableIndex(tEvals), nil, err
		}
		return ev.ModifyIndex, ev, nil
	})
}

func (c *Cluster) handleEvaluationAllocations(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	q, ok := query(w, r)
	if !ok {
		return
	}
	id := r.PathValue("id")
	c.blocking(w, r, q, func() (uint64, any, error) {
		out := []allocStub{}
		ev := c.evals[id]
		if ev != nil {
			if err := c.authorize(r, ev.Namespace, "read-job"); err != nil {
				return c.tableIndex(tAllocs), nil, err
			}
			if j := c.jobs[jobKey{ev.Namespace, ev.JobID}]; j != nil {
				for _, ar := range j.sortedAllocs() {
					if ar.a.EvalID == id {
						out = append(out, ar.stub(true, false))
					}
				}
			}
		}
		return c.tableIndex(tAllocs), out, nil
	})
}
