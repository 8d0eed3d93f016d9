package balancer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

func routes(t *testing.T, p Probe, address string) bool {
	t.Helper()
	r, err := p.Routes(context.Background(), restart.DrainTarget{Address: address})
	if err != nil {
		t.Fatalf("Routes(%s): %v", address, err)
	}
	return r
}

func dial(t *testing.T, d Dialer, flag string) Probe {
	t.Helper()
	ev, err := restart.ParseDrainUntil(flag)
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.Dial(ev)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(context.Background()); err != nil {
		t.Fatalf("Check(%s): %v", flag, err)
	}
	return p
}

// TestHAProxyOutOfRotation runs a real HAProxy and takes its servers out of rotation
// through its runtime API, as its own drain or a DNS resolution does: its statistics, from
// the stats page and from the runtime API alike, say the server no longer gets requests
// once it is in drain or maintenance, and again once it is ready.
func TestHAProxyOutOfRotation(t *testing.T) {
	h := simtest.StartHAProxy(t, "  server s1 127.0.0.1:25611\n  server s2 127.0.0.1:25612", "")
	probes := map[string]Probe{
		"stats page":  dial(t, Dialer{}, "haproxy="+h.Stats),
		"runtime API": dial(t, Dialer{}, "haproxy=unix:"+h.Socket),
	}
	for _, step := range []struct {
		command string
		s1, s2  bool
	}{
		{"", true, true},
		{"set server web/s1 state drain", false, true},
		{"set server web/s1 state maint", false, true},
		{"set server web/s1 state ready", true, true},
		{"disable server web/s2", true, false},
	} {
		if step.command != "" {
			h.Command(t, step.command)
		}
		for name, p := range probes {
			if got := routes(t, p, "127.0.0.1:25611"); got != step.s1 {
				t.Errorf("after %q, the %s says s1 routed %v, want %v", step.command, name, got, step.s1)
			}
			if got := routes(t, p, "127.0.0.1:25612"); got != step.s2 {
				t.Errorf("after %q, the %s says s2 routed %v, want %v", step.command, name, got, step.s2)
			}
			if routes(t, p, "127.0.0.1:1") {
				t.Errorf("the %s routes to an address it does not list", name)
			}
		}
	}
}

// TestHAProxyWithoutAddresses: a stats page without "stats show-legends" lists no server
// addresses, and the probe says how to fix it rather than taking every instance as gone.
func TestHAProxyWithoutAddresses(t *testing.T) {
	csv := "# pxname,svname,qcur,status,addr,\nweb,s1,0,UP,,\nweb,BACKEND,0,UP,,\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, ";csv") {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(csv))
	}))
	defer srv.Close()
	p, err := Dialer{}.Dial(restart.DrainEvidence{Kind: restart.EvidenceHAProxy, Address: srv.URL + "/stats"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "stats show-legends") {
		t.Errorf("Check = %v, want it to name stats show-legends", err)
	}
}

// traefikServices is /api/http/services as Traefik answers it (pkg/api/handler_http.go:
// serviceRepresentation, the runtime.ServiceInfo's loadBalancer with its servers, and
// serverStatus under a health check).
func traefikServices(servers map[string]string) []byte {
	type server struct {
		URL string `json:"url"`
	}
	var list []server
	for u := range servers {
		list = append(list, server{URL: u})
	}
	b, _ := json.Marshal([]any{
		map[string]any{"loadBalancer": map[string]any{"servers": list, "passHostHeader": true}, "serverStatus": servers,
			"status": "enabled", "usedBy": []string{"web@consulcatalog"}, "name": "web@consulcatalog", "provider": "consulcatalog", "type": "loadbalancer"},
		map[string]any{"status": "enabled", "name": "api@internal", "provider": "internal"},
	})
	return b
}

