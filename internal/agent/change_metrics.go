package agent

import "github.com/prometheus/client_golang/prometheus"

// changeMetrics are the config-change runner's metrics, registered on the agent's registry
// when it starts.
type changeMetrics struct {
	jobs     prometheus.Gauge
	rollouts *prometheus.CounterVec
	warnings *prometheus.CounterVec
}

func (m *Metrics) changeMetrics() *changeMetrics {
	jobs := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "nomad_restart", Name: "config_change_jobs",
		Help: "Jobs this agent follows for config-change rollouts (a group opts in with valid meta and has a source to watch).",
	})
	rollouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "nomad_restart", Name: "config_change_rollouts_total",
		Help: "Config-change rollouts this agent decided, by result: filed, exists (filed already, by this agent or another), waiting (a deployment or a restart of the job in progress), failed (planning or filing failed).",
	}, []string{"result"})
	warnings := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "nomad_restart", Name: "config_change_warnings_total",
		Help: "Problems with opted-in jobs, by kind: invalid_meta (the group is not rolled), change_mode (a watched template makes Nomad act on every allocation itself), source_unreadable (the agent cannot watch a source), source_missing (a watched variable is missing, or not listable by the agent's token).",
	}, []string{"kind"})
	out := &changeMetrics{jobs: register(m.reg, jobs), rollouts: register(m.reg, rollouts), warnings: register(m.reg, warnings)}
	for _, r := range []string{"filed", "exists", "waiting", "failed"} {
		out.rollouts.WithLabelValues(r)
	}
	for _, k := range []string{"invalid_meta", "change_mode", "source_unreadable", "source_missing"} {
		out.warnings.WithLabelValues(k)
	}
	return out
}
