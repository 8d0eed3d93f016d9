package consul

import (
	"net/http"
	"net/http/httptest"
	"sort"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"
)

func newConsul(t *testing.T) (*Catalog, *api.Client) {
	t.Helper()
	c := NewCatalog("node-1")
	cl, _ := serveHTTP(t, c)
	return c, cl
}

// serveHTTP serves the catalog's HTTP API for the test and returns a client of it and its
// URL.
func serveHTTP(t *testing.T, c *Catalog) (*api.Client, string) {
	t.Helper()
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	cfg := api.DefaultConfig()
	cfg.Address = srv.Listener.Addr().String()
	cl, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl, srv.URL
}

func register(c *Catalog) {
	c.Register(Instance{
		ID: "_nomad-task-a1-web-web-http", Service: "web", Tags: []string{"v1"}, Address: "10.0.0.1", Port: 8080,
		Checks: []Check{{Name: "alive", Status: StatusPassing, Output: "HTTP GET: 200 OK"}},
	})
	c.Register(Instance{
		ID: "_nomad-task-a2-web-web-http", Service: "web", Tags: []string{"v2"}, Address: "10.0.0.2", Port: 8080, Node: "node-2",
		Checks: []Check{{ID: "c2", Name: "alive"}},
	})
	c.Register(Instance{ID: "_nomad-task-a3-db-db-tcp", Service: "db", Checks: []Check{{ID: "c3", Status: StatusWarning}}})
}

func TestHealthChecks(t *testing.T) {
	c, cl := newConsul(t)
	register(c)
	checks, qm, err := cl.Health().Checks("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(checks) != 2 || qm.LastIndex == 0 || !qm.KnownLeader {
		t.Fatalf("checks %+v meta %+v", checks, qm)
	}
	byService := map[string]*api.HealthCheck{}
	for _, ch := range checks {
		byService[ch.ServiceID] = ch
	}
	a1 := byService["_nomad-task-a1-web-web-http"]
	if a1 == nil || a1.CheckID != "service:_nomad-task-a1-web-web-http" || a1.Status != "passing" || a1.ServiceName != "web" || a1.Node != "node-1" {
		t.Fatalf("a1 check: %+v", a1)
	}
	// A check registered without a status starts critical, as in Consul.
	if a2 := byService["_nomad-task-a2-web-web-http"]; a2 == nil || a2.Status != "critical" || a2.Node != "node-2" {
		t.Fatalf("a2 check: %+v", a2)
	}
	if none, _, err := cl.Health().Checks("nosuch", nil); err != nil || len(none) != 0 {
		t.Fatalf("unknown service: %v %v", none, err)
	}
}

func TestHealthService(t *testing.T) {
	c, cl := newConsul(t)
	register(c)
	tests := []struct {
		name    string
		tag     string
		passing bool
		want    []string
	}{
		{"all", "", false, []string{"_nomad-task-a1-web-web-http", "_nomad-task-a2-web-web-http"}},
		{"passing only", "", true, []string{"_nomad-task-a1-web-web-http"}},
		{"by tag", "v2", false, []string{"_nomad-task-a2-web-web-http"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			entries, _, err := cl.Health().Service("web", tc.tag, tc.passing, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Service.ID)
				// Each entry carries the node's serf check and its own checks.
				if len(e.Checks) != 2 || e.Checks[0].CheckID != "serfHealth" || e.Node.Node == "" || e.Service.Port != 8080 {
					t.Fatalf("entry: %+v %+v", e.Node, e.Checks)
				}
			}
			sort.Strings(got)
			if len(got) != len(tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// The catalog lists every instance, its checks aside.
	for _, tag := range []string{"", "v2"} {
		svcs, _, err := cl.Catalog().Service("web", tag, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := 2
		if tag != "" {
			want = 1
		}
		if len(svcs) != want || svcs[0].ServicePort != 8080 || svcs[0].ServiceAddress == "" || svcs[0].Node == "" {
			t.Fatalf("catalog service web tag %q: %+v", tag, svcs)
		}
	}
	entries, _, err := cl.Health().Service("web", "", false, &api.QueryOptions{Filter: `Service.Address == "10.0.0.2"`})
	if err != nil || len(entries) != 1 || entries[0].Service.ID != "_nomad-task-a2-web-web-http" {
		t.Fatalf("filter: %+v %v", entries, err)
	}
	warn, _, err := cl.Health().State("warning", nil)
	if err != nil || len(warn) != 1 || warn[0].CheckID != "c3" {
		t.Fatalf("state warning: %+v %v", warn, err)
	}
	leader, err := cl.Status().Leader()
	if err != nil || leader == "" {
		t.Fatalf("leader: %q %v", leader, err)
	}
	self, err := cl.Agent().Self()
	if err != nil || self["Config"]["NodeName"] != "node-1" {
		t.Fatalf("agent self: %v %v", self, err)
	}
}

func TestBlockingQueries(t *testing.T) {
	c, cl := newConsul(t)
	register(c)
	_, qm, err := cl.Health().Checks("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	start := qm.LastIndex

	type result struct {
		checks api.HealthChecks
		qm     *api.QueryMeta
		err    error
	}
	done := make(chan result, 1)
	go func() {
		checks, qm, err := cl.Health().Checks("web", &api.QueryOptions{WaitIndex: start, WaitTime: time.Minute})
		done <- result{checks, qm, err}
	}()
	// A change to another service wakes the query without answering it.
	c.SetCheck("c3", StatusPassing, "ok")
	// Setting the same status again is no change.
	c.SetCheck("service:_nomad-task-a1-web-web-http", StatusPassing, "HTTP GET: 200 OK")
	select {
	case r := <-done:
		t.Fatalf("answered without a change to the service: %+v", r.qm)
	case <-time.After(20 * time.Millisecond):
	}
	c.SetCheck("c2", StatusPassing, "now up")
	r := <-done
	if r.err != nil || r.qm.LastIndex <= start {
		t.Fatalf("blocking: %+v %v", r.qm, r.err)
	}
	for _, ch := range r.checks {
		if ch.CheckID == "c2" && (ch.Status != "passing" || ch.Output != "now up" || ch.ModifyIndex != r.qm.LastIndex) {
			t.Fatalf("c2 after the change: %+v", ch)
		}
	}

	// Without a change the query times out with the same index.
	_, qm, err = cl.Health().Checks("web", &api.QueryOptions{WaitIndex: r.qm.LastIndex, WaitTime: 30 * time.Millisecond})
	if err != nil || qm.LastIndex != r.qm.LastIndex {
		t.Fatalf("timeout: %+v %v", qm, err)
	}

	// Deregistering answers a query on the service.
	go func() {
		entries, qm, err := cl.Health().Service("web", "", false, &api.QueryOptions{WaitIndex: r.qm.LastIndex, WaitTime: time.Minute})
		done <- result{qm: qm, err: err, checks: make(api.HealthChecks, len(entries))}
	}()
	c.Deregister("_nomad-task-a2-web-web-http")
	if r := <-done; r.err != nil || len(r.checks) != 1 {
		t.Fatalf("after deregister: %d entries, %v", len(r.checks), r.err)
	}
}

func TestBadParameters(t *testing.T) {
	c, _ := newConsul(t)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	tests := []struct {
		path string
		want int
	}{
		{"/v1/health/service/web?passing=maybe", http.StatusBadRequest},
		{"/v1/health/checks/web?index=x", http.StatusBadRequest},
		{"/v1/health/checks/web?wait=soon", http.StatusBadRequest},
		{"/v1/health/checks/", http.StatusBadRequest},
	}
	for _, tc := range tests {
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
}
