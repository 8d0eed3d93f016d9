package consul

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-bexpr"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// Handler serves Consul's GET /v1/health/checks/:service, /v1/health/service/:service
// (?passing, ?tag, ?filter), /v1/catalog/service/:service (?tag, ?filter; no health),
// /v1/health/state/:state, /v1/status/leader and /v1/agent/self, PUT /v1/catalog/register
// and /v1/catalog/deregister (see catalogRegister and catalogDeregister),
// and the KV store under /v1/kv/ (GET, PUT, DELETE; see serveKV).
// Reads of the health and KV endpoints block on ?index= and ?wait= as Consul's do.
//
// Consul serves its API through net/http's ServeMux, and so does the sim: a path that is not
// clean (a key with "//" or "/../") is redirected to its cleaned form, /v1/kv to /v1/kv/.
// Answers are compressed as Consul compresses them (see withGzip).
func (c *Catalog) Handler() http.Handler {
	mux := http.NewServeMux()
	// Consul compresses behind its mux: its redirects are not compressed, nor do they vary.
	mux.Handle("/v1/kv/", withGzip(http.HandlerFunc(c.serveKV)))
	mux.Handle("/", withGzip(http.HandlerFunc(c.serveCatalog)))
	return mux
}

// aclDefaultPolicy is what a Consul agent without ACL settings reports in
// X-Consul-Default-ACL-Policy. The sim's Consul has no ACLs: it accepts any token and
// enforces nothing.
const aclDefaultPolicy = "allow"

// setAgentHeaders writes what every answer of a Consul agent carries: its ACL default
// policy, ACLs enabled or not.
func setAgentHeaders(w http.ResponseWriter) {
	w.Header().Set("X-Consul-Default-ACL-Policy", aclDefaultPolicy)
}

// serveCatalog answers the health, status and agent endpoints.
func (c *Catalog) serveCatalog(w http.ResponseWriter, r *http.Request) {
	setAgentHeaders(w)
	switch r.URL.Path {
	case "/v1/catalog/register":
		c.serveCatalogWrite(w, r, true)
		return
	case "/v1/catalog/deregister":
		c.serveCatalogWrite(w, r, false)
		return
	}
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		fmt.Fprintf(w, "method %s not allowed", r.Method)
		return
	}
	p := r.URL.Path
	switch {
	case strings.HasPrefix(p, "/v1/health/checks/"):
		c.serveHealth(w, r, strings.TrimPrefix(p, "/v1/health/checks/"), c.serviceChecks)
	case strings.HasPrefix(p, "/v1/health/service/"):
		c.serveServiceNodes(w, r, strings.TrimPrefix(p, "/v1/health/service/"))
	case strings.HasPrefix(p, "/v1/catalog/service/"):
		c.serveCatalogService(w, r, strings.TrimPrefix(p, "/v1/catalog/service/"))
	case strings.HasPrefix(p, "/v1/health/state/"):
		c.serveState(w, r, strings.TrimPrefix(p, "/v1/health/state/"))
	case p == "/v1/status/leader":
		writeJSON(w, "127.0.0.1:8300")
	case p == "/v1/agent/self":
		c.serveAgentSelf(w)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// badRequest answers 400 with msg. Consul writes these without a Content-Type, which
// net/http then sniffs as plain text; setting it says the same without relying on that.
func badRequest(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusBadRequest)
	fmt.Fprint(w, msg)
}

// setMeta writes the headers Consul puts on every read.
func setMeta(w http.ResponseWriter, idx uint64) {
	if idx == 0 {
		idx = 1
	}
	w.Header().Set("X-Consul-Index", strconv.FormatUint(idx, 10))
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("X-Consul-LastContact", "0")
	w.Header().Set("X-Consul-Effective-Consistency", "leader")
}

