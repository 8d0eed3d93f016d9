package httpapi

import (
	"net/http"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *server) handleNodes(w http.ResponseWriter, r *http.Request) {
	c.checkedRead(w, r, c.nodeReadRight(r), func(q simhttp.Query) (uint64, any, error) {
		out := []*api.NodeListStub{}
		for _, n := range c.NodeList {
			if matchPrefix(n.Node.ID, q.Prefix) {
				out = append(out, n.Stub())
			}
		}
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		out, err := filterList(q.Filter, out)
		return c.TableIndex(sim.TableNodes), out, err
	})
}

func (c *server) handleNode(w http.ResponseWriter, r *http.Request) {
	c.nodeRead(w, r, func(id string) (uint64, any, error) {
		n := c.NodeByID[id]
		if n == nil {
			return c.TableIndex(sim.TableNodes), nil, sim.NotFound("node not found")
		}
		return n.Node.ModifyIndex, n.Node, nil
	})
}

// nodeRead is the shape of a blocking read about the node the path's ID names: node read
// rights first; run reads under c.Mu.
func (c *server) nodeRead(w http.ResponseWriter, r *http.Request, run func(id string) (uint64, any, error)) {
	id := r.PathValue("id")
	c.checkedRead(w, r, c.nodeReadRight(r), func(simhttp.Query) (uint64, any, error) { return run(id) })
}

// nodeReadRight is the check of the node reads: node read rights, whatever the namespace.
func (c *server) nodeReadRight(r *http.Request) func(simhttp.Query) error {
	return func(simhttp.Query) error { return c.authorizeLevel(r, "node", "read") }
}

func (c *server) handleNodeAllocations(w http.ResponseWriter, r *http.Request) {
	c.nodeRead(w, r, func(id string) (uint64, any, error) {
		out := []*api.Allocation{}
		if n := c.NodeByID[id]; n != nil {
			for _, ar := range n.Allocs {
				out = append(out, ar.View())
			}
		}
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		return c.TableIndex(sim.TableAllocs), out, nil
	})
}
