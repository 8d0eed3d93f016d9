package cli

import (
	"time"

	"github.com/nomad-restart/nomad-restart/internal/balancer"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/gate/prometheus"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// balancerDialer hands the engine the drain's probes of load balancers (-drain-until).
type balancerDialer struct{ d balancer.Dialer }

func (b balancerDialer) Dial(ev restart.DrainEvidence) (engine.BalancerProbe, error) {
	return b.d.Dial(ev)
}

// balancersConfig is how the engine reads load balancers: within the request timeout, and
// Prometheus as the gates reach it. until and refresh are the agent's defaults for the
// restarts it plans (nil for the command line, whose restarts give their own).
func balancersConfig(prom prometheus.Config, timeout time.Duration, until []restart.DrainEvidence, refresh map[string]time.Duration) engine.BalancersConfig {
	return engine.BalancersConfig{Dialer: balancerDialer{balancer.Dialer{Timeout: timeout, Prometheus: prometheus.Dialer{Config: prom}}},
		DrainUntil: until, Refresh: refresh}
}

// agentBalancerDefaults parses the agent's -drain-until and -balancer-refresh, once, with
// the restarts' own parsers.
func agentBalancerDefaults(until, refresh []string) ([]restart.DrainEvidence, map[string]time.Duration, error) {
	var evs []restart.DrainEvidence
	for _, v := range until {
		ev, err := restart.ParseDrainUntil(v)
		if err != nil {
			return nil, nil, usageErrorf("%s", capitalInvalid(err))
		}
		evs = append(evs, ev)
	}
	var m map[string]time.Duration
	for _, v := range refresh {
		k, d, err := restart.ParseBalancerRefresh(v)
		if err != nil {
			return nil, nil, usageErrorf("%s", capitalInvalid(err))
		}
		if m == nil {
			m = map[string]time.Duration{}
		}
		m[k] = d
	}
	return evs, m, nil
}