// parseQuery reads ?index and ?wait with Consul's wording for bad values.
func parseQuery(w http.ResponseWriter, r *http.Request) (simhttp.Query, bool) {
	var q simhttp.Query
	v := r.URL.Query()
	if s := v.Get("wait"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			badRequest(w, "Invalid wait time")
			return q, false
		}
		q.Wait = d
	}
	if s := v.Get("index"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			badRequest(w, "Invalid index")
			return q, false
		}
		q.MinIndex = n
	}
	q.Filter = v.Get("filter")
	return q, true
}

// block runs a read as a Consul blocking query over the catalog's index.
func (c *Catalog) block(r *http.Request, q simhttp.Query, run func() (uint64, any)) (uint64, any, error) {
	return simhttp.Block(r.Context(), c.idx, q, nil, func() (uint64, any, error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		i, v := run()
		return i, v, nil
	})
}

// healthCheck renders a check row as consul/api's HealthCheck.
func (c *Catalog) healthCheck(ch *checkRow) *api.HealthCheck {
	hc := &api.HealthCheck{
		Node: c.nodeNameOf(ch.node), CheckID: ch.check.ID, Name: ch.check.Name, Status: ch.check.Status,
		Notes: ch.check.Notes, Output: ch.check.Output, ServiceID: ch.check.ServiceID, ServiceTags: []string{},
		Type: ch.check.Type, CreateIndex: ch.createIndex, ModifyIndex: ch.modifyIndex,
	}
	if !ch.foreign && hc.Type == "" {
		hc.Type = "http"
	}
	hc.ServiceName = ch.serviceName
	if ch.serviceTags != nil {
		hc.ServiceTags = ch.serviceTags
	}
	return hc
}

// nodeNameOf is a node's name as the catalog spells it.
func (c *Catalog) nodeNameOf(name string) string {
	if n := c.nodes[strings.ToLower(name)]; n != nil {
		return n.name
	}
	return name
}

// serfCheck is the node health check every Consul agent has, passing while it runs.
func serfCheck(n *nodeRow) *api.HealthCheck {
	return &api.HealthCheck{
		Node: n.name, CheckID: "serfHealth", Name: "Serf Health Status", Status: StatusPassing,
		Output: "Agent alive and reachable", ServiceTags: []string{}, CreateIndex: n.createIndex, ModifyIndex: n.createIndex,
	}
}

// nodeChecks is a node's node-level checks, serfHealth among them for a node of an agent,
// in Consul's order.
func (c *Catalog) nodeChecks(n *nodeRow) api.HealthChecks {
	var out api.HealthChecks
	if n.agent {
		out = append(out, serfCheck(n))
	}
	for _, ch := range n.checks {
		out = append(out, c.healthCheck(ch))
	}
	sortChecks(out)
	return out
}

// sortChecks orders checks by node, then check ID, as Consul's indexes list them.
func sortChecks(list api.HealthChecks) {
	slices.SortStableFunc(list, func(a, b *api.HealthCheck) int { return compareRows(a.Node, a.CheckID, b.Node, b.CheckID) })
}

// sortedInstances lists a service's instances by node, then ID, for stable answers.
func (c *Catalog) sortedInstances(service string) []*serviceRow {
	var out []*serviceRow
	for _, s := range c.services {
		if s.inst.Service == service {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *serviceRow) int { return compareRows(a.inst.Node, a.inst.ID, b.inst.Node, b.inst.ID) })
	return out
}

func (c *Catalog) serviceChecks(service string) (uint64, any) {
	out := make(api.HealthChecks, 0)
	for _, s := range c.sortedInstances(service) {
		for _, ch := range s.checks {
			out = append(out, c.healthCheck(ch))
		}
	}
	sortChecks(out)
	return c.serviceIndex[service], []*api.HealthCheck(out)
}

func (c *Catalog) serveHealth(w http.ResponseWriter, r *http.Request, service string, run func(string) (uint64, any)) {
	if service == "" {
		badRequest(w, "Missing service name")
		return
	}
	c.serveFilteredList(w, r, func() (uint64, any) { return run(service) })
}

