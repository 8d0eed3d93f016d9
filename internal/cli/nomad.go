package cli

// The one file of the CLI that handles Nomad's api client: it builds the clients from the
// flags and the environment, and on them, once, the parts every command drives and steers
// restarts and fleets with (the cluster, the stores, the engine, the fleet driver). The rest
// of the CLI sees only those parts.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/notify/deliver"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
)

// parts are what restarts and fleets are driven and steered with on one cluster, built
// once from its clients by buildParts.
type parts struct {
	cluster *cluster.Nomad
	// restarts keeps the restart records (Nomad Variables, or a local file with -state
	// local); fleets, schedules and discovery are nil with a local store: they live in
	// Nomad Variables only.
	restarts  store.Store
	fleets    store.Fleets
	schedules *schedule.Store
	discovery *nomadstore.Lister
	engine    *engine.Engine
	// fleet drives fleets (nil without fleets); it drives their children in this process
	// only with partsConfig.driveChildren (the agent leaves them to its adoption).
	fleet *fleetrun.Driver
	// address is the Nomad address the parts talk to.
	address string
}

// partsConfig is what buildParts builds on.
type partsConfig struct {
	client *api.Client
	// storeClient is the records' own client (a pool of its own, so that lease renewals
	// never wait behind a batch's requests); nil: client.
	storeClient *api.Client
	region      string
	// namespace is the client's namespace (-namespace or NOMAD_NAMESPACE), which a
	// request that names none goes to.
	namespace string
	// local, when set, keeps the restart records instead of Nomad Variables (-state local).
	local  store.Store
	logger *slog.Logger
	holder string
	health engine.HealthConfig
	// gates is how the metric gates reach Prometheus.
	gates engine.GatesConfig
	// balancers is how a drain reads load balancers (-drain-until), and the agent's
	// defaults.
	balancers engine.BalancersConfig
	// sharedWatch makes the restarts' drivers follow their steering on one shared listing
	// (the agent's many drivers; a fleet's children driven here).
	sharedWatch bool
	// maxFeeds bounds the event streams the engine holds at once (0: the engine's
	// default); driveChildren makes the fleet driver drive its children here.
	maxFeeds      int
	driveChildren bool
	// outbox hears the engine's stored events for the notifications (nil: none).
	outbox *outboxSlot
}

// buildParts builds the parts of one cluster. It contacts nothing.
func buildParts(c partsConfig) parts {
	storeClient := c.storeClient
	if storeClient == nil {
		storeClient = c.client
	}
	p := parts{
		cluster: cluster.NewNomadWithOptions(c.client, cluster.Options{Region: c.region, Namespace: c.namespace, Logger: c.logger}),
		address: c.client.Address(),
	}
	p.restarts = c.local
	if p.restarts == nil {
		// One Variables client for every store: the records' pool, its retries and logger.
		vars := nomadvars.New(storeClient, nomadvars.Options{Logger: c.logger})
		p.restarts = nomadstore.NewRestarts(vars, nomadstore.Options{Logger: c.logger, SharedWatch: c.sharedWatch})
		p.fleets = nomadstore.NewFleets(vars, nomadstore.Options{Logger: c.logger})
		p.schedules = schedule.NewStore(vars, "")
		p.discovery = nomadstore.NewLister(vars, "")
	}
	ecfg := engine.Config{Cluster: p.cluster, Store: p.restarts, Logger: c.logger, Holder: c.holder,
		Health: c.health, Gates: c.gates, Balancers: c.balancers, MaxFeeds: c.maxFeeds}
	if c.outbox != nil {
		ecfg.Outbox = c.outbox // never a typed nil in the interface
	}
	p.engine = engine.New(ecfg)
	if p.fleets != nil {
		fcfg := fleetrun.Config{Fleets: p.fleets, Restarts: p.restarts, Engine: p.engine,
			Holder: c.holder, Logger: c.logger, DriveChildren: c.driveChildren}
		if c.outbox != nil {
			fcfg.Outbox = c.outbox
		}
		p.fleet = fleetrun.New(fcfg)
	}
	return p
}

