package agent

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Metrics are the agent's Prometheus metrics, on a registry of their own: a program that
// embeds the agent (or a test running several) never collides on the global registry.
type Metrics struct {
	reg *prometheus.Registry

	restarts      *prometheus.GaugeVec
	driving       prometheus.Gauge
	allocs        *prometheus.CounterVec
	batchSeconds  prometheus.Histogram
	gateSeconds   prometheus.Histogram
	apiErrors     *prometheus.CounterVec
	apiRequests   prometheus.Counter
	leases        *prometheus.CounterVec
	discoveryPass prometheus.Counter
	adoptions     prometheus.Counter
	driveFailures prometheus.Counter
}

// NewMetrics builds the metrics on a new registry, with Go's runtime and process collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg: reg,
		restarts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "nomad_restart", Name: "restarts",
			Help: "Restarts the agent can see, by status.",
		}, []string{"status"}),
		driving: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "nomad_restart", Name: "restarts_driving",
			Help: "Restarts this agent drives now (holding their lease).",
		}),
		allocs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nomad_restart", Name: "allocations_total",
			Help: "Allocations this agent finished, by result (restarted, failed, skipped).",
		}, []string{"result"}),
		batchSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "nomad_restart", Name: "batch_duration_seconds",
			Help:    "Time from a batch's start to its end, for batches this agent saw start and finish.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}),
		gateSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "nomad_restart", Name: "health_gate_wait_seconds",
			Help:    "Time an allocation spent in the health gate: from Nomad accepting the restart to the allocation counting as healthy again (or failing).",
			Buckets: prometheus.ExponentialBuckets(0.25, 2, 14),
		}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nomad_restart", Name: "nomad_api_errors_total",
			Help: "Requests to Nomad that failed, by HTTP status code (\"transport\" when no answer came).",
		}, []string{"code"}),
		apiRequests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "nomad_restart", Name: "nomad_api_requests_total",
			Help: "Requests sent to Nomad.",
		}),
		leases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "nomad_restart", Name: "lease_changes_total",
			Help: "Changes of restart leases seen by this agent: acquired, released, lost, held_elsewhere.",
		}, []string{"change"}),
		discoveryPass: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "nomad_restart", Name: "discovery_passes_total",
			Help: "Listings of the restart records this agent made to find work.",
		}),
		adoptions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "nomad_restart", Name: "adoptions_total",
			Help: "Restarts this agent took up (started detached, or continued after another driver).",
		}),
		driveFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "nomad_restart", Name: "drive_errors_total",
			Help: "Drives that ended with an error other than a lease held elsewhere (retried later).",
		}),
	}
	reg.MustRegister(m.restarts, m.driving, m.allocs, m.batchSeconds, m.gateSeconds, m.apiErrors,
		m.apiRequests, m.leases, m.discoveryPass, m.adoptions, m.driveFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range []restart.Status{restart.StatusPending, restart.StatusRunning, restart.StatusPaused,
		restart.StatusWaiting, restart.StatusSucceeded, restart.StatusFailed, restart.StatusCanceled} {
		m.restarts.WithLabelValues(string(s))
	}
	for _, r := range []string{"restarted", "failed", "skipped"} {
		m.allocs.WithLabelValues(r)
	}
	for _, c := range []string{"acquired", "released", "lost", "held_elsewhere"} {
		m.leases.WithLabelValues(c)
	}
	return m
}

// Registry is the registry the metrics live on, for embedding programs that add their own.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the metrics in Prometheus' exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Transport wraps next (nil: http.DefaultTransport) so that every request to Nomad and every
// failed answer is counted. Blocking queries that time out answer 200 and are not errors.
func (m *Metrics) Transport(next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return &countingTransport{next: next, m: m}
}

type countingTransport struct {
	next http.RoundTripper
	m    *Metrics
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.m.apiRequests.Inc()
	resp, err := t.next.RoundTrip(r)
	switch {
	case err != nil:
		if r.Context().Err() == nil { // a canceled context is ours, not Nomad's failure
			t.m.apiErrors.WithLabelValues("transport").Inc()
		}
	case resp.StatusCode >= 400:
		t.m.apiErrors.WithLabelValues(strconv.Itoa(resp.StatusCode)).Inc()
	}
	return resp, err
}

func (m *Metrics) setStatusCounts(counts map[restart.Status]int) {
	for _, s := range []restart.Status{restart.StatusPending, restart.StatusRunning, restart.StatusPaused,
		restart.StatusWaiting, restart.StatusSucceeded, restart.StatusFailed, restart.StatusCanceled} {
		m.restarts.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
}

func (m *Metrics) lease(change string) { m.leases.WithLabelValues(change).Inc() }

func (m *Metrics) observeBatch(d time.Duration) { m.batchSeconds.Observe(d.Seconds()) }

func (m *Metrics) observeGate(d time.Duration) { m.gateSeconds.Observe(d.Seconds()) }