// serveFilteredList answers a blocking read of a list: the query options, then run under
// the catalog's lock, then the ?filter= expression applied to what it listed.
func (c *Catalog) serveFilteredList(w http.ResponseWriter, r *http.Request, run func() (uint64, any)) {
	q, ok := parseQuery(w, r)
	if !ok {
		return
	}
	got, v, err := c.block(r, q, run)
	if err != nil {
		return // the client went away
	}
	v, err = applyFilter(q.Filter, v)
	if err != nil {
		badRequest(w, err.Error())
		return
	}
	setMeta(w, got)
	writeJSON(w, v)
}

func (c *Catalog) serveServiceNodes(w http.ResponseWriter, r *http.Request, service string) {
	params := r.URL.Query()
	passing := false
	if _, ok := params["passing"]; ok {
		if s := params.Get("passing"); s == "" {
			passing = true
		} else {
			b, err := strconv.ParseBool(s)
			if err != nil {
				badRequest(w, "Invalid value for ?passing")
				return
			}
			passing = b
		}
	}
	tags := params["tag"]
	c.serveHealth(w, r, service, func(service string) (uint64, any) {
		return c.serviceNodes(service, tags, passing)
	})
}

// apiNode renders a node as consul/api's Node.
func apiNode(n *nodeRow) *api.Node {
	return &api.Node{
		ID: n.id, Node: n.name, Address: n.address, Datacenter: n.datacenter,
		TaggedAddresses: n.tagged, Meta: n.meta, CreateIndex: n.createIndex, ModifyIndex: n.modifyIndex,
	}
}

// serviceNodes lists a service's instances with their node and checks: the node's checks,
// then the instance's, as Consul's parseCheckServiceNodes gathers them. With passing, an
// instance with any check not passing is left out.
func (c *Catalog) serviceNodes(service string, tags []string, passing bool) (uint64, any) {
	out := make([]*api.ServiceEntry, 0)
NEXT:
	for _, st := range c.taggedInstances(service, tags) {
		n := c.nodes[strings.ToLower(st.inst.Node)]
		checks := c.nodeChecks(n)
		var own api.HealthChecks
		for _, ch := range st.checks {
			own = append(own, c.healthCheck(ch))
		}
		sortChecks(own)
		checks = append(checks, own...)
		if passing {
			for _, ch := range checks {
				if ch.Status != StatusPassing {
					continue NEXT
				}
			}
		}
		out = append(out, &api.ServiceEntry{
			Node: apiNode(n),
			Service: &api.AgentService{
				ID: st.inst.ID, Service: st.inst.Service, Tags: st.tags(), Address: st.inst.Address,
				Port: st.inst.Port, Datacenter: Datacenter,
				Weights:     api.AgentWeights{Passing: 1, Warning: 1},
				CreateIndex: st.createIndex, ModifyIndex: st.modifyIndex,
			},
			Checks: checks,
		})
	}
	return c.serviceIndex[service], out
}

// serveCatalogService answers /v1/catalog/service/:service: every registered instance,
// whatever its checks say, as Consul's catalog lists them.
func (c *Catalog) serveCatalogService(w http.ResponseWriter, r *http.Request, service string) {
	if service == "" {
		badRequest(w, "Missing service name")
		return
	}
	tags := r.URL.Query()["tag"]
	c.serveFilteredList(w, r, func() (uint64, any) { return c.catalogService(service, tags) })
}

func (c *Catalog) catalogService(service string, tags []string) (uint64, any) {
	out := make([]*api.CatalogService, 0)
	for _, st := range c.taggedInstances(service, tags) {
		n := c.nodes[strings.ToLower(st.inst.Node)]
		out = append(out, &api.CatalogService{
			ID: n.id, Node: n.name, Address: n.address, Datacenter: n.datacenter,
			TaggedAddresses: n.tagged, NodeMeta: n.meta,
			ServiceID: st.inst.ID, ServiceName: st.inst.Service, ServiceAddress: st.inst.Address,
			ServiceTags: st.tags(), ServicePort: st.inst.Port,
			ServiceWeights: api.Weights{Passing: 1, Warning: 1},
			CreateIndex:    st.createIndex, ModifyIndex: st.modifyIndex,
		})
	}
	return c.serviceIndex[service], out
}