// steerers are the parts' steering of restarts and fleets.
func (p parts) steerers() steer.Steerers {
	s := steer.Steerers{Restarts: p.engine.Steerer()}
	if p.fleet != nil {
		s.Fleets = p.fleet.Steerer()
	}
	return s
}

// agentConfig wires an agent on the parts.
func (p parts) agentConfig(cfg agent.Config) agent.Config {
	cfg.Cluster, cfg.Store, cfg.Engine, cfg.Jobs = p.cluster, p.restarts, p.engine, p.cluster
	cfg.Fleets, cfg.FleetDriver, cfg.Schedules, cfg.Address = p.fleets, p.fleet, p.schedules, p.address
	if p.discovery != nil {
		cfg.Discovery = p.discovery
	}
	return cfg
}

// newCountingClient builds the agent's Nomad client with the metrics' counting transport.
// The api module sets up TLS and unix sockets only on a client it builds itself, so this
// does both as it does: TLS on the transport, and a unix:// address (the task API socket a
// Nomad job gets with a workload identity) dialled by the transport.
// maxConns (0: cluster.MaxConnsPerHost) bounds its connections to Nomad; observe, when not
// nil, hears the time of each answer (cluster.ObserveDates); timeout bounds the wait for
// each answer (cluster.Guard), which counts as a transport error when it passes.
func newCountingClient(conf *api.Config, m *agent.Metrics, maxConns int, observe func(time.Time), timeout time.Duration) (*api.Client, error) {
	tr := cluster.NewTransport()
	if maxConns > 0 {
		tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = maxConns, maxConns
	}
	address := conf.Address
	if sock, ok := strings.CutPrefix(conf.Address, "unix://"); ok {
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		conf.Address = "http://127.0.0.1"
	}
	conf.HttpClient = &http.Client{Transport: tr}
	if err := api.ConfigureTLS(conf.HttpClient, conf.TLSConfig); err != nil {
		return nil, err
	}
	conf.HttpClient.Transport = m.Transport(cluster.Guard(cluster.ObserveDates(tr, observe), address, timeout))
	return api.NewClient(conf)
}

// tokenParts returns, for each action of the agent's page, the parts on a Nomad client that
// carries exactly the token the browser sent ("" is Nomad's anonymous token), never the
// agent's -token or NOMAD_TOKEN, so the page can do nothing that token could not do with
// the CLI. The clients share one connection pool. local is the store of -state local (nil:
// the records in Nomad Variables, read and written with the token); consul and gates are
// how the page's engines reach Consul and Prometheus.
func tokenParts(cc cluster.ClientConfig, local store.Store, logger *slog.Logger, holder string, consul engine.ConsulDialer, gates engine.GatesConfig, balancers engine.BalancersConfig) (func(token string) (parts, error), error) {
	base := cc.APIConfig()
	var shared *http.Client
	if !strings.HasPrefix(base.Address, "unix://") {
		shared = &http.Client{Transport: cluster.NewTransport()}
		if err := api.ConfigureTLS(shared, base.TLSConfig); err != nil {
			return nil, usageErrorf("configuring TLS for Nomad at %s: %s; check the TLS options", base.Address, output.OneLine(err.Error()))
		}
		shared.Transport = cluster.Guard(shared.Transport, base.Address, cc.RequestTimeout)
	}
	return func(token string) (parts, error) {
		conf := cc.APIConfig()
		conf.SecretID = token
		conf.HttpClient = shared
		client, err := api.NewClient(conf)
		if err != nil {
			return parts{}, fmt.Errorf("configuring the Nomad client for %s: %w", conf.Address, err)
		}
		return buildParts(partsConfig{client: client, region: cc.Region, namespace: cc.Namespace, local: local, logger: logger, holder: "page@" + holder,
			health: engine.HealthConfig{Consul: consul}, gates: gates, balancers: balancers}), nil
	}, nil
}

