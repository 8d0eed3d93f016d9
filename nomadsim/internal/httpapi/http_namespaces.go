package httpapi

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *server) handleNamespaces(w http.ResponseWriter, r *http.Request) {
	c.checkedRead(w, r, nil, func(q simhttp.Query) (uint64, any, error) {
		out := []*api.Namespace{}
		for _, ns := range c.Namespaces {
			if matchPrefix(ns.Name, q.Prefix) {
				out = append(out, ns)
			}
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
		return c.TableIndex(sim.TableNamespaces), out, nil
	})
}

func (c *server) handleNamespace(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	upsert := func(simhttp.Query) { c.upsertNamespace(w, r, name) }
	serveMethods(w, r, methodHandlers{
		http.MethodGet: func(q simhttp.Query) {
			c.blocking(w, r, q, func() (uint64, any, error) {
				ns := c.Namespaces[name]
				if ns == nil {
					return c.TableIndex(sim.TableNamespaces), nil, sim.NotFound("namespace not found")
				}
				return ns.ModifyIndex, ns, nil
			})
		},
		http.MethodPut:    upsert,
		http.MethodPost:   upsert,
		http.MethodDelete: func(simhttp.Query) { c.deleteNamespace(w, r, name) },
	})
}

// deleteNamespace answers DELETE /v1/namespace/:name, which needs a management token.
func (c *server) deleteNamespace(w http.ResponseWriter, r *http.Request, name string) {
	if err := c.authorizeManagement(r); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	c.write(w, func() (uint64, any, error) {
		if name == "default" {
			return 0, nil, simhttp.Errorf(http.StatusInternalServerError, "default namespace can not be deleted")
		}
		delete(c.Namespaces, name)
		return c.Bump(sim.TableNamespaces), nil, nil
	})
}

// handleNamespaceCreate is PUT /v1/namespace, where the api's Namespaces().Register
// writes: the name comes from the body only (Nomad's NamespaceCreateRequest).
func (c *server) handleNamespaceCreate(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodPut, http.MethodPost) {
		return
	}
	c.upsertNamespace(w, r, "")
}

// validNamespaceName is Nomad's rule for namespace names (structs.validNamespaceName).
var validNamespaceName = regexp.MustCompile("^[a-zA-Z0-9-]{1,128}$")

// upsertNamespace is Nomad's namespaceUpdate: the body's name must match the path's (when
// the path names one), then Namespace.UpsertNamespaces validates it.
func (c *server) upsertNamespace(w http.ResponseWriter, r *http.Request, pathName string) {
	if err := c.authorizeManagement(r); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	var ns api.Namespace
	if err := decodeBody(r, &ns); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	if pathName != "" && ns.Name != pathName {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusBadRequest, "Namespace name does not match request path"))
		return
	}
	if !validNamespaceName.MatchString(ns.Name) {
		// The RPC's multierror, answered as a 500 like every RPC error.
		simhttp.WriteError(w, simhttp.Errorf(http.StatusInternalServerError,
			fmt.Sprintf("Invalid namespace %q: 1 error occurred:\n\t* invalid name %q. Must match regex %s\n\n", ns.Name, ns.Name, validNamespaceName)))
		return
	}
	c.write(w, func() (uint64, any, error) {
		i := c.Bump(sim.TableNamespaces)
		if old := c.Namespaces[ns.Name]; old != nil {
			ns.CreateIndex = old.CreateIndex
		} else {
			ns.CreateIndex = i
		}
		ns.ModifyIndex = i
		cp := ns
		c.Namespaces[ns.Name] = &cp
		return i, nil, nil
	})
}
