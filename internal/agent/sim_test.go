package agent

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// realTime is the time scale of the config-change tests: a rollout's debounce is a timer of
// the agent's, and the variables' ModifyTime, a template's re-render and the tasks' start
// times must be comparable with it, so Nomad's time runs as real time does.
const realTime = 1

// env is the simulated cluster of agenttest, with the agents built on it.
type env struct{ *agenttest.Env }

func startEnv(t testing.TB, opts nomadsim.Options) *env {
	t.Helper()
	return &env{agenttest.StartEnv(t, opts)}
}

// startBenchEnv stops b's timer (starting the cluster is not measured) and starts the agent
// benchmarks' cluster, at scale (0: simtest.TimeScale): 20 nodes, with Nomad's limit of 100
// connections per client address enforced as a real agent does. It returns the env and
// the benchmark's context.
func startBenchEnv(b *testing.B, scale float64) (*env, context.Context) {
	b.Helper()
	b.StopTimer()
	e := startEnv(b, nomadsim.Options{TimeScale: scale, NodesPerDatacenter: 10, MaxConnsPerClient: 100})
	return e, agenttest.Context(b)
}

// newAgent builds an agent on its own API client (with its metrics' counting transport) and
// the given token.
func (e *env) newAgent(t testing.TB, holder, token string, tweak func(*Config)) *Agent {
	t.Helper()
	m := NewMetrics()
	client := e.AgentClient(t, token, m.Transport(nil))
	c := Config{
		Store:  nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{}),
		Holder: holder, Metrics: m,
		MinListGap: 20 * time.Millisecond, ViewMaxAge: time.Millisecond,
		RetryFailed: 100 * time.Millisecond,
	}
	nomadParts(&c, client)
	if tweak != nil {
		tweak(&c)
	}
	finishParts(&c, e.Health())
	a, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// nomadParts fills c's parts of a Nomad client as the command builds them (cli's
// nomad.go): the cluster, the discovery of restarts, the job listing, the schedules and the
// fleets. finishParts builds the engine and the fleet driver, once the test chose the store.
func nomadParts(c *Config, client *api.Client) {
	p := agenttest.NomadParts(client)
	c.Cluster, c.Jobs, c.Discovery, c.Schedules, c.Fleets, c.Address = p.Cluster, p.Cluster, p.Discovery, p.Schedules, p.Fleets, p.Address
}

// finishParts builds c's engine on its cluster and store, and its fleet driver when it has
// fleets (their children are the agent's to drive, as detached restarts).
func finishParts(c *Config, health engine.HealthConfig) {
	eng, fleets := agenttest.Drivers(engine.Config{Cluster: c.Cluster, Store: c.Store, Logger: c.Logger, Holder: c.Holder, Now: c.Now, Health: health}, c.Fleets)
	c.Engine = eng
	if c.Fleets != nil {
		c.FleetDriver = fleets
	}
}

// productWiring gives the agent the clients `nomad-restart agent` builds (internal/cli's
// agent.go): a pool of cluster.MaxConnsPerHost connections for the cluster, a pool of its own
// for the records, whose store shares one blocking list among all drivers. wrap, when given,
// wraps each pool's transport (under the metrics' counting one). It returns the cluster's
// client.
func productWiring(b *testing.B, e *env, c *Config, wrap func(*http.Transport) http.RoundTripper) *api.Client {
	newClient := func(maxConns int) *api.Client {
		tr := cluster.NewTransport()
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = maxConns, maxConns
		var rt http.RoundTripper = tr
		if wrap != nil {
			rt = wrap(tr)
		}
		return e.AgentClient(b, e.Sim.BootstrapToken(), c.Metrics.Transport(rt))
	}
	client := newClient(cluster.MaxConnsPerHost)
	nomadParts(c, client)
	c.Store = nomadstore.NewRestarts(nomadvars.New(newClient(24), nomadvars.Options{}), nomadstore.Options{SharedWatch: true})
	return client
}

// shippedClient is an api client with ShippedToken(role).
func (e *env) shippedClient(t *testing.T, role string) *api.Client {
	t.Helper()
	return simtest.ClientAs(t, e.Sim, e.ShippedToken(t, role))
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return m.Counter.GetValue()
}