// changeRollouts configures the agent's config-change rollouts (nil: off): sources are
// watched through the agent's Nomad client, and Consul keys through the Consul agent the
// CONSUL_* environment names.
func changeRollouts(on bool, client *api.Client, env func(string) string, timeout time.Duration, logger *slog.Logger) *agent.ChangeRollouts {
	if !on {
		return nil
	}
	consul := consulFlags{}.config(env)
	consul.RequestTimeout = timeout
	hub := sourcewatch.New(nomadvars.New(client, nomadvars.Options{Logger: logger}), sourcewatch.Options{Logger: logger, Consul: consul.SharedClient(true)})
	return &agent.ChangeRollouts{Sources: hub, Values: hub, Files: cluster.NewNomad(client)}
}

// nomadBackend opens sessions on a real (or simulated) Nomad through the official client.
type nomadBackend struct {
	// localDir overrides the local store's directory (tests, the demo); "" is the user's
	// state directory.
	localDir string
	// clock and timeScale are Nomad's clock and its rate for the health gate: set for a
	// simulated cluster (tests, the demo), whose clock runs faster than the local one;
	// nil: estimated from Nomad's timestamps.
	clock     health.Clock
	timeScale float64
}

func (b nomadBackend) open(cf clientFlags, logger *slog.Logger, holder string) (session, error) {
	if cf.timeoutErr != nil {
		return nil, cf.timeoutErr
	}
	cc := cluster.ClientConfig{
		Address: cf.address, Region: cf.region, Namespace: cf.namespace, Token: cf.token,
		CACert: cf.caCert, CAPath: cf.caPath, ClientCert: cf.clientCert, ClientKey: cf.clientKey,
		TLSServerName: cf.tlsServerName, Insecure: cf.insecure, RequestTimeout: cf.timeout,
	}
	hc := engine.HealthConfig{Consul: consulDialer(cf.consulConfig), Clock: b.clock, TimeScale: b.timeScale}
	if b.clock == nil {
		// Nomad's clock, estimated from the times of its answers and its timestamps.
		hc.Estimate = health.NewOffsetClock(nil)
		cc.ObserveTime = hc.Estimate.Observe
	}
	client, err := cluster.NewClient(cc)
	if err != nil {
		return nil, usageErrorf("%s; check -address and the TLS options", output.OneLine(err.Error()))
	}
	// The records get a client of their own (cluster.StoreMaxConns).
	cc.MaxConns = cluster.StoreMaxConns
	storeClient, err := cluster.NewClient(cc)
	if err != nil {
		return nil, usageErrorf("%s; check -address and the TLS options", output.OneLine(err.Error()))
	}
	cfg := partsConfig{client: client, storeClient: storeClient, region: cf.region, namespace: cf.namespace, logger: logger, holder: holder, health: hc,
		gates: gatesConfig(cf.prometheusConfig), balancers: balancersConfig(cf.prometheusConfig, cf.timeout, nil, nil), outbox: &outboxSlot{}}
	return &nomadSession{client: client, vars: nomadvars.New(client, nomadvars.Options{Logger: logger}), cfg: cfg, base: buildParts(cfg), localDir: b.localDir,
		xdgStateHome: cf.xdgStateHome, home: cf.home}, nil
}

// nomadSession is a session on one Nomad cluster: its parts on the Nomad store, built once,
// and on this machine's store when a command asks for it.
type nomadSession struct {
	client *api.Client
	// vars is the Variables layer on client, for what reads variables outside the stores
	// (the -state auto probe, the watches command's hub).
	vars     *nomadvars.Client
	cfg      partsConfig
	base     parts
	localDir string
	// xdgStateHome and home place the local store when localDir is "" (clientFlags).
	xdgStateHome, home string

	once     sync.Once
	local    store.Store
	localErr error
}

func (s *nomadSession) address() string { return s.base.address }

func (s *nomadSession) reachable(ctx context.Context) error {
	err := cluster.Reachable(ctx, s.client)
	if err == nil {
		return nil
	}
	return output.Flat(err)
}

func (s *nomadSession) probeNomad(ctx context.Context, namespace, job string) error {
	return nomadstore.Probe(ctx, s.vars, namespace, job)
}