// taggedInstances lists a service's instances, in order, that carry every one of tags.
func (c *Catalog) taggedInstances(service string, tags []string) []*serviceRow {
	return slices.DeleteFunc(c.sortedInstances(service), func(st *serviceRow) bool {
		return slices.ContainsFunc(tags, func(t string) bool { return !containsFold(st.inst.Tags, t) })
	})
}

// tags are the instance's tags as Consul answers them: a list, never null.
func (st *serviceRow) tags() []string {
	if st.inst.Tags == nil {
		return []string{}
	}
	return st.inst.Tags
}

// containsFold reports whether tags holds t; Consul's tag filter ignores case.
func containsFold(tags []string, t string) bool {
	for _, x := range tags {
		if strings.EqualFold(x, t) {
			return true
		}
	}
	return false
}

func (c *Catalog) serveState(w http.ResponseWriter, r *http.Request, state string) {
	switch state {
	case "":
		badRequest(w, "Missing check state")
		return
	case "any", StatusPassing, StatusWarning, StatusCritical:
	default:
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, "Invalid check state")
		return
	}
	c.serveFilteredList(w, r, func() (uint64, any) { return c.checksInState(state) })
}

// checksInState lists the checks in the state ("any": all), by node then check ID.
func (c *Catalog) checksInState(state string) (uint64, any) {
	out := make(api.HealthChecks, 0)
	for _, n := range c.nodes {
		if n.agent && (state == "any" || state == StatusPassing) {
			out = append(out, serfCheck(n))
		}
	}
	for _, ch := range c.checks {
		if state == "any" || ch.check.Status == state {
			out = append(out, c.healthCheck(ch))
		}
	}
	sortChecks(out)
	return c.catalogIndex, []*api.HealthCheck(out)
}

// applyFilter keeps the elements of a list that a ?filter= expression (go-bexpr, as Consul
// uses) selects.
func applyFilter(expr string, v any) (any, error) {
	if expr == "" {
		return v, nil
	}
	eval, err := bexpr.CreateEvaluator(expr)
	if err != nil {
		return nil, errors.New("Failed to create filter: " + err.Error())
	}
	switch list := v.(type) {
	case []*api.HealthCheck:
		return keepSelected(eval, list)
	case []*api.ServiceEntry:
		return keepSelected(eval, list)
	}
	return v, nil
}

// keepSelected is the elements of list that eval selects.
func keepSelected[T any](eval *bexpr.Evaluator, list []T) ([]T, error) {
	out := make([]T, 0, len(list))
	for _, x := range list {
		ok, err := eval.Evaluate(x)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, x)
		}
	}
	return out, nil
}

func (c *Catalog) serveAgentSelf(w http.ResponseWriter) {
	writeJSON(w, map[string]any{
		"Config": map[string]any{
			"Datacenter": Datacenter, "NodeName": c.nodeName, "NodeID": nodeID(c.nodeName),
			"Server": true, "Version": "1.20.0", "Revision": "nomadsim",
		},
		"Member": map[string]any{
			"Name": c.nodeName, "Addr": "127.0.0.1", "Port": 8301, "Status": 1,
			"Tags": map[string]string{"dc": Datacenter, "role": "consul", "build": "1.20.0"},
		},
		"Meta": map[string]string{"consul-network-segment": ""},
	})
}

// nodeID derives a stable UUID-shaped node ID from a node name.
func nodeID(name string) string {
	h := make([]byte, 16)
	for i := 0; i < len(name); i++ {
		h[i%16] = h[i%16]*31 + name[i]
	}
	s := fmt.Sprintf("%x", h)
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}
