package nomadsim

import (
	"net/http"
	"sort"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *Cluster) handleNamespaces(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	q, ok := query(w, r)
	if !ok {
		return
	}
	c.blocking(w, r, q, func() (uint64, any, error) {
		out := []*api.Namespace{}
		for _, ns := range c.namespaces {
			if matchPrefix(ns.Name, q.Prefix) {
				out = append(out, ns)
			}
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
		return c.tableIndex(tNamespaces), out, nil
	})
}

func (c *Cluster) handleNamespace(w http.ResponseWriter, r *http.Request) {
	q, ok := query(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	switch r.Method {
	case http.MethodGet:
		c.blocking(w, r, q, func() (uint64, any, error) {
			ns := c.namespaces[name]
			if ns == nil {
				return c.tableIndex(tNamespaces), nil, notFound("namespace not found")
			}
			return ns.ModifyIndex, ns, nil
		})
	case http.MethodPut, http.MethodPost:
		if err := c.authorizeManagement(r); err != nil {
			simhttp.WriteError(w, err)
			return
		}
		var ns api.Namespace
		if r.ContentLength != 0 {
			if err := decodeBody(r, &ns); err != nil {
				simhttp.WriteError(w, err)
				return
			}
		}
		if ns.Name == "" {
			ns.Name = name
		}
		c.write(w, func() (uint64, any, error) {
			i := c.bump(tNamespaces)
			if old := c.namespaces[ns.Name]; old != nil {
				ns.CreateIndex = old.CreateIndex
			} else {
				ns.CreateIndex = i
			}
			ns.ModifyIndex = i
			cp := ns
			c.namespaces[ns.Name] = &cp
			return i, nil, nil
		})
	case http.MethodDelete:
		if err := c.authorizeManagement(r); err != nil {
			simhttp.WriteError(w, err)
			return
		}
		c.write(w, func() (uint64, any, error) {
			if name == "default" {
				return 0, nil, simhttp.Errorf(http.StatusInternalServerError, "default namespace can not be deleted")
			}
			delete(c.namespaces, name)
			return c.bump(tNamespaces), nil, nil
		})
	default:
		methodIs(w, r)
	}
}
