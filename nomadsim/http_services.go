package nomadsim

import (
	"net/http"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *Cluster) handleServices(w http.ResponseWriter, r *http.Request) {
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
	c.blocking(w, r, q, func() (uint64, any, error) {
		byNS := map[string]map[string]map[string]bool{}
		for key, m := range c.svcByName {
			ns, name, _ := strings.Cut(key, "\x00")
			if (q.Namespace != "*" && ns != q.Namespace) || !allowed(ns) {
				continue
			}
			if byNS[ns] == nil {
				byNS[ns] = map[string]map[string]bool{}
			}
			tags := map[string]bool{}
			for _, r := range m {
				for _, t := range r.reg.Tags {
					tags[t] = true
				}
			}
			byNS[ns][name] = tags
		}
		out := []*api.ServiceRegistrationListStub{}
		for ns, svcs := range byNS {
			stub := &api.ServiceRegistrationListStub{Namespace: ns}
			for name, tags := range svcs {
				st := &api.ServiceRegistrationStub{ServiceName: name, Tags: []string{}}
				for t := range tags {
					st.Tags = append(st.Tags, t)
				}
				sort.Strings(st.Tags)
				stub.Services = append(stub.Services, st)
			}
			sort.Slice(stub.Services, func(a, b int) bool { return stub.Services[a].ServiceName < stub.Services[b].ServiceName })
			out = append(out, stub)
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Namespace < out[b].Namespace })
		return c.tableIndex(tServices), out, nil
	})
}

func (c *Cluster) handleService(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	q, ok := query(w, r)
	if !ok {
		return
	}
	if err := c.authorize(r, q.Namespace, "read-job"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	name := r.PathValue("name")
	c.blocking(w, r, q, func() (uint64, any, error) {
		out := []*api.ServiceRegistration{}
		out = append(out, sortedRegs(c.svcByName[q.Namespace+"\x00"+name])...)
		out, err := filterList(q.Filter, out)
		return c.tableIndex(tServices), out, err
	})
}
