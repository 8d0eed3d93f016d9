package agent

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// scheduleMetrics are the scheduleRunner's metrics, registered on the agent's registry when
// it starts (registering again, as a second runner of one registry would, returns
// the collectors already there).
type scheduleMetrics struct {
	missed      prometheus.Counter
	occurrences *prometheus.CounterVec
}

func (m *Metrics) scheduleMetrics() *scheduleMetrics {
	missed := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "nomad_restart", Name: "schedule_missed_total",
		Help: "Occurrences of scheduled restarts that were not started because their due time passed more than the schedule's grace before an agent could start them.",
	})
	occ := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "nomad_restart", Name: "schedule_occurrences_total",
		Help: "Occurrences of scheduled restarts this agent recorded, by result: started, skipped (the job had a restart in progress, or nothing to restart), failed (planning failed).",
	}, []string{"result"})
	out := &scheduleMetrics{missed: register(m.reg, missed), occurrences: register(m.reg, occ)}
	for _, r := range []string{"started", "skipped", "failed"} {
		out.occurrences.WithLabelValues(r)
	}
	return out
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
