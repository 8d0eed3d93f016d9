package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
	"github.com/nomad-restart/nomad-restart/nomadsim/traffic"
)

// traefikScale runs the clusters of TestDrainBehindTraefiksDefaults 5 times faster than
// real time: the drains are long (17 s of Nomad's time an allocation by default), and
// no case runs -health none, the one that needs trafficScale's slower pace.
const traefikScale = 5

// servedOnConsul starts nomadsim at scale and registers the web service of 3 allocations
// (a group service in Consul, no shutdown_delay, instances serving 3 s after a start,
// tags as given), and returns the cluster and the command line's environment for it.
func servedOnConsul(t *testing.T, scale float64, tags ...string) (*nomadsim.Cluster, cliEnv) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{TimeScale: scale, ServeInstances: true})
	job := simtest.ServedJob("web", 3, "consul", 3*time.Second, 0)
	job.TaskGroups[0].Services[0].Tags = tags
	minHealthy, deadline := 2*time.Second, time.Minute
	job.TaskGroups[0].Update.MinHealthyTime, job.TaskGroups[0].Update.HealthyDeadline = &minHealthy, &deadline
	register(t, c, job)
	e := newCLIEnv(t, c)
	e.consul = c.ConsulAddr()
	return c, e
}

// servedBehindTraefik is the web service of 3 allocations (a group service, no
// shutdown_delay) tagged for Traefik, behind a balancer that reads Consul's passing
// instances with Traefik's defaults (a refresh every 15 s, reloads 2 s apart at most) and
// serves Traefik's API. It returns the command line's environment, the balancer, and the
// URL of its API.
func servedBehindTraefik(t *testing.T, ctx context.Context) (cliEnv, *simtest.Balancer, string) {
	t.Helper()
	c, e := servedOnConsul(t, traefikScale, "traefik.enable=true", "traefik.http.routers.web.rule=Host(`web`)")
	b := simtest.ConsulBalancer(c, "web")
	b.Refresh, b.Throttle = 15*time.Second, 2*time.Second
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(b.TraefikAPI())
	t.Cleanup(api.Close)
	b.WaitAnswering(t, 3, 60*time.Second)
	return e, b, api.URL
}

// TestDrainBehindTraefiksDefaults: a service whose tags are Traefik's, behind a balancer
// that reads Consul as Traefik does by default (every 15 s, then a 2 s throttle), restarted
// in place one allocation at a time. The plan warns that -drain 2s is shorter than
// Traefik's refresh and names the fixes; with default flags the drain lasts Traefik's 17 s
// and no request fails; with -drain-until on Traefik's API the drain ends as soon as the
// balancer dropped the instance (the record says so) and no request fails either.
func TestDrainBehindTraefiksDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		args func(api string) []string
	}{
		{"default flags", func(string) []string { return nil }},
		{"-drain-until traefik", func(api string) []string { return []string{"-drain-until=traefik=" + api} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			e, b, api := servedBehindTraefik(t, ctx)
			if tc.args(api) == nil {
				code, out, errOut := e.run(ctx, "run", "-dry-run", "-drain=2s", "web")
				if code != 0 || !strings.Contains(out, "-drain 2s is shorter than the refresh") || !strings.Contains(out, "Traefik (Consul Catalog provider's refreshInterval 15s + providersThrottleDuration 2s)") ||
					!strings.Contains(out, "-drain-until traefik=http://HOST:8080") {
					t.Errorf("-drain 2s -dry-run: exit %d, want the warning naming Traefik's refresh and the fixes\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
				}
			}
			r, out := restartCounted(t, ctx, e, b, 3, tc.args(api))
			if r.Failed != 0 {
				t.Errorf("%s failed, want none; failed per second %v\nstdout:\n%s", r, r.FailedPerSecond, out)
			}
			recs := e.localRecords(t, ctx, "web")
			if len(recs) != 1 {
				t.Fatalf("records %v", recs)
			}
			rec := recs[0]
			if rec.Spec.Drain != 17*time.Second || !strings.Contains(rec.Spec.DrainBalancer, "Traefik") {
				t.Errorf("the record's drain %s by %q, want Traefik's 17s", rec.Spec.Drain, rec.Spec.DrainBalancer)
			}
			drained := 0
			for _, ev := range rec.Events {
				if ev.Type == restart.EventAllocDrain && strings.HasPrefix(ev.Message, "Drained: Traefik at "+api+" no longer sent to ") {
					drained++
				}
			}
			if want := map[bool]int{true: 0, false: 3}[tc.args(api) == nil]; drained != want {
				t.Errorf("%d events say the evidence ended a drain, want %d: %+v", drained, want, rec.Events)
			}
			if slices.ContainsFunc(rec.Events, func(ev restart.Event) bool { return ev.Type == restart.EventWarning }) {
				t.Errorf("warnings in the record: %+v", rec.Events)
			}
		})
	}
}

