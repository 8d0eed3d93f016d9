package httpapi

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// The allocation filesystem API (command/agent/fs_endpoint.go): ls and stat. readat, cat,
// stream and logs are not simulated.

// Nomad's answers to malformed filesystem requests (fs_endpoint.go).
var (
	errFsAllocID  = simhttp.Errorf(http.StatusBadRequest, "must provide a valid alloc id")
	errFsFileName = simhttp.Errorf(http.StatusBadRequest, "must provide a file name")
)

// handleFs dispatches /v1/client/fs/ as FsRequest does: on the path alone, whatever the
// method (the agent checks none).
func (c *server) handleFs(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/v1/client/fs/")
	var (
		out any
		err error
	)
	switch {
	case strings.HasPrefix(rest, "ls/"):
		p := r.URL.Query().Get("path")
		if p == "" {
			p = "/"
		}
		out, err = c.fsOp(r, strings.TrimPrefix(rest, "ls/"), func(f *sim.AllocFS) (any, error) { return f.List(p) })
	case strings.HasPrefix(rest, "stat/"):
		id, p := strings.TrimPrefix(rest, "stat/"), r.URL.Query().Get("path")
		if id != "" && p == "" {
			err = errFsFileName
			break
		}
		out, err = c.fsOp(r, id, func(f *sim.AllocFS) (any, error) { return f.Stat(p) })
	default:
		err = simhttp.Errorf(http.StatusNotFound, errInvalidMethod)
	}
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	simhttp.WriteJSON(w, out)
}

// fsOp runs a filesystem read of allocation id with Nomad's checks, in the order a
// request meets them on an agent that is server and client: the token first (the server's
// Authenticate, or the client's token resolution: an unknown one is "Permission denied"),
// the allocation (the server's lookup, then the client's own: one its client has not
// picked up yet is unknown there), the read-fs capability in the allocation's namespace,
// and a path to its node.
func (c *server) fsOp(r *http.Request, id string, op func(f *sim.AllocFS) (any, error)) (any, error) {
	if id == "" {
		return nil, errFsAllocID
	}
	tok, err := c.Ext.ACL.Resolve(secretOf(r))
	if err != nil {
		return nil, err
	}
	if len(id) != 36 {
		// The server's state store looks the ID up in a UUID index, which refuses it.
		return nil, simhttp.Errorf(http.StatusInternalServerError, "alloc lookup failed: index error: UUID must be 36 characters")
	}
	c.Mu.Lock()
	defer c.Mu.Unlock()
	unknown := sim.NotFound(fmt.Sprintf("Unknown allocation %q", id))
	ar := c.Allocs[id]
	if ar == nil {
		return nil, unknown
	}
	if !tok.AllowNamespace(ar.Alloc.Namespace, "read-fs") {
		return nil, acl.ErrPermissionDenied()
	}
	if ar.Node.Node.Status == api.NodeStatusDown {
		// structs.ErrNoNodeConn, which the agent answers 404.
		return nil, sim.NotFound("No path to node")
	}
	if ar.FS == nil {
		return nil, unknown
	}
	return op(ar.FS)
}
