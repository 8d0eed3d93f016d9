package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
)

// listenDemoPage opens -http-addr before the demo starts, so that an address in use is
// refused before anything runs.
func listenDemoPage(addr string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, usageErrorf("Invalid -http-addr value %q: want host:port, like 127.0.0.1:9646", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on -http-addr %s: %w; choose a free address", addr, err)
	}
	return ln, nil
}

// serveDemoPage serves the agent's page (the restarts recorded in the demo's cluster) on ln
// until ctx ends (Ctrl-C), running an agent on the demo's cluster as `nomad-restart agent`
// would: its page follows the records as the agent's does.
func (a *app) serveDemoPage(ctx context.Context, ln net.Listener, nomadAddr string, logger *slog.Logger) error {
	cc := cluster.ClientConfig{Address: nomadAddr}
	client, err := cluster.NewClient(cc)
	if err != nil {
		return fmt.Errorf("connecting the page to the simulated cluster: %w", err)
	}
	// The page steers as the agent's does; the demo's cluster has no ACLs, so no token is
	// needed.
	holder := "agent@" + a.holder()
	consul := agentConsul(a.env, 0)
	partsFor, err := tokenParts(cc, nil, logger, holder, consul, engine.GatesConfig{})
	if err != nil {
		return fmt.Errorf("preparing the page's actions: %w", err)
	}
	cfg := buildParts(partsConfig{client: client, logger: logger, holder: holder, sharedWatch: true, health: engine.HealthConfig{Consul: consul}}).agentConfig(
		agent.Config{Namespace: "*", Holder: holder, Logger: logger})
	cfg.Actions = pageActions(partsFor, false)
	ag, err := agent.New(cfg)
	if err != nil {
		return fmt.Errorf("starting the agent's page: %w", err)
	}
	srv := &http.Server{Handler: ag.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	runErr := ag.Run(ctx)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the agent's page on %s: %w", ln.Addr(), err)
	}
	return runErr
}
