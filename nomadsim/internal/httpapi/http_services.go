package httpapi

import (
	"net/http"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *server) handleServices(w http.ResponseWriter, r *http.Request) {
	c.listRead(w, r, "read-job", func(q simhttp.Query, allowed func(ns string) bool) (uint64, any, error) {
		byNS := map[string]map[string]map[string]bool{}
		for key, m := range c.ServicesByName {
			ns, name, _ := strings.Cut(key, "\x00")
			if (q.Namespace != "*" && ns != q.Namespace) || !allowed(ns) {
				continue
			}
			if byNS[ns] == nil {
				byNS[ns] = map[string]map[string]bool{}
			}
			tags := map[string]bool{}
			for _, r := range m {
				for _, t := range r.Reg.Tags {
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
		return c.TableIndex(sim.TableServices), out, nil
	})
}

func (c *server) handleService(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	c.checkedRead(w, r, c.inNamespace(r, "read-job"), func(q simhttp.Query) (uint64, any, error) {
		out := []*api.ServiceRegistration{}
		out = append(out, sim.SortedRegs(c.ServicesByName[q.Namespace+"\x00"+name])...)
		out, err := filterList(q.Filter, out)
		return c.TableIndex(sim.TableServices), out, err
	})
}

func (c *server) handleJobServices(w http.ResponseWriter, r *http.Request) {
	c.jobRead(w, r, "read-job", func(j *sim.JobEntry, q simhttp.Query) (uint64, any, error) {
		out := []*api.ServiceRegistration{}
		for _, ar := range j.SortedAllocs() {
			for _, reg := range sim.SortedRegs(ar.Services) {
				if !ar.Services[reg.ID].Consul {
					out = append(out, reg)
				}
			}
		}
		return c.TableIndex(sim.TableServices), out, nil
	}, sim.TableServices)
}
