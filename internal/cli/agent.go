package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/notify/deliver"
	"github.com/nomad-restart/nomad-restart/internal/page"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
)

type agentOptions struct {
	client       clientFlags
	namespace    string
	concurrency  int
	httpAddr     string
	state        string
	logFormat    string
	rollOnChange bool
	notify       notifyFlags
	// drainUntil and balancerRefresh are the defaults of the restarts the agent plans.
	drainUntil, balancerRefresh stringsFlag
	drainEvidence               []restart.DrainEvidence
	refresh                     map[string]time.Duration
}

func parseAgentFlags(args []string) (*agentOptions, error) {
	o := &agentOptions{}
	rest, err := parseClientFlags("agent", &o.client, args, func(fs *flag.FlagSet) {
		fs.IntVar(&o.concurrency, "concurrency", agent.DefaultConcurrency, "")
		fs.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:9646", "")
		fs.StringVar(&o.state, "state", "nomad", "")
		fs.StringVar(&o.logFormat, "log-format", "text", "")
		fs.BoolVar(&o.rollOnChange, "roll-on-change", true, "")
		fs.Var(&o.drainUntil, "drain-until", "")
		fs.Var(&o.balancerRefresh, "balancer-refresh", "")
		// Prometheus, for the gates of the restarts the agent drives and of the jobs' meta.
		o.client.prometheus.add(fs)
		o.notify.add(fs)
	})
	if err != nil {
		return nil, err
	}
	if err := o.client.prometheus.validate(); err != nil {
		return nil, err
	}
	if o.drainEvidence, o.refresh, err = agentBalancerDefaults(o.drainUntil, o.balancerRefresh); err != nil {
		return nil, err
	}
	if len(rest) > 0 {
		return nil, usageErrorf("agent takes no arguments, got %q; see `nomad-restart agent -help`", strings.Join(rest, " "))
	}
	// -namespace is the agent's scope, not the client's default namespace (see the help).
	o.namespace = strings.TrimSpace(o.client.namespace)
	if o.namespace == "" {
		o.namespace = "*"
	}
	if o.concurrency < 1 {
		return nil, usageErrorf("-concurrency must be at least 1, got %d", o.concurrency)
	}
	switch o.state {
	case "nomad", "local":
	default:
		return nil, usageErrorf("Invalid -state value %q: valid options are nomad and local", o.state)
	}
	switch o.logFormat {
	case "text", "json":
	default:
		return nil, usageErrorf("Invalid -log-format value %q: valid options are text and json", o.logFormat)
	}
	if o.httpAddr != "" {
		if _, _, err := net.SplitHostPort(o.httpAddr); err != nil {
			return nil, usageErrorf("Invalid -http-addr value %q: want host:port, like 127.0.0.1:9646", o.httpAddr)
		}
	}
	return o, nil
}

// agentStoreMaxConns bounds the agent's connections for its records.
const agentStoreMaxConns = 24

// agentCommand is `nomad-restart agent`.
type agentCommand struct{}