// nomadStore is the Nomad Variables store of this session.
func (s *nomadSession) nomadStore() store.Store { return s.base.restarts }

func (s *nomadSession) localStore() (store.Store, error) {
	s.once.Do(func() {
		dir := s.localDir
		if dir == "" {
			dir, s.localErr = localstore.DefaultDir(s.xdgStateHome, s.home)
			if s.localErr != nil {
				return
			}
		}
		s.local, s.localErr = localstore.New(dir)
	})
	if s.localErr != nil {
		return nil, s.localErr
	}
	// The local store holds records of every cluster this user drives: scope it to this
	// one, so a restart is never listed or resumed against another cluster.
	return store.ScopeToCluster(s.local, store.ClusterName(s.address())), nil
}

// engine is the engine of st: the session's own on its Nomad store, else one built on st.
func (s *nomadSession) engine(st store.Store) restarter {
	if st == s.base.restarts {
		return engineAdapter{e: s.base.engine}
	}
	cfg := s.cfg
	cfg.local = st
	return engineAdapter{e: buildParts(cfg).engine}
}

func (s *nomadSession) fleetStore() store.Fleets { return s.base.fleets }

func (s *nomadSession) jobLister() fleetrun.Lister { return s.base.cluster }

func (s *nomadSession) schedules() *schedule.Store { return s.base.schedules }

// maxFleetFeeds caps the event streams one process holds for a fleet's children, whatever
// -max-parallel-jobs says: each is a long-lived connection to Nomad.
const maxFleetFeeds = 24

// fleetDriver is a fleet driver whose engine holds up to maxFeeds event streams at once
// and, with driveChildren, drives the fleet's children in this process: their drivers then
// follow their steering on one shared listing per namespace, as the agent's do (a blocking
// read per child would hold a connection each, and -max-parallel-jobs of them would starve
// the records' pool, and the fleet's lease renewals with it).
func (s *nomadSession) fleetDriver(maxFeeds int, driveChildren bool) *fleetrun.Driver {
	cfg := s.cfg
	cfg.maxFeeds, cfg.driveChildren, cfg.sharedWatch = min(max(maxFeeds, 1), maxFleetFeeds), driveChildren, driveChildren
	return buildParts(cfg).fleet
}

// sourceHub is a hub of sourcewatch on the session's Nomad client, through which watches
// reads the sources of config-change rollouts as the agent watches them.
func (s *nomadSession) sourceHub(opts sourcewatch.Options) *sourcewatch.Hub {
	return sourcewatch.New(s.vars, opts)
}

func (s *nomadSession) notifySinks(ctx context.Context, setup notifySetup) (map[string]deliver.Sink, error) {
	if !setup.any() {
		return nil, nil
	}
	return buildSinks(ctx, setup, s.vars, s.cfg.namespace)
}

func (s *nomadSession) startOutbox(ctx context.Context, setup notifySetup, sinks map[string]deliver.Sink, st store.Store) *deliver.Outbox {
	if len(sinks) == 0 {
		return nil
	}
	o := deliver.New(ctx, outboxConfig(setup, sinks, st, s.base, s.cfg.logger))
	s.cfg.outbox.set(o)
	return o
}

// outboxConfig is the outbox of setup's sinks on the records of st (and the parts'
// fleets), reading jobs' meta through the parts' cluster.
func outboxConfig(setup notifySetup, sinks map[string]deliver.Sink, st store.Store, p parts, logger *slog.Logger) deliver.Config {
	jobs := p.cluster
	return deliver.Config{Notify: setup.cfg, Sinks: sinks, Restarts: st, Fleets: p.fleets, Logger: logger, Note: p.engine.Note,
		JobMeta: func(ctx context.Context, namespace, job string) (map[string]string, error) {
			spec, err := jobs.JobSpec(ctx, namespace, job)
			if err != nil {
				return nil, err
			}
			return spec.Meta, nil
		}}
}

// jobCluster is the session's Nomad, for commands that read jobs only (watches).
func (s *nomadSession) jobCluster() *cluster.Nomad { return s.base.cluster }