func TestTraefikServices(t *testing.T) {
	servers := map[string]string{"http://10.0.0.1:8080": "UP", "http://10.0.0.2:8080": "DOWN"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/http/services" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(traefikServices(servers))
	}))
	defer srv.Close()
	p := dial(t, Dialer{}, "traefik="+srv.URL)
	for addr, want := range map[string]bool{"10.0.0.1:8080": true, "10.0.0.2:8080": false, "10.0.0.3:8080": false} {
		if got := routes(t, p, addr); got != want {
			t.Errorf("Traefik routes to %s: %v, want %v", addr, got, want)
		}
	}
	wrong, err := Dialer{}.Dial(restart.DrainEvidence{Kind: restart.EvidenceTraefik, Address: srv.URL + "/nothing"})
	if err != nil {
		t.Fatal(err)
	}
	if err := wrong.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("Check of a wrong address = %v, want Traefik's 404 named", err)
	}
}

func TestTraefikUnreachable(t *testing.T) {
	addr := simtest.ClosedAddr(t)
	p, err := Dialer{Timeout: time.Second}.Dial(restart.DrainEvidence{Kind: restart.EvidenceTraefik, Address: "http://" + addr})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Check(context.Background()); err == nil || !strings.Contains(err.Error(), addr) {
		t.Errorf("Check of a closed address = %v, want an error naming it", err)
	}
}

// TestEnvoyClusters reads /clusters as Envoy's admin writes it: a host Consul reports
// unhealthy stays listed with /failed_eds_health.
func TestEnvoyClusters(t *testing.T) {
	body := strings.Join([]string{
		"web.default.dc1.internal.x.consul::observability_name::web.default.dc1.internal.x.consul",
		"web.default.dc1.internal.x.consul::10.0.0.1:8080::cx_active::2",
		"web.default.dc1.internal.x.consul::10.0.0.1:8080::health_flags::healthy",
		"web.default.dc1.internal.x.consul::10.0.0.2:8080::cx_active::0",
		"web.default.dc1.internal.x.consul::10.0.0.2:8080::health_flags::/failed_eds_health",
	}, "\n")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/clusters" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	p := dial(t, Dialer{}, "envoy="+srv.URL)
	for addr, want := range map[string]bool{"10.0.0.1:8080": true, "10.0.0.2:8080": false, "10.0.0.3:8080": false} {
		if got := routes(t, p, addr); got != want {
			t.Errorf("Envoy routes to %s: %v, want %v", addr, got, want)
		}
	}
}

type fakeQuerier struct{ asked []string }

func (q *fakeQuerier) Query(_ context.Context, promql string, _ time.Time) (gate.Sample, error) {
	q.asked = append(q.asked, promql)
	return gate.Sample{Empty: !strings.Contains(promql, "10.0.0.2")}, nil
}

type fakePrometheus struct{ q *fakeQuerier }

func (f fakePrometheus) Address() string                   { return "http://prometheus:9090" }
func (f fakePrometheus) Dial(string) (gate.Querier, error) { return f.q, nil }

// TestPrometheusEvidence: the query is asked with the instance's address; it holds (the
// balancer dropped the instance) when it returns a series.
func TestPrometheusEvidence(t *testing.T) {
	q := &fakeQuerier{}
	p := dial(t, Dialer{Prometheus: fakePrometheus{q}}, `prometheus:sum(rate(req{instance="{{address}}"}[15s])) == 0`)
	if routes(t, p, "10.0.0.2:80") || !routes(t, p, "10.0.0.1:80") {
		t.Errorf("asked %q", q.asked)
	}
	if last := q.asked[len(q.asked)-1]; last != `sum(rate(req{instance="10.0.0.1:80"}[15s])) == 0` {
		t.Errorf("asked %q", last)
	}
	if _, err := (Dialer{}).Dial(restart.DrainEvidence{Kind: restart.EvidencePrometheus, Query: "up"}); err == nil || !strings.Contains(err.Error(), "-prometheus-address") {
		t.Errorf("Dial without Prometheus = %v", err)
	}
}
