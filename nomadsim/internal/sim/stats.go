package sim

import (
	"sort"
)

// EndpointStats counts the requests one route received with one method.
type EndpointStats struct {
	Method        string // GET, PUT, POST, DELETE
	Route         string // Nomad's route with :params, like "/v1/job/:id/allocations"
	Requests      int64
	ResponseBytes int64
}

// Stats is the cluster's request accounting since start or the last ResetStats.
type Stats struct {
	// Endpoints by "METHOD /route" (for example "GET /v1/job/:id/allocations").
	Endpoints map[string]EndpointStats
	// Requests and ResponseBytes are the totals over every endpoint.
	Requests      int64
	ResponseBytes int64
	// Mutations counts PUT, POST and DELETE requests that changed or tried to change
	// state (read-only POSTs such as job parse and plan are not counted).
	Mutations int64
}

// Get returns the counters of one endpoint, like s.Get("GET", "/v1/job/:id/allocations").
func (s Stats) Get(method, route string) EndpointStats {
	return s.Endpoints[method+" "+route]
}

// Keys lists the endpoints that received requests, sorted.
func (s Stats) Keys() []string {
	out := make([]string, 0, len(s.Endpoints))
	for k := range s.Endpoints {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

type statKey struct{ method, route string }

// Stats returns a snapshot of the request accounting.
func (c *Cluster) Stats() Stats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	s := Stats{Endpoints: make(map[string]EndpointStats, len(c.stats)), Mutations: c.mutations}
	for k, v := range c.stats {
		s.Endpoints[k.method+" "+k.route] = *v
		s.Requests += v.Requests
		s.ResponseBytes += v.ResponseBytes
	}
	return s
}

// ResetStats zeroes the request accounting.
func (c *Cluster) ResetStats() {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	c.stats = map[statKey]*EndpointStats{}
	c.mutations = 0
}

func (c *Cluster) Record(method, route string, bytes int64, mutation bool) {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	k := statKey{method, route}
	s := c.stats[k]
	if s == nil {
		s = &EndpointStats{Method: method, Route: route}
		c.stats[k] = s
	}
	s.Requests++
	s.ResponseBytes += bytes
	if mutation {
		c.mutations++
	}
}
