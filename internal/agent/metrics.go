package agent

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
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
	metricGates   *prometheus.CounterVec
	notifications *prometheus.CounterVec
}

// NewMetrics builds the metrics on a new registry, with Go's runtime and process collectors.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		reg:          reg,
		restarts:     withLabels(newGaugeVec("restarts", "Restarts the agent can see, by status.", "status"), statusLabels()...),
		driving:      newGauge("restarts_driving", "Restarts this agent drives now (holding their lease)."),
		allocs:       withLabels(newCounterVec("allocations_total", "Allocations this agent finished, by result (restarted, failed, skipped).", "result"), "restarted", "failed", "skipped"),
		batchSeconds: newHistogram("batch_duration_seconds", "Time from a batch's start to its end, for batches this agent saw start and finish.", prometheus.ExponentialBuckets(1, 2, 14)),
		gateSeconds: newHistogram("health_gate_wait_seconds", "Time an allocation spent in the health gate: from Nomad accepting the restart to the allocation counting as healthy again (or failing).",
			prometheus.ExponentialBuckets(0.25, 2, 14)),
		apiErrors:   newCounterVec("nomad_api_errors_total", "Requests to Nomad that failed, by HTTP status code (\"transport\" when no answer came).", "code"),
		apiRequests: newCounter("nomad_api_requests_total", "Requests sent to Nomad."),
		leases: withLabels(newCounterVec("lease_changes_total", "Changes of restart leases seen by this agent: acquired, released, lost, held_elsewhere.", "change"),
			"acquired", "released", "lost", "held_elsewhere"),
		discoveryPass: newCounter("discovery_passes_total", "Listings of the restart records this agent made to find work."),
		adoptions:     newCounter("adoptions_total", "Restarts this agent took up (started detached, or continued after another driver)."),
		driveFailures: newCounter("drive_errors_total", "Drives that ended with an error other than a lease held elsewhere (retried later)."),
		metricGates: withLabels(newCounterVec("metric_gates_total", "Batches whose metric gates (-gate) this agent judged, by outcome (passed, failed, would-fail: a dry run's failure).", "outcome"),
			"passed", "failed", "would-fail"),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "notifications_total",
			Help: "Notifications this process settled, by sink name and outcome (sent, failed: given up after its retries, summarized: folded into a rate limit's summary)."},
			[]string{"sink", "outcome"}),
	}
	reg.MustRegister(m.restarts, m.driving, m.allocs, m.batchSeconds, m.gateSeconds, m.apiErrors,
		m.apiRequests, m.leases, m.discoveryPass, m.adoptions, m.driveFailures, m.metricGates, m.notifications,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
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

// withLabels creates v's series for each of values, so that they are exported (at zero) before
// anything happens: a query or alert on a series that does not exist yet sees nothing.
func withLabels[V interface{ WithLabelValues(...string) M }, M any](v V, values ...string) V {
	for _, value := range values {
		v.WithLabelValues(value)
	}
	return v
}

// statusLabels are the statuses of restarts and fleets, in the order they are exported.
func statusLabels() []string {
	var out []string
	for _, s := range restart.Statuses() {
		out = append(out, string(s))
	}
	return out
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
	for _, s := range restart.Statuses() {
		m.restarts.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
}

// NotificationSettled counts a notification settled for sink with outcome (the outbox's
// Observe).
func (m *Metrics) NotificationSettled(sink, outcome string) {
	m.notifications.WithLabelValues(sink, outcome).Inc()
}

func (m *Metrics) lease(change string) { m.leases.WithLabelValues(change).Inc() }

func (m *Metrics) observeBatch(d time.Duration) { m.batchSeconds.Observe(d.Seconds()) }

func (m *Metrics) observeGate(d time.Duration) { m.gateSeconds.Observe(d.Seconds()) }

// changeMetrics are the config-change runner's metrics, registered on the agent's registry
// when it starts.
type changeMetrics struct {
	jobs         prometheus.Gauge
	metaProblems prometheus.Gauge
	rollouts     *prometheus.CounterVec
	warnings     *prometheus.CounterVec
	renderReads  *prometheus.CounterVec
	reverts      *prometheus.CounterVec
}

func (m *Metrics) changeMetrics() *changeMetrics {
	return &changeMetrics{
		jobs: register(m.reg, newGauge("config_change_jobs",
			"Jobs this agent follows for config-change rollouts (a group opts in with valid meta and has a source to watch).")),
		metaProblems: register(m.reg, newGauge("config_change_meta_problems",
			"Invalid nomad-restart meta values in the jobs this agent sees now, each once (a key's value at the job's or a group's level); their groups are not rolled until they are fixed. The agent logs each when it appears or changes, and when it is fixed.")),
		rollouts: register(m.reg, withLabels(newCounterVec("config_change_rollouts_total",
			"Config-change rollouts this agent decided, by result: filed, exists (filed already, by this agent or another), waiting (a deployment or a restart of the job in progress), failed (planning or filing failed).", "result"),
			"filed", "exists", "waiting", "failed")),
		warnings: register(m.reg, withLabels(newCounterVec("config_change_warnings_total",
			"Problems with opted-in jobs, by kind: invalid_meta (the group is not rolled), change_mode (a watched template makes Nomad act on every allocation itself), source_unreadable (the agent cannot watch a source), source_missing (a watched variable is missing, or not listable by the agent's token), read_fs_denied (the agent's token may not read the allocations' files: the namespace's read-fs capability), files_unreadable (an allocation's files could not be read), keep_failed (the value of a source of a job that reverts failed rollouts could not be read or kept).", "kind"),
			"invalid_meta", "change_mode", "source_unreadable", "source_missing", "read_fs_denied", "files_unreadable", "keep_failed")),
		renderReads: register(m.reg, withLabels(newCounterVec("config_change_render_reads_total",
			"Directory listings of allocations this agent sent to follow templates' re-renders (one per allocation and template directory every render-interval), by result: ok, denied, error.", "result"),
			"ok", "denied", "error")),
		reverts: register(m.reg, withLabels(newCounterVec("config_change_reverts_total",
			"Failed config-change rollouts of jobs with nomad-restart.on-failure = revert, by what this agent did: reverted (the kept value written back and the restart of the allocations that restarted onto the bad one filed), changed_since (the source changed again since: left alone), unkept (no value was kept for the change), not_revertible (a prefix or a re-render), error.", "result"),
			"reverted", "changed_since", "unkept", "not_revertible", "error")),
	}
}

// scheduleMetrics are the scheduleRunner's metrics, registered on the agent's registry when
// it starts (registering again, as a second runner of one registry would, returns
// the collectors already there).
type scheduleMetrics struct {
	missed      prometheus.Counter
	occurrences *prometheus.CounterVec
}

func (m *Metrics) scheduleMetrics() *scheduleMetrics {
	return &scheduleMetrics{
		missed: register(m.reg, newCounter("schedule_missed_total",
			"Occurrences of scheduled restarts that were not started because their due time passed more than the schedule's grace before an agent could start them.")),
		occurrences: register(m.reg, withLabels(newCounterVec("schedule_occurrences_total",
			"Occurrences of scheduled restarts this agent recorded, by result: started, skipped (the job had a restart in progress, or nothing to restart), failed (planning failed).", "result"),
			"started", "skipped", "failed")),
	}
}

// register registers c on reg, or returns the equal collector registered before.
func register[C prometheus.Collector](reg *prometheus.Registry, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// fleetMetrics are the fleet runner's metrics, registered on the agent's registry (as
// scheduleMetrics are). The gauges are set from each listing of the fleets.
type fleetMetrics struct {
	fleets      *prometheus.GaugeVec
	jobs        *prometheus.GaugeVec
	driving     prometheus.Gauge
	driveErrors prometheus.Counter
	listErrors  prometheus.Counter
}

// fleetJobStatuses are where a job of a fleet may stand.
func fleetJobStatuses() []fleet.JobStatus {
	return []fleet.JobStatus{fleet.JobPending, fleet.JobRunning, fleet.JobSucceeded,
		fleet.JobFailed, fleet.JobSkipped, fleet.JobCanceled}
}

func (m *Metrics) fleetMetrics() *fleetMetrics {
	var jobStatuses []string
	for _, s := range fleetJobStatuses() {
		jobStatuses = append(jobStatuses, string(s))
	}
	return &fleetMetrics{
		fleets: register(m.reg, withLabels(newGaugeVec("fleets", "Fleet restarts the agent can see, by status.", "status"), statusLabels()...)),
		jobs: register(m.reg, withLabels(newGaugeVec("fleet_jobs",
			"Jobs of the fleets that have not ended, by where each stands in its fleet (pending, running, succeeded, failed, skipped, canceled).", "status"),
			jobStatuses...)),
		driving: register(m.reg, newGauge("fleets_driving", "Fleets this agent drives now, or is taking up (their lease may be held elsewhere).")),
		driveErrors: register(m.reg, newCounter("fleet_drive_errors_total",
			"Drives of fleets that ended with an error other than a lease held elsewhere (retried later).")),
		listErrors: register(m.reg, newCounter("fleet_listing_errors_total", "Listings of the fleets that failed (retried at the next change).")),
	}
}

// setListing sets the gauges from a listing of every fleet the agent can see.
func (m *fleetMetrics) setListing(recs []*fleet.Record) {
	byStatus := map[restart.Status]int{}
	jobs := map[fleet.JobStatus]int{}
	for _, r := range recs {
		byStatus[r.Status]++
		if r.Status.Terminal() {
			continue
		}
		for s, n := range r.Counts() {
			jobs[s] += n
		}
	}
	for _, s := range restart.Statuses() {
		m.fleets.WithLabelValues(string(s)).Set(float64(byStatus[s]))
	}
	for _, s := range fleetJobStatuses() {
		m.jobs.WithLabelValues(string(s)).Set(float64(jobs[s]))
	}
}
