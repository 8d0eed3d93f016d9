package prometheus

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// The gate used against the real Prometheus: the error ratio, per job.
const e2eErrors = `errors: sum(rate(http_requests_total{job="{{job}}",code=~"5.."}[10s])) / sum(rate(http_requests_total{job="{{job}}"}[10s])) < 0.02`

// TestAgainstPrometheus runs the gates on a real Prometheus (Debian's package) scraping a
// service every second: the error ratio it measures, no data (no series, and NaN from a
// service without traffic), a result of several series, the batch's allocations in a
// regexp, and Prometheus down.
func TestAgainstPrometheus(t *testing.T) {
	start := time.Now()
	target := startService(t)
	prom := simtest.StartPrometheus(t, target)
	p, err := New(Config{Address: prom.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	waitForRates(t, p, prom)
	t.Logf("Prometheus up and scraping after %s", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	everySecond := gate.Policy{Interval: time.Second, Count: 3, ErrorLimit: 4}
	run := func(t *testing.T, q gate.Querier, gates []gate.Spec, vars gate.Vars, pol gate.Policy) (gate.Result, []gate.Measurement) {
		t.Helper()
		var ms []gate.Measurement
		res, err := gate.Run(ctx, q, gates, vars, pol, wallClock{}, nil, func(m gate.Measurement) error {
			ms = append(ms, m)
			return nil
		})
		if err != nil {
			t.Fatalf("Run: %v (Prometheus's log:\n%s)", err, prom.Logs())
		}
		return res, ms
	}
	errorsGate := mustParse(t, e2eErrors)

	t.Run("a 30% error rate fails", func(t *testing.T) {
		res, ms := run(t, p, []gate.Spec{errorsGate}, gate.Vars{Job: "bad"}, everySecond)
		if res.Passed || !strings.HasPrefix(res.Failed, `gate "errors": 1 of 1 measurement failed (limit 0): 0.3 not < 0.02`) {
			t.Fatalf("result %+v, measured %+v", res, ms)
		}
		if len(ms) != 1 || math.Abs(ms[0].Value-0.3) > 0.01 || ms[0].Verdict != gate.VerdictFail || !strings.Contains(ms[0].Query, `{job="bad",code=~"5.."}`) {
			t.Fatalf("measured %+v, want one failed measurement of about 0.3", ms)
		}
	})

	t.Run("no errors, no data when asked, and the batch's allocations pass", func(t *testing.T) {
		gates := []gate.Spec{
			errorsGate,
			mustParse(t, `missing: sum(rate(does_not_exist_total[10s])) < 1`),
			mustParse(t, `idle: sum(rate(http_requests_total{job="idle",code=~"5.."}[10s])) / sum(rate(http_requests_total{job="idle"}[10s])) < 0.02`),
			// Only the batch's two instances match, not web.api[1] nor webXapi[0]: the names'
			// dots and brackets are escaped, and Prometheus reads the escapes.
			mustParse(t, `allocs: count(app_ready{alloc_id=~"{{allocs}}", alloc_name=~"{{alloc_names}}"}) == 2`),
		}
		vars := gate.Vars{Job: "good", AllocIDs: []string{allocIDs[0], allocIDs[2]}, AllocNames: []string{"web.api[0]", "web.api[10]"}}
		pol := everySecond
		pol.NoData = gate.NoDataPass
		began := time.Now()
		res, ms := run(t, p, gates, vars, pol)
		if !res.Passed {
			t.Fatalf("result %+v, measured %+v", res, ms)
		}
		if took := time.Since(began); took < 1900*time.Millisecond {
			t.Fatalf("3 measurements a second apart took %s", took)
		}
		want := map[string]gate.Verdict{"errors": gate.VerdictPass, "missing": gate.VerdictNoData, "idle": gate.VerdictNoData, "allocs": gate.VerdictPass}
		for _, m := range ms {
			if m.Verdict != want[m.Gate] {
				t.Errorf("gate %s measured %+v, want %s", m.Gate, m, want[m.Gate])
			}
		}
		if len(ms) != 12 {
			t.Errorf("%d measurements, want 3 of each of 4 gates", len(ms))
		}
	})

	t.Run("no data fails by default, NaN too", func(t *testing.T) {
		gates := []gate.Spec{
			mustParse(t, `missing: sum(rate(does_not_exist_total[10s])) < 1`),
			mustParse(t, strings.Replace(e2eErrors, "errors:", "idle:", 1)),
		}
		res, ms := run(t, p, gates, gate.Vars{Job: "idle"}, everySecond)
		if res.Failed != `gate "missing": 1 of 1 measurement failed (limit 0): no data (the query returned no series or NaN; no data counts as a failure)` || res.Gates[1].State != gate.Failed {
			t.Fatalf("result %+v, measured %+v", res, ms)
		}
	})

	t.Run("several series are an error naming them", func(t *testing.T) {
		split := `sum by (code) (rate(http_requests_total{job="bad"}[10s]))`
		_, err := p.Query(ctx, split, time.Now())
		if err == nil || err.Error() != `query returned 2 series, want 1: {code="200"}, {code="500"}; aggregate it, e.g. sum(...)` {
			t.Fatalf("err = %v", err)
		}
		res, _ := run(t, p, []gate.Spec{mustParse(t, "split: "+split+" < 1")}, gate.Vars{}, gate.Policy{Interval: 200 * time.Millisecond, Count: 3, ErrorLimit: 1})
		if res.Failed != `gate "split": 2 queries in a row failed (limit 1): `+err.Error() {
			t.Fatalf("result %+v", res)
		}
	})

	t.Run("a query Prometheus rejects", func(t *testing.T) {
		_, err := p.Query(ctx, "sum(rate(x[10s])", time.Now())
		if err == nil || !strings.HasPrefix(err.Error(), "querying Prometheus at "+prom.URL()+": bad_data: ") || !strings.Contains(err.Error(), "parse error") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("Prometheus down", func(t *testing.T) {
		down := simtest.ClosedAddr(t)
		q, err := New(Config{Address: "http://" + down})
		if err != nil {
			t.Fatal(err)
		}
		res, ms := run(t, q, []gate.Spec{errorsGate}, gate.Vars{Job: "bad"}, gate.Policy{Interval: 200 * time.Millisecond, Count: 3, ErrorLimit: 2})
		want := `gate "errors": 3 queries in a row failed (limit 2): querying Prometheus at http://` + down + `: `
		if !strings.HasPrefix(res.Failed, want) || !strings.Contains(res.Failed, "connection refused") || len(ms) != 3 {
			t.Fatalf("result %+v, measured %+v", res, ms)
		}
	})
	t.Logf("all done after %s", time.Since(start).Round(time.Millisecond))
}

// allocIDs are the service's instances; the gate's batch is the first and the third.
var allocIDs = []string{
	"8d3a1c2e-4b5f-6a7b-8c9d-0e1f2a3b4c5d",
	"1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901",
	"f0e1d2c3-b4a5-9687-7869-5a4b3c2d1e0f",
	"00000000-1111-2222-3333-444444444444",
}

// startService serves http_requests_total{job,code} and app_ready{alloc_id,alloc_name} on
// its own registry. Each scrape counts 10 more requests: job "bad" 7 answered 200 and 3
// answered 500 (a 30% error rate, exactly, since both counters are read in one scrape),
// "good" 10 answered 200 and none 500, "idle" none (its ratio is 0/0).
func startService(t *testing.T) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "http_requests_total", Help: "Requests by job and status code."}, []string{"job", "code"})
	ready := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "app_ready", Help: "1 when the instance is ready."}, []string{"alloc_id", "alloc_name"})
	reg.MustRegister(requests, ready)
	for _, job := range []string{"bad", "good", "idle"} {
		for _, code := range []string{"200", "500"} {
			requests.WithLabelValues(job, code)
		}
	}
	for i, name := range []string{"web.api[0]", "web.api[1]", "web.api[10]", "webXapi[0]"} {
		ready.WithLabelValues(allocIDs[i], name).Set(1)
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.WithLabelValues("bad", "200").Add(7)
		requests.WithLabelValues("bad", "500").Add(3)
		requests.WithLabelValues("good", "200").Add(10)
		metrics.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// waitForRates waits until Prometheus has scraped the service often enough for a rate.
func waitForRates(t *testing.T, p *Client, prom *simtest.Prometheus) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := p.Query(context.Background(), `sum(rate(http_requests_total{job="bad"}[10s]))`, time.Now())
		if err == nil && !s.Empty && s.Value > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has no rate of the service's requests after 20s (last: %+v, %v):\n%s", s, err, prom.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mustParse parses a gate the test knows to be valid.
func mustParse(t *testing.T, s string) gate.Spec {
	t.Helper()
	g, err := gate.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// wallClock is the gates' time on the wall clock, as the engine's.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) bool { return cluster.Sleep(ctx, d) }
