package page_test

// The page's tests against the simulated Nomad: an agent (which serves the page as
// `nomad-restart agent` does) follows the records, restarts and fleets are filed as the CLI
// files them, and each request's actions are built on a client with that request's token
// alone, as internal/cli builds them.

import (
	"bufio"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/page"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// env is the simulated cluster of agenttest (running fast: a 5 s kill timeout takes
// 100 ms), with the agents built on it.
type env struct{ *agenttest.Env }

func startEnv(t testing.TB, opts nomadsim.Options) *env {
	t.Helper()
	return &env{agenttest.StartEnv(t, opts)}
}

// newAgent builds an agent whose client carries token, as the command builds one; tweak
// may change its configuration before the engine and the fleet driver are built on it.
func (e *env) newAgent(t testing.TB, holder, token string, tweak func(*agent.Config)) *agent.Agent {
	t.Helper()
	m := agent.NewMetrics()
	c := agentConfig(agenttest.NomadParts(e.AgentClient(t, token, m.Transport(nil))), holder)
	c.Metrics, c.MinListGap, c.ViewMaxAge, c.RetryFailed = m, 20*time.Millisecond, time.Millisecond, 100*time.Millisecond
	if tweak != nil {
		tweak(&c)
	}
	a, err := buildAgent(c, e.Health())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// agentConfig is an agent's configuration of parts (agenttest.NomadParts: as internal/cli
// builds them, the records and fleets in Nomad Variables); buildAgent adds the engine and
// the fleet driver.
func agentConfig(p agenttest.Parts, holder string) agent.Config {
	return agent.Config{
		Cluster: p.Cluster, Jobs: p.Cluster, Store: p.Store, Discovery: p.Discovery, Fleets: p.Fleets, Schedules: p.Schedules,
		Address: p.Address, Holder: holder,
	}
}

func buildAgent(c agent.Config, health engine.HealthConfig) (*agent.Agent, error) {
	c.Engine, c.FleetDriver = agenttest.Drivers(engine.Config{Cluster: c.Cluster, Store: c.Store, Logger: c.Logger, Holder: c.Holder, Now: c.Now, Health: health}, c.Fleets)
	return agent.New(c)
}

// tokenActions is what internal/cli wires as agent.Config.Actions: an engine and a fleet
// driver on a Nomad client with the request's token alone.
func (e *env) tokenActions(logger *slog.Logger) func(string) (page.Actions, error) {
	return func(token string) (page.Actions, error) {
		cl, err := e.Sim.APIClient(token)
		if err != nil {
			return page.Actions{}, err
		}
		p := agenttest.NomadParts(cl)
		eng, fleets := agenttest.Drivers(engine.Config{Cluster: p.Cluster, Store: p.Store, Logger: logger, Holder: "page"}, p.Fleets)
		return page.Actions{Steer: steer.Steerers{Restarts: eng.Steerer(), Fleets: fleets.Steerer()}, File: eng}, nil
	}
}

// serve serves a's page for the test. At the end its connections are closed first (the
// live streams among them), since the server's Close waits for every open request.
func serve(t *testing.T, a *agent.Agent, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	h := a.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = srv.Listener.Close() // no browser reconnects meanwhile
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

// readOnlyToken returns a token that may read the restarts of namespace default, and
// change nothing.
func (e *env) readOnlyToken(t testing.TB) string {
	t.Helper()
	return simtest.Token(t, e.Sim, "reader", `namespace "default" { policy = "read" variables { path "nomad-restart/*" { capabilities = ["read", "list"] } } }`)
}

// sseEvent is one server-sent event as a browser's EventSource would dispatch it.
type sseEvent struct{ name, data string }

// streamEvents opens the page's stream at url and delivers its events until ctx ends.
func streamEvents(t testing.TB, ctx context.Context, url string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("opening the stream %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream %s answered %s", url, resp.Status)
	}
	out := make(chan sseEvent)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" && ev.data != "":
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
				ev = sseEvent{}
			case line == "":
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}
