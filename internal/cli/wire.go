package cli

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

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
	cc := cluster.ClientConfig{
		Address: cf.address, Region: cf.region, Namespace: cf.namespace, Token: cf.token,
		CACert: cf.caCert, CAPath: cf.caPath, ClientCert: cf.clientCert, ClientKey: cf.clientKey,
		TLSServerName: cf.tlsServerName, Insecure: cf.insecure,
	}
	hc := engine.HealthConfig{Consul: cf.consulConfig, Clock: b.clock, TimeScale: b.timeScale}
	if b.clock == nil {
		// Nomad's clock, estimated from the times of its answers and its timestamps.
		hc.Estimate = health.NewOffsetClock(nil)
		cc.ObserveTime = hc.Estimate.Observe
	}
	client, err := cluster.NewClient(cc)
	if err != nil {
		return nil, usageErrorf("%s; check -address and the TLS options", oneLine(err.Error()))
	}
	// The records get a client of their own (cluster.StoreMaxConns).
	cc.MaxConns = cluster.StoreMaxConns
	storeClient, err := cluster.NewClient(cc)
	if err != nil {
		return nil, usageErrorf("%s; check -address and the TLS options", oneLine(err.Error()))
	}
	return &nomadSession{client: client, storeClient: storeClient, cluster: cluster.NewNomad(client), logger: logger, holder: holder,
		localDir: b.localDir, health: hc}, nil
}

// nomadSession is a session on one Nomad client.
type nomadSession struct {
	client *api.Client
	// storeClient is client with a connection pool of its own, for the record store.
	storeClient *api.Client
	cluster     *cluster.Nomad
	logger      *slog.Logger
	holder      string
	localDir    string
	health      engine.HealthConfig

	once     sync.Once
	local    store.Store
	localErr error

	nomadOnce sync.Once
	nomad     store.Store

	fleetsOnce sync.Once
	fleets     store.Fleets
}

func (s *nomadSession) address() string { return s.client.Address() }

func (s *nomadSession) reachable(ctx context.Context) error {
	err := cluster.Reachable(ctx, s.client)
	if err == nil {
		return nil
	}
	return errors.New(oneLine(err.Error()))
}

func (s *nomadSession) localStore() (store.Store, error) {
	s.once.Do(func() {
		dir := s.localDir
		if dir == "" {
			dir, s.localErr = store.DefaultLocalDir()
			if s.localErr != nil {
				return
			}
		}
		s.local, s.localErr = store.NewLocal(dir)
	})
	if s.localErr != nil {
		return nil, s.localErr
	}
	// The local store holds records of every cluster this user drives: scope it to this
	// one, so a restart is never listed or resumed against another cluster.
	return store.ScopeToCluster(s.local, store.ClusterName(s.client.Address())), nil
}

func (s *nomadSession) engine(st store.Store) restarter {
	return engineAdapter{e: engine.New(engine.Config{Cluster: s.cluster, Store: st, Logger: s.logger, Holder: s.holder, Health: s.health})}
}

// engineAdapter maps the engine's API onto the commands' restarter.
type engineAdapter struct{ e *engine.Engine }

func (a engineAdapter) Plan(ctx context.Context, namespace, job string, spec restart.Spec) (*planned, error) {
	p, err := a.e.Plan(ctx, engine.Request{Namespace: namespace, Job: job, Spec: spec})
	if err != nil {
		return nil, err
	}
	// -surge refusals (job type, scaling policy) come before anything is recorded.
	if err := a.e.CheckSurge(ctx, p); err != nil {
		return nil, err
	}
	out := &planned{Record: p.Record, Job: p.Job}
	for _, s := range p.Skipped {
		out.Skipped = append(out.Skipped, skippedAlloc{Alloc: s.Alloc, Reason: s.Reason})
	}
	return out, nil
}

func (a engineAdapter) Create(ctx context.Context, rec *restart.Record) error {
	return a.e.Create(ctx, rec)
}