func (agentCommand) Run(ctx context.Context, a *app, args []string) error {
	o, err := parseAgentFlags(args)
	if err != nil {
		return err
	}
	env := a.env
	scopeNS := o.namespace
	o.client = o.client.withEnv(func(k string) string {
		if k == "NOMAD_NAMESPACE" {
			return ""
		}
		return env(k)
	})
	logger, err := a.agentLogger(o)
	if err != nil {
		return err
	}
	setup, err := o.notify.setup(a.environment())
	if err == nil {
		err = setup.onlyItsSinks()
	}
	if err != nil {
		return err
	}
	if o.client.timeoutErr != nil {
		return o.client.timeoutErr
	}
	metrics := agent.NewMetrics()
	cc := cluster.ClientConfig{
		Address: o.client.address, Region: o.client.region, Token: o.client.token,
		CACert: o.client.caCert, CAPath: o.client.caPath, ClientCert: o.client.clientCert, ClientKey: o.client.clientKey,
		TLSServerName: o.client.tlsServerName, Insecure: o.client.insecure, RequestTimeout: o.client.timeout,
	}
	// Nomad's clock for the health gates, estimated from the times of its answers.
	clock := health.NewOffsetClock(nil)
	client, err := newCountingClient(cc.APIConfig(), metrics, 0, clock.Observe, cc.RequestTimeout)
	if err != nil {
		return usageErrorf("%s; check -address and the TLS options", output.OneLine(err.Error()))
	}
	// The records get a pool of their own, so that lease renewals never wait behind the
	// restarts' requests (cluster.StoreMaxConns; more for the many drivers of an agent,
	// still under Nomad's 100 per client address with the cluster's).
	storeClient, err := newCountingClient(cc.APIConfig(), metrics, agentStoreMaxConns, clock.Observe, cc.RequestTimeout)
	if err != nil {
		return usageErrorf("%s; check -address and the TLS options", output.OneLine(err.Error()))
	}
	if err := cluster.Reachable(ctx, client); err != nil {
		return output.Flat(err)
	}
	holder := "agent@" + a.holder()
	local, err := agentLocalStore(o.state, o.client)
	if err != nil {
		return err
	}
	gates, consul := gatesConfig(o.client.prometheusConfig), agentConsul(env, o.client.timeout)
	balancers := balancersConfig(o.client.prometheusConfig, o.client.timeout, o.drainEvidence, o.refresh)
	slot := &outboxSlot{}
	p := buildParts(partsConfig{client: client, storeClient: storeClient, region: o.client.region, namespace: cc.Namespace, local: local,
		logger: logger, holder: holder, health: engine.HealthConfig{Estimate: clock, Consul: consul}, sharedWatch: true, gates: gates, balancers: balancers, outbox: slot})
	if setup.any() {
		sinks, err := buildSinks(ctx, setup, nomadvars.New(client, nomadvars.Options{Logger: logger}), cc.Namespace)
		if err != nil {
			return err
		}
		ocfg := outboxConfig(setup, sinks, p.restarts, p, logger)
		ocfg.Observe = metrics.NotificationSettled
		slot.set(deliver.New(ctx, ocfg))
		logger.Info("notifying", "sinks", sinkList(sinks))
	}
	pagePartsFor, err := tokenParts(cc, local, logger, holder, consul, gates, balancers)
	if err != nil {
		return err
	}
	cfg := p.agentConfig(agent.Config{Namespace: scopeNS, Concurrency: o.concurrency, Holder: holder, Logger: logger,
		Metrics: metrics, Changes: changeRollouts(o.rollOnChange, client, env, o.client.timeout, logger)})
	cfg.Actions = pageActions(pagePartsFor, local == nil)
	ag, err := agent.New(cfg)
	if err != nil {
		return err
	}
	if o.httpAddr != "" {
		ln, err := net.Listen("tcp", o.httpAddr)
		if err != nil {
			return fmt.Errorf("listening on -http-addr %s: %w; choose a free address", o.httpAddr, err)
		}
		srv := &http.Server{Handler: ag.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("http server", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		logger.Info("serving the web page, /healthz and /metrics", "addr", "http://"+ln.Addr().String())
	}
	return ag.Run(ctx)
}

// Help is `nomad-restart agent -help`.
func (agentCommand) Help() string {
	return `Usage: nomad-restart agent [options]

  Run the agent: a long-running process that drives restarts nobody drives, those
  started with "run -detach" and those whose driver died (a killed CI job, a closed
  laptop), continuing each exactly once from its record. Several agents (a Nomad
  service job with count 3, see deploy/agent.nomad.hcl) share the work through each
  restart's lease, with no leader. On SIGTERM or Ctrl-C each restart in flight is
  detached at its next step and its lease released, so another agent takes over at
  once.

  The agent serves a live web page of the restarts (with a timeline of each, and
  pause, resume, cancel and answer performed with the Nomad token the user enters in
  the page), /healthz and Prometheus /metrics on -http-addr. Logs are structured (JSON with -log-format=json).

General Options:

  -address=<addr>     The address of the Nomad server (NOMAD_ADDR).
  -region=<region>    The region of the Nomad servers (NOMAD_REGION).
  -token=<token>      The SecretID of an ACL token (NOMAD_TOKEN).
  -ca-cert, -ca-path, -client-cert, -client-key, -tls-server-name, -tls-skip-verify
                      TLS options, as for Nomad's CLI (NOMAD_CACERT and the like).
  -request-timeout=<duration>
                      How long a request to Nomad, Consul or Prometheus waits for
                      its answer (NOMAD_RESTART_REQUEST_TIMEOUT; default 10s). See
                      "nomad-restart run -help".

Agent Options:

  -namespace=<ns>
    The namespace whose restarts the agent drives; "*" (the default) is every
    namespace the token may list. NOMAD_NAMESPACE is not read: inside a Nomad task
    it names the agent's own namespace.

  -concurrency=<n>
    The most restarts driven at once (default 500).

  -http-addr=<host:port>
    Where to serve the web page, /healthz and /metrics (default 127.0.0.1:9646);
    "" turns the listener off.

  -state=<nomad|local>
    Where restarts are recorded: "nomad" (Nomad Variables, the default; needed to
    share work between agents) or "local" (this machine's state directory).

  -log-level=<level>
    debug, info (the default), warn or error (NOMAD_RESTART_LOG_LEVEL).

  -log-format=<text|json>
    The log lines' format (default text).

  -roll-on-change=<bool>
    Config-change rollouts (default true): the agent follows the jobs whose meta opts
    in ("nomad-restart.on-change") and, when a Nomad variable or Consul key their
    templates read changes, files a restart of them that agents then drive in
    health-gated batches. See docs/config-change.md; "nomad-restart watches" lists what
    is followed. Consul keys are watched through CONSUL_HTTP_ADDR and the CONSUL_*
    environment.

  -drain-until=<balancer>, -balancer-refresh=<name>=<duration>
    Defaults for the restarts this agent plans (its page's, its rollouts' and
    schedules'), as "run" takes them: where to see that the load balancer
    stopped sending to an instance (traefik=URL, haproxy=URL or unix:/PATH,
    envoy=URL, prometheus:QUERY; repeatable), and how often the balancer the
    services' tags name reads Consul (traefik=5s). A restart's own options and
    its job's meta come first.

  -prometheus-address=<url>, -prometheus-token-file=<path>,
  -prometheus-ca-cert=<path>, -prometheus-client-cert=<path>,
  -prometheus-client-key=<path>, -prometheus-tls-skip-verify
    Prometheus, for the metric gates of the jobs' meta ("nomad-restart.gate.<name>")
    and of restarts whose record names none; as "run" reads them, with the same
    NOMAD_RESTART_PROMETHEUS_* environment.

  -notify=<name>=<url>, -notify-on=<trigger>[,..]=<name>[,..],
  -notify-min=<info|warning|error>, -notify-page-url=<url>
    Notify sinks of the restarts and fleets this agent drives, as "run" does
    (NOMAD_RESTART_NOTIFY_<NAME> names sinks too). A sink no -notify-on
    names hears every trigger; "-notify-on none=<name>" leaves it to the
    jobs' meta ("nomad-restart.notify.<trigger> = <name>"). Each
    notification is recorded in its restart's record once delivered, so an
    agent that adopts a restart sends what is owed and nothing twice. See
    docs/notifications.md.
`
}

func (agentCommand) Synopsis() string {
	return "Drive detached and orphaned restarts; serve metrics and a status page"
}

// agentLocalStore is the local store of -state local; nil with -state nomad.
func agentLocalStore(state string, cf clientFlags) (store.Store, error) {
	if state != "local" {
		return nil, nil
	}
	dir, err := localstore.DefaultDir(cf.xdgStateHome, cf.home)
	if err != nil {
		return nil, fmt.Errorf("finding the local state directory: %w", err)
	}
	return localstore.New(dir)
}

// pageActions is what the agent's page acts through: for each request, the parts on a
// client that carries the browser's token only, which steer its restarts and (with
// steerFleets, when the records are in Nomad) its fleets, and file new restarts.
func pageActions(partsFor func(token string) (parts, error), steerFleets bool) func(token string) (page.Actions, error) {
	return func(token string) (page.Actions, error) {
		p, err := partsFor(token)
		if err != nil {
			return page.Actions{}, err
		}
		acts := page.Actions{Steer: p.steerers(), File: p.engine}
		if !steerFleets {
			acts.Steer.Fleets = nil
		}
		return acts, nil
	}
}

// agentLogger logs at info unless told otherwise: an agent's logs are its record.
func (a *app) agentLogger(o *agentOptions) (*slog.Logger, error) {
	level := o.client.logLevel
	if level == "" || strings.EqualFold(level, "off") {
		level = "info"
	}
	base, err := a.logger(level)
	if err != nil {
		return nil, err
	}
	if o.logFormat != "json" {
		return base, nil
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(strings.ToUpper(strings.Replace(level, "trace", "debug", 1))))
	return slog.New(slog.NewJSONHandler(a.stderr, &slog.HandlerOptions{Level: l})), nil
}