// TestDrainBehindHAProxyOnConsulDNS: a real HAProxy reads the service from the simulated
// Consul's DNS interface as HashiCorp's tutorial configures it (server-template on the
// SRV name, a resolvers section on Consul's DNS, hold valid 5s, health checks), and its
// clients send steady traffic through it while the service (no shutdown_delay) is
// restarted in place with -drain-until on HAProxy's statistics: each drain ends once
// HAProxy put the instance's server out of rotation (MAINT, its name no longer
// resolving), the record says so, and no request fails. (With -drain 0 the same run lost
// 204 of 1,848 requests, timed out on stopped instances.)
func TestDrainBehindHAProxyOnConsulDNS(t *testing.T) {
	ctx := testCtx(t)
	c, e := servedOnConsul(t, trafficScale)
	h := simtest.StartHAProxy(t,
		"  balance roundrobin\n  server-template web 3 _web._tcp.service.consul resolvers consul resolve-opts allow-dup-ip resolve-prefer ipv4 check inter 1s",
		"resolvers consul\n  nameserver consul "+c.ConsulDNSAddr()+"\n  accepted_payload_size 8192\n  hold valid 5s")
	b := &simtest.Balancer{Balancer: &traffic.Balancer{Service: "web", Via: h.Frontend, Scale: c.TimeScale()}}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stats := haproxyServersUp(h)
	simtest.WaitWithin(t, 60*time.Second, "HAProxy routing to the 3 instances", func() bool { return stats() == 3 })
	r, out := restartCounted(t, ctx, e, b, 1, []string{"-drain-until=haproxy=" + h.Stats})
	if r.Failed != 0 {
		t.Errorf("%s failed through HAProxy, want none; failed per second %v\nstdout:\n%s", r, r.FailedPerSecond, out)
	}
	recs := e.localRecords(t, ctx, "web")
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	drained := 0
	for _, ev := range recs[0].Events {
		if ev.Type == restart.EventAllocDrain && strings.HasPrefix(ev.Message, "Drained: HAProxy at "+h.Stats+" no longer sent to ") {
			drained++
		}
	}
	if drained != 3 || slices.ContainsFunc(recs[0].Events, func(ev restart.Event) bool { return ev.Type == restart.EventWarning }) {
		t.Errorf("%d drains ended on HAProxy's word, want 3, and no warning: %+v", drained, recs[0].Events)
	}
}

