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
		reg:          reg,
		restarts:     newGaugeVec("restarts", "Restarts the agent can see, by status.", "status"),
		driving:      newGauge("restarts_driving", "Restarts this agent drives now (holding their lease)."),
		allocs:       newCounterVec("allocations_total", "Allocations this agent finished, by result (restarted, failed, skipped).", "result"),
		batchSeconds: newHistogram("batch_duration_seconds", "Time from a batch's start to its end, for batches this agent saw start and finish.", prometheus.ExponentialBuckets(1, 2, 14)),
		gateSeconds: newHistogram("health_gate_wait_seconds", "Time an allocation spent in the health gate: from Nomad accepting the restart to the allocation counting as healthy again (or failing).",
			prometheus.ExponentialBuckets(0.25, 2, 14)),
		apiErrors:     newCounterVec("nomad_api_errors_total", "Requests to Nomad that failed, by HTTP status code (\"transport\" when no answer came).", "code"),
		apiRequests:   newCounter("nomad_api_requests_total", "Requests sent to Nomad."),
		leases:        newCounterVec("lease_changes_total", "Changes of restart leases seen by this agent: acquired, released, lost, held_elsewhere.", "change"),
		discoveryPass: newCounter("discovery_passes_total", "Listings of the restart records this agent made to find work."),
		adoptions:     newCounter("adoptions_total", "Restarts this agent took up (started detached, or continued after another driver)."),
		driveFailures: newCounter("drive_errors_total", "Drives that ended with an error other than a lease held elsewhere (retried later)."),
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

// metricsNamespace prefixes every metric name, so the agent's metrics sort together.
const metricsNamespace = "nomad_restart"

func newGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: name, Help: help})
}

func newGaugeVec(name, help, label string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: metricsNamespace, Name: name, Help: help}, []string{label})
}

func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help})
}

func newCounterVec(name, help, label string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: name, Help: help}, []string{label})
}

func newHistogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace, Name: name, Help: help, Buckets: buckets})
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
