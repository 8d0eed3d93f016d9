package cli

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// serviceMetrics is the test service's /metrics as Prometheus scrapes it: each running
// allocation of job on the simulated cluster answered 10 requests since the last scrape,
// http_requests_total{job, alloc_id, code}. Once an allocation's task restarted (it then
// runs the "new version"), badShare of them answered 500 when bad is set.
type serviceMetrics struct {
	client *api.Client
	job    string
	bad    atomic.Bool
}

func (s *serviceMetrics) start(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "http_requests_total", Help: "Requests by allocation and status code."}, []string{"job", "alloc_id", "code"})
	reg.MustRegister(requests)
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		allocs, _, err := s.client.Jobs().Allocations(s.job, false, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for _, a := range allocs {
			if a.ClientStatus != api.AllocClientStatusRunning {
				continue
			}
			errs := 0.0
			if ts := a.TaskStates["main"]; ts != nil && ts.Restarts > 0 && s.bad.Load() {
				errs = 3 // 30% of the new version's answers fail
			}
			requests.WithLabelValues(s.job, a.ID, "200").Add(10 - errs)
			requests.WithLabelValues(s.job, a.ID, "500").Add(errs)
		}
		metrics.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// batchErrors is the error ratio of the batch's restarted allocations, the gate.
const batchErrors = `errors: sum(rate(http_requests_total{job="{{job}}",alloc_id=~"{{allocs}}",code="500"}[5s])) / sum(rate(http_requests_total{job="{{job}}",alloc_id=~"{{allocs}}"}[5s])) < 0.02`

// TestRunGatesOnRealPrometheus restarts a 4-instance service on the simulated cluster with
// an error-rate gate measured by a real Prometheus scraping it: when the new version
// answers 30% errors, the restart stops after the first batch and the other 3 allocations
// are never touched, the record holding the failing measurements; when it answers well,
// every batch passes. -dry-run shows each gate's value now.
func TestRunGatesOnRealPrometheus(t *testing.T) {
	c, e, ctx := startWebEnv(t, 4)
	svc := &serviceMetrics{client: adminClient(t, c), job: "web"}
	prom := simtest.StartPrometheus(t, svc.start(t))
	awaitScraped(t, ctx, prom, `sum(rate(http_requests_total{job="web"}[5s])) > 0`)
	gateArgs := []string{"-prometheus-address", prom.URL(), "-gate", batchErrors, "-gate-delay=3s", "-gate-interval=1s", "-gate-count=2"}

	// The dry run asks each query once: no allocation restarted yet, so no error.
	code, out, errOut := e.run(ctx, append(append([]string{"run", "-dry-run"}, gateArgs...), "web")...)
	if code != 0 || !strings.Contains(out, "Gates after each batch") || !strings.Contains(out, "now: 0, pass") {
		t.Fatalf("dry run: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}

	svc.bad.Store(true)
	code, out, errOut = e.run(ctx, append(append([]string{"run", "-on-error=fail", "-state=local", "-health=running"}, gateArgs...), "web")...)
	if code != 1 || !strings.Contains(out+errOut, `gate "errors"`) {
		t.Fatalf("bad version: exit %d, want 1 naming the gate\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	restarted := 0
	for _, a := range allocsOf(t, c, "web") {
		if ts := a.TaskStates["main"]; ts != nil && ts.Restarts > 0 {
			restarted++
		}
	}
	if restarted != 1 {
		t.Fatalf("%d allocations restarted, want 1 (the gate stops the restart after the 1st batch)", restarted)
	}
	recs := e.localRecords(t, ctx, "web")
	if len(recs) != 1 {
		t.Fatalf("records %v", recs)
	}
	rec := recs[0]
	g := rec.GateRunOf(1)
	if rec.Status != restart.StatusFailed || g == nil || g.Outcome != restart.GateFailed || len(g.Measurements) == 0 ||
		g.Measurements[len(g.Measurements)-1].Verdict != gate.VerdictFail || g.Measurements[len(g.Measurements)-1].Value < 0.1 {
		t.Fatalf("record: status %s (%s), gate run %+v; want failed on a measured error ratio (0.3 once the rate window holds only the new version)", rec.Status, rec.Reason, g)
	}
	code, out, _ = e.run(ctx, "status", "-state=local", rec.ID)
	if code != 0 || !strings.Contains(out, "\nGates\n") || !strings.Contains(out, "failed") {
		t.Errorf("status shows no gates:\n%s", out)
	}

	// A good version: every batch passes its gates, the last one too (once the bad
	// version's errors left the rate window).
	svc.bad.Store(false)
	awaitScraped(t, ctx, prom, `sum(rate(http_requests_total{job="web",code="500"}[5s])) == 0`)
	code, out, errOut = e.run(ctx, append(append([]string{"run", "-on-error=fail", "-state=local", "-health=running", "-batch-size=2"}, gateArgs...), "web")...)
	if code != 0 || strings.Count(out, "gates passed") != 2 {
		t.Fatalf("good version: exit %d, want 0 and 2 batches' gates passed\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
}

// TestRunRefusesBadGates: what cannot work is refused in one line before anything changes.
func TestRunRefusesBadGates(t *testing.T) {
	c, e, ctx := startWebEnv(t, 2)
	down := "http://" + simtest.ClosedAddr(t)
	for _, tc := range []struct {
		want string
		args []string
	}{
		{"no comparison", []string{"-prometheus-address", down, "-gate", "errors: rate(x[1m])"}},
		{"unknown template variable {{jobb}}", []string{"-prometheus-address", down, "-gate", `errors: x{job="{{jobb}}"} < 1`}},
		{"given twice", []string{"-prometheus-address", down, "-gate", "e: x < 1", "-gate", "e: y < 1"}},
		{"-gate-no-data", []string{"-prometheus-address", down, "-gate", "e: x < 1", "-gate-no-data", "maybe"}},
		{"-prometheus-address", []string{"-gate", "e: x < 1"}},
		{"its query failed", []string{"-prometheus-address", down, "-gate", "e: x < 1"}},
	} {
		t.Run(tc.want, func(t *testing.T) {
			runRefused(t, ctx, e, c, true, tc.want, append(append([]string{"run", "-state=local", "-yes"}, tc.args...), "web")...)
		})
	}
}

// awaitScraped waits until Prometheus answers query with a sample.
func awaitScraped(t *testing.T, ctx context.Context, prom *simtest.Prometheus, query string) {
	t.Helper()
	simtest.WaitFor(t, ctx, "Prometheus to scrape the service", func() bool {
		resp, err := http.Get(prom.URL() + "/api/v1/query?query=" + url.QueryEscape(query))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return strings.Contains(b.String(), `"result":[{`)
	})
}