// haproxyServersUp counts, from HAProxy's CSV statistics, the servers of backend web in
// rotation (UP); -1 when the statistics cannot be read.
func haproxyServersUp(h *simtest.HAProxy) func() int {
	return func() int {
		resp, err := http.Get(h.Stats + ";csv")
		if err != nil {
			return -1
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		n := 0
		for _, line := range strings.Split(string(body), "\n") {
			f := strings.Split(line, ",")
			if len(f) > 17 && f[0] == "web" && f[1] != "BACKEND" && strings.HasPrefix(f[17], "UP") {
				n++
			}
		}
		return n
	}
}

// TestDrainUntilUnreachableBalancerRefused: a balancer that does not answer when the
// restart is planned is refused in one line naming it and the fix, exit 1, before
// anything restarts: no record, no allocation restarted.
func TestDrainUntilUnreachableBalancerRefused(t *testing.T) {
	c, e := startSimEnv(t, nomadsim.Options{}, checkedJob("bare", 2, "pass", 0, time.Minute))
	ctx := testCtx(t)
	e.consul = c.ConsulAddr()
	closed := "http://" + simtest.ClosedAddr(t)
	code, out, errOut := e.run(ctx, "run", "-yes", "-state=local", "-drain-until=traefik="+closed, "bare")
	line := strings.TrimSpace(errOut)
	if code != 1 || strings.Contains(line, "\n") || !strings.Contains(line, "-drain-until traefik="+closed) ||
		!strings.Contains(line, "fix the address or drop -drain-until (nothing was restarted)") {
		t.Errorf("exit %d, want 1 and one line naming the balancer and the fix\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if recs := e.localRecords(t, ctx, "bare"); len(recs) != 0 {
		t.Errorf("a refused restart left records: %v", recs)
	}
	simtest.CheckOnce(t, simtest.Client(t, c), "default", "bare", nil, false, 10*time.Second) // none restarted
}

// drainQuery is the -drain-until prometheus: evidence of TestDrainUntilPrometheusQuery:
// the balancer sent the instance no request over the last 3 s of scrapes.
const drainQuery = `sum(rate(balancer_server_requests_total{service="{{service}}",server="{{address}}"}[3s])) == 0`

// TestDrainUntilPrometheusQuery: a real Prometheus (Debian's package) scrapes, every
// second, the requests the balancer (reading Consul's passing instances) sends to each
// instance, and the service (no shutdown_delay) is restarted in place one allocation at a
// time with -drain-until prometheus: on the instance's request rate: each drain ends on
// the query's evidence (the record says so, no warning of the drain's bound) and no request
// fails.
func TestDrainUntilPrometheusQuery(t *testing.T) {
	ctx := testCtx(t)
	c, e := servedOnConsul(t, trafficScale)
	b := simtest.ConsulBalancer(c, "web")
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	metrics := httptest.NewServer(b.Metrics())
	t.Cleanup(metrics.Close)
	prom := simtest.StartPrometheus(t, strings.TrimPrefix(metrics.URL, "http://"))
	b.WaitAnswering(t, 3, 30*time.Second)
	awaitScraped(t, ctx, prom, `count(rate(balancer_server_requests_total{service="web"}[3s]) > 0) == 3`)
	// The bound (90 s of Nomad's time, 30 s real) only ends a drain whose evidence never
	// comes: Prometheus sees a rate of 0 about 4 s of real time after the balancer's last
	// request to the instance.
	r, out := restartCounted(t, ctx, e, b, 3, []string{"-prometheus-address=" + prom.URL(), "-drain-until=prometheus:" + drainQuery, "-drain=90s"})
	if r.Failed != 0 {
		t.Errorf("%s failed, want none; failed per second %v\nstdout:\n%s", r, r.FailedPerSecond, out)
	}
	recs := e.localRecords(t, ctx, "web")
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	var drained []string
	for _, ev := range recs[0].Events {
		if ev.Type == restart.EventAllocDrain && strings.HasPrefix(ev.Message, "Drained: the Prometheus query "+strconv.Quote(drainQuery)+" no longer sent to ") {
			drained = append(drained, ev.Message)
		}
	}
	t.Logf("drains: %q", drained)
	if len(drained) != 3 || slices.ContainsFunc(recs[0].Events, func(ev restart.Event) bool { return ev.Type == restart.EventWarning }) {
		t.Errorf("%d drains ended on the query's evidence, want 3, and no warning: %+v", len(drained), recs[0].Events)
	}
}
