package nomadsim

import (
	"net/http"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *Cluster) handleNodes(w http.ResponseWriter, r *http.Request) {
	c.checkedRead(w, r, c.nodeReadRight(r), func(q simhttp.Query) (uint64, any, error) {
		out := []*api.NodeListStub{}
		for _, n := range c.nodes {
			if matchPrefix(n.n.ID, q.Prefix) {
				out = append(out, n.stub())
			}
		}
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		out, err := filterList(q.Filter, out)
		return c.tableIndex(tNodes), out, err
	})
}

func (c *Cluster) handleNode(w http.ResponseWriter, r *http.Request) {
	c.nodeRead(w, r, func(id string) (uint64, any, error) {
		n := c.nodeByID[id]
		if n == nil {
			return c.tableIndex(tNodes), nil, notFound("node not found")
		}
		return n.n.ModifyIndex, n.n, nil
	})
}

// nodeRead is the shape of a blocking read about the node the path's ID names: node read
// rights first; run reads under c.mu.
func (c *Cluster) nodeRead(w http.ResponseWriter, r *http.Request, run func(id string) (uint64, any, error)) {
	id := r.PathValue("id")
	c.checkedRead(w, r, c.nodeReadRight(r), func(simhttp.Query) (uint64, any, error) { return run(id) })
}

// nodeReadRight is the check of the node reads: node read rights, whatever the namespace.
func (c *Cluster) nodeReadRight(r *http.Request) func(simhttp.Query) error {
	return func(simhttp.Query) error { return c.authorizeLevel(r, "node", "read") }
}

func (c *Cluster) handleNodeAllocations(w http.ResponseWriter, r *http.Request) {
	c.nodeRead(w, r, func(id string) (uint64, any, error) {
		out := []*api.Allocation{}
		if n := c.nodeByID[id]; n != nil {
			for _, ar := range n.allocs {
				out = append(out, ar.view())
			}
		}
		sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
		return c.tableIndex(tAllocs), out, nil
	})
}
