package agent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// fleetMetrics are the fleet runner's metrics, registered on the agent's registry (as
// scheduleMetrics are). The gauges are set from each listing of the fleets.
type fleetMetrics struct {
	fleets      *prometheus.GaugeVec
	jobs        *prometheus.GaugeVec
	driving     prometheus.Gauge
	driveErrors prometheus.Counter
	listErrors  prometheus.Counter
}

// fleetStatuses are a fleet's statuses, in the order a restart's are exported.
func fleetStatuses() []restart.Status {
	return []restart.Status{restart.StatusPending, restart.StatusRunning, restart.StatusPaused,
		restart.StatusWaiting, restart.StatusSucceeded, restart.StatusFailed, restart.StatusCanceled}
}

// fleetJobStatuses are where a job of a fleet may stand.
func fleetJobStatuses() []fleet.JobStatus {
	return []fleet.JobStatus{fleet.JobPending, fleet.JobRunning, fleet.JobSucceeded,
		fleet.JobFailed, fleet.JobSkipped, fleet.JobCanceled}
}

func (m *Metrics) fleetMetrics() *fleetMetrics {
	out := &fleetMetrics{
		fleets: register(m.reg, newGaugeVec("fleets", "Fleet restarts the agent can see, by status.", "status")),
		jobs: register(m.reg, newGaugeVec("fleet_jobs",
			"Jobs of the fleets that have not ended, by where each stands in its fleet (pending, running, succeeded, failed, skipped, canceled).", "status")),
		driving: register(m.reg, newGauge("fleets_driving", "Fleets this agent drives now, or is taking up (their lease may be held elsewhere).")),
		driveErrors: register(m.reg, newCounter("fleet_drive_errors_total",
			"Drives of fleets that ended with an error other than a lease held elsewhere (retried later).")),
		listErrors: register(m.reg, newCounter("fleet_listing_errors_total", "Listings of the fleets that failed (retried at the next change).")),
	}
	for _, s := range fleetStatuses() {
		out.fleets.WithLabelValues(string(s))
	}
	for _, s := range fleetJobStatuses() {
		out.jobs.WithLabelValues(string(s))
	}
	return out
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
	for _, s := range fleetStatuses() {
		m.fleets.WithLabelValues(string(s)).Set(float64(byStatus[s]))
	}
	for _, s := range fleetJobStatuses() {
		m.jobs.WithLabelValues(string(s)).Set(float64(jobs[s]))
	}
}
