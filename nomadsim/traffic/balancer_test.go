package traffic

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// catalog is a Nomad service table of one service, as /v1/service/<name> answers it, whose
// instances a test sets.
type catalog struct {
	srv *httptest.Server

	mu        sync.Mutex
	instances []string // host:port
}

func newCatalog(t *testing.T, instances ...string) *catalog {
	t.Helper()
	c := &catalog{instances: instances}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/service/web" {
			http.NotFound(w, r)
			return
		}
		c.mu.Lock()
		regs := make([]*api.ServiceRegistration, 0, len(c.instances))
		for _, inst := range c.instances {
			host, port, err := net.SplitHostPort(inst)
			if err != nil {
				t.Errorf("instance %q: %v", inst, err)
			}
			p, _ := strconv.Atoi(port)
			regs = append(regs, &api.ServiceRegistration{ServiceName: "web", Address: host, Port: p})
		}
		c.mu.Unlock()
		// The api client reads a read's index and leader from these headers.
		w.Header().Set("X-Nomad-Index", "1")
		w.Header().Set("X-Nomad-KnownLeader", "true")
		w.Header().Set("X-Nomad-LastContact", "0")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(regs)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *catalog) set(instances ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.instances = instances
}

// instance is a workload answering GET / with status.
func instance(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// refusing is an address where nothing listens any more: connections to it are refused.
func refusing(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// silent is a workload that accepts connections and never answers, until the client gives up.
func silent(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// startBalancer starts a balancer of the catalog's service, stopped at the test's end if
// the test has not stopped it.
func startBalancer(t *testing.T, cat *catalog) *Balancer {
	t.Helper()
	b := &Balancer{Service: "web", NomadAddr: cat.srv.URL, Every: 20 * time.Millisecond, Refresh: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}

// counts is the balancer's result so far, without stopping it.
func (b *Balancer) counts() Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.res
}

// waitCounts waits until the balancer's result so far satisfies cond.
func waitCounts(t *testing.T, b *Balancer, what string, cond func(Result) bool) {
	t.Helper()
	waitFor(t, what, func() bool { return cond(b.counts()) })
}

// onlyFailures checks that every request failed and each was counted as got says: the
// bucket that failures of one kind fall into holds all of them, the others none.
func onlyFailures(t *testing.T, r Result, kind string, got int) {
	t.Helper()
	if r.Requests == 0 || r.Failed != r.Requests || got != r.Failed {
		t.Errorf("want every request failed as %s: %v", kind, r)
	}
	if sum := r.Refused + r.TimedOut + r.Status + r.NoInstance + r.OtherErr; sum != r.Failed {
		t.Errorf("the kinds add up to %d, not the %d failed: %v", sum, r.Failed, r)
	}
	if r.FailedRatio() != 1 {
		t.Errorf("FailedRatio %v, want 1: %v", r.FailedRatio(), r)
	}
}

func TestBalancerCountsRefusedConnections(t *testing.T) {
	b := startBalancer(t, newCatalog(t, refusing(t)))
	waitCounts(t, b, "three refused requests", func(r Result) bool { return r.Refused >= 3 })
	r := b.Stop()
	onlyFailures(t, r, "refused", r.Refused)
}

func TestBalancerCountsTimedOutRequests(t *testing.T) {
	b := startBalancer(t, newCatalog(t, silent(t)))
	waitCounts(t, b, "a timed-out request", func(r Result) bool { return r.TimedOut >= 1 })
	r := b.Stop()
	onlyFailures(t, r, "timed out", r.TimedOut)
}

func TestBalancerCountsServerErrors(t *testing.T) {
	b := startBalancer(t, newCatalog(t, instance(t, http.StatusServiceUnavailable), instance(t, http.StatusInternalServerError)))
	waitCounts(t, b, "three 5xx answers", func(r Result) bool { return r.Status >= 3 })
	r := b.Stop()
	onlyFailures(t, r, "bad status", r.Status)
}

func TestBalancerCountsRequestsWithNoInstance(t *testing.T) {
	b := startBalancer(t, newCatalog(t))
	waitCounts(t, b, "three requests with no instance", func(r Result) bool { return r.NoInstance >= 3 })
	r := b.Stop()
	onlyFailures(t, r, "no instance", r.NoInstance)
	if r.MinInstances != 0 {
		t.Errorf("MinInstances %d, want 0", r.MinInstances)
	}
}

func TestBalancerCountsNoFailureWhileInstancesAnswer(t *testing.T) {
	b := startBalancer(t, newCatalog(t, instance(t, http.StatusOK), instance(t, http.StatusNoContent)))
	waitCounts(t, b, "ten requests", func(r Result) bool { return r.Requests >= 10 })
	if r := b.Stop(); r.Failed != 0 || r.FailedRatio() != 0 || r.MinInstances != 2 {
		t.Errorf("want ten requests, none failed, two instances: %v (MinInstances %d)", r, r.MinInstances)
	}
}

// Each failure is counted in the bucket of its kind as the catalog moves the traffic from
// one kind of instance to the next; the per-second counts add up to the totals.
func TestBalancerCountsEachKindInItsBucket(t *testing.T) {
	cat := newCatalog(t, instance(t, http.StatusOK))
	b := startBalancer(t, cat)
	waitCounts(t, b, "a request answered", func(r Result) bool { return r.Requests >= 1 && r.Failed == 0 })
	cat.set(refusing(t))
	waitCounts(t, b, "a refused request", func(r Result) bool { return r.Refused >= 1 })
	cat.set(instance(t, http.StatusBadGateway))
	waitCounts(t, b, "a 5xx answer", func(r Result) bool { return r.Status >= 1 })
	cat.set()
	waitCounts(t, b, "a request with no instance", func(r Result) bool { return r.NoInstance >= 1 })
	r := b.Stop()
	if r.OtherErr != 0 || r.TimedOut != 0 {
		t.Errorf("failures of a kind not sent: %v", r)
	}
	if sum := r.Refused + r.Status + r.NoInstance; sum != r.Failed || r.Failed >= r.Requests {
		t.Errorf("the kinds add up to %d of %d failed, of %d sent: %v", sum, r.Failed, r.Requests, r)
	}
	var sent, failed int
	for i := range r.RequestsPerSecond {
		sent += r.RequestsPerSecond[i]
		failed += r.FailedPerSecond[i]
	}
	if sent != r.Requests || failed != r.Failed {
		t.Errorf("per second: %d sent, %d failed; totals %v", sent, failed, r)
	}
	if r.MinInstances != 0 {
		t.Errorf("MinInstances %d, want 0 (the catalog emptied)", r.MinInstances)
	}
}

// Reset drops what was counted before it, answers still to come included.
func TestBalancerResetStartsTheCountsOver(t *testing.T) {
	cat := newCatalog(t, refusing(t))
	b := startBalancer(t, cat)
	waitCounts(t, b, "a refused request", func(r Result) bool { return r.Refused >= 1 })
	answering := instance(t, http.StatusOK)
	cat.set(answering)
	waitCounts(t, b, "the answering instance listed alone", func(Result) bool {
		list := b.Instances()
		return len(list) == 1 && list[0] == answering && b.Answering(1)
	})
	b.Reset()
	waitCounts(t, b, "a request after the reset", func(r Result) bool { return r.Requests >= 3 })
	if r := b.Stop(); r.Failed != 0 || r.Refused != 0 {
		t.Errorf("failures from before the reset still counted: %v", r)
	}
}

// Read from Consul's health API, the balancer sends to the passing instances it lists, at
// the service's address or else its node's, and counts their failures the same way.
func TestBalancerReadsConsulsPassingInstances(t *testing.T) {
	answering, refused := instance(t, http.StatusOK), refusing(t)
	consul := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/health/service/web" || r.URL.Query().Get("passing") == "" {
			t.Errorf("unexpected catalog read %s", r.URL)
			http.NotFound(w, r)
			return
		}
		var entries []map[string]any
		for n, addr := range []string{answering, refused} {
			host, port, _ := net.SplitHostPort(addr)
			p, _ := strconv.Atoi(port)
			svc := map[string]any{"Service": "web", "Port": p}
			if n == 0 {
				svc["Address"] = host // the other is at its node's address
			}
			entries = append(entries, map[string]any{"Node": map[string]any{"Address": host}, "Service": svc})
		}
		w.Header().Set("X-Consul-Index", "1")
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(entries)
	}))
	t.Cleanup(consul.Close)
	b := &Balancer{Service: "web", ConsulAddr: consul.Listener.Addr().String(), Every: 20 * time.Millisecond, Refresh: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.Instances(); len(got) != 2 || !slices.Contains(got, answering) || !slices.Contains(got, refused) {
		t.Fatalf("instances %v, want %s and %s", got, answering, refused)
	}
	waitCounts(t, b, "answered and refused requests", func(r Result) bool { return r.Refused >= 2 && r.Requests-r.Failed >= 2 })
	r := b.Stop()
	if r.Failed != r.Refused || r.TimedOut+r.Status+r.NoInstance+r.OtherErr != 0 || r.Failed >= r.Requests {
		t.Errorf("want the refused instance's requests alone failed, as refused: %v", r)
	}
}

// TestBalancerThrottleHoldsAChangeBack: as Traefik's providersThrottleDuration, a list read
// within Throttle of the last change is held back (however many refreshes read it), and
// applied once the throttle ends.
func TestBalancerThrottleHoldsAChangeBack(t *testing.T) {
	a, b := instance(t, http.StatusOK), instance(t, http.StatusOK)
	cat := newCatalog(t, a)
	for _, tc := range []struct {
		name     string
		throttle time.Duration
	}{{"held for the hour", time.Hour}, {"applied once it ends", 300 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			cat.set(a)
			bal := &Balancer{Service: "web", NomadAddr: cat.srv.URL, Every: 20 * time.Millisecond, Refresh: 10 * time.Millisecond, Throttle: tc.throttle}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := bal.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer bal.Stop()
			cat.set(a, b)
			before := bal.counts().Refreshes
			waitCounts(t, bal, "five refreshes after the change", func(r Result) bool { return r.Refreshes >= before+5 })
			if tc.throttle == time.Hour {
				if got := bal.Instances(); !slices.Equal(got, []string{a}) {
					t.Errorf("instances %v within the throttle, want the list before the change", got)
				}
				return
			}
			want := []string{a, b}
			slices.Sort(want)
			deadline := time.Now().Add(30 * time.Second)
			for !slices.Equal(bal.Instances(), want) {
				if time.Now().After(deadline) {
					t.Fatalf("instances %v, want %v once the throttle ended", bal.Instances(), want)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestBalancerTraefikAPI: the balancer's list, as Traefik's API lists a service's servers.
func TestBalancerTraefikAPI(t *testing.T) {
	a := instance(t, http.StatusOK)
	bal := startBalancer(t, newCatalog(t, a))
	defer bal.Stop()
	srv := httptest.NewServer(bal.TraefikAPI())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/http/services")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var services []struct {
		Name         string `json:"name"`
		LoadBalancer struct {
			Servers []struct {
				URL string `json:"url"`
			} `json:"servers"`
		} `json:"loadBalancer"`
		ServerStatus map[string]string `json:"serverStatus"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&services); err != nil {
		t.Fatal(err)
	}
	if len(services) != 1 || services[0].Name != "web@consulcatalog" || len(services[0].LoadBalancer.Servers) != 1 ||
		services[0].LoadBalancer.Servers[0].URL != "http://"+a || services[0].ServerStatus["http://"+a] != "UP" {
		t.Errorf("services %+v, want web's one server %s", services, a)
	}
}

// TestBalancerMetricsCountsRequestsPerServer: the balancer's /metrics, parsed as
// Prometheus parses its text format, holds a counter of the requests sent to each server;
// once the catalog drops a server, its series stays and stops growing while the kept
// server's grows.
func TestBalancerMetricsCountsRequestsPerServer(t *testing.T) {
	kept, dropped := instance(t, http.StatusOK), instance(t, http.StatusOK)
	cat := newCatalog(t, kept, dropped)
	bal := startBalancer(t, cat)
	defer bal.Stop()
	srv := httptest.NewServer(bal.Metrics())
	defer srv.Close()
	waitCounts(t, bal, "ten requests", func(r Result) bool { return r.Requests >= 10 })
	cat.set(kept)
	waitFor(t, "the balancer to drop a server", func() bool { return slices.Equal(bal.Instances(), []string{kept}) })
	before := scrape(t, srv.URL)
	waitCounts(t, bal, "ten more requests", func(r Result) bool { return r.Requests >= 25 })
	after := scrape(t, srv.URL)
	if before[dropped] == 0 || after[dropped] != before[dropped] {
		t.Errorf("the dropped server's count went from %v to %v, want it above 0 and unchanged", before[dropped], after[dropped])
	}
	if after[kept] <= before[kept] || len(after) != 2 {
		t.Errorf("the kept server's count went from %v to %v, want it grown; series %v", before[kept], after[kept], after)
	}
	if resp, err := http.Get(srv.URL + "/other"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
}

// scrape reads the balancer's /metrics as Prometheus does: the count of each server of
// service web.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the metrics do not parse: %v", err)
	}
	f := families["balancer_server_requests_total"]
	if f == nil || f.GetType() != dto.MetricType_COUNTER {
		t.Fatalf("no counter balancer_server_requests_total in %v", families)
	}
	counts := map[string]float64{}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["service"] != "web" {
			t.Errorf("series of service %q, want web", labels["service"])
		}
		counts[labels["server"]] = m.GetCounter().GetValue()
	}
	return counts
}

// waitFor waits until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// Generous: the condition decides, the deadline only ends a test that hangs.
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
