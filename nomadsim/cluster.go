package nomadsim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/miekg/dns"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/httpapi"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

// Options configure a simulated cluster. The zero value is a usable two-datacenter cluster.
type Options = sim.Options

// Fault describes injected misbehaviour of matching requests (Cluster.SetFault).
type Fault = sim.Fault

// Stats is the cluster's request accounting since start or the last ResetStats.
type Stats = sim.Stats

// EndpointStats counts the requests one route received with one method.
type EndpointStats = sim.EndpointStats

// Cluster is a running simulated Nomad cluster: its state (internal/sim) served on Nomad's
// HTTP API (internal/httpapi) and Consul's. All its methods are safe for concurrent use.
type Cluster struct {
	sim    *sim.Cluster
	log    *slog.Logger
	cancel context.CancelFunc
	conns  *connLimiter // the Nomad listener's connections per client

	listener, consulListener net.Listener
	srv, consulSrv           *http.Server
	dnsUDP, dnsTCP           *dns.Server
	wg                       sync.WaitGroup
}

// Start builds a cluster and serves its HTTP APIs until ctx ends or Close is called.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	state, err := sim.New(opts)
	if err != nil {
		return nil, err
	}
	opts = state.Options // with their defaults
	ctx, cancel := context.WithCancel(ctx)
	c := &Cluster{
		sim:    state,
		log:    opts.Logger,
		cancel: cancel,
		conns:  newConnLimiter(opts.MaxConnsPerClient, opts.Logger),
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("nomadsim: listen on %s: %w", opts.Addr, err)
	}
	cln, err := net.Listen("tcp", opts.ConsulAddr)
	if err != nil {
		_ = ln.Close()
		cancel()
		return nil, fmt.Errorf("nomadsim: listen for consul on %s: %w", opts.ConsulAddr, err)
	}
	c.listener, c.consulListener = ln, cln
	if c.dnsUDP, c.dnsTCP, err = listenDNS(opts.ConsulDNSAddr, state.ConsulDNS()); err != nil {
		_ = ln.Close()
		_ = cln.Close()
		cancel()
		return nil, err
	}
	c.srv = &http.Server{Handler: httpapi.Handler(ctx, state), BaseContext: func(net.Listener) context.Context { return ctx }, ReadHeaderTimeout: 10 * time.Second,
		ConnState: c.conns.connState}
	c.consulSrv = &http.Server{Handler: state.ConsulHandler(), BaseContext: func(net.Listener) context.Context { return ctx }, ReadHeaderTimeout: 10 * time.Second}
	c.wg.Add(6)
	go func() { defer c.wg.Done(); _ = c.dnsUDP.ActivateAndServe() }()
	go func() { defer c.wg.Done(); _ = c.dnsTCP.ActivateAndServe() }()
	go func() { defer c.wg.Done(); state.RunTimers(ctx) }()
	go func() { defer c.wg.Done(); c.serve(c.srv, ln) }()
	go func() { defer c.wg.Done(); c.serve(c.consulSrv, cln) }()
	go func() {
		defer c.wg.Done()
		<-ctx.Done()
		c.shutdown()
	}()
	c.log.Info("nomadsim started", "addr", c.Addr(), "consul", c.ConsulAddr(), "nodes", len(state.Nodes()))
	return c, nil
}

func (c *Cluster) serve(srv *http.Server, ln net.Listener) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		c.log.Error("nomadsim: serve", "err", err)
	}
}

func (c *Cluster) shutdown() {
	c.sim.Shutdown()
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.srv.Shutdown(sctx)
	_ = c.consulSrv.Shutdown(sctx)
	_ = c.srv.Close()
	_ = c.consulSrv.Close()
	_ = c.dnsUDP.Shutdown()
	_ = c.dnsTCP.Shutdown()
}

// listenDNS listens for Consul's DNS interface on addr, UDP and TCP on the same port (a
// free one for port 0: a few tries, since the TCP port may be taken).
func listenDNS(addr string, h dns.Handler) (*dns.Server, *dns.Server, error) {
	var lastErr error
	for range 10 {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("nomadsim: listen for consul's DNS on %s: %w", addr, err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			_ = pc.Close()
			lastErr = err
			continue
		}
		return &dns.Server{PacketConn: pc, Handler: h}, &dns.Server{Listener: ln, Handler: h}, nil
	}
	return nil, nil, fmt.Errorf("nomadsim: listen for consul's DNS on %s over TCP too: %w", addr, lastErr)
}

// ConsulDNSAddr is Consul's DNS interface, host:port (UDP and TCP), for a resolver.
func (c *Cluster) ConsulDNSAddr() string { return c.dnsUDP.PacketConn.LocalAddr().String() }

// Close stops serving and all simulated activity. It is safe to call more than once.
func (c *Cluster) Close() error {
	c.cancel()
	c.wg.Wait()
	return nil
}

// Addr is the Nomad HTTP API's base URL, like "http://127.0.0.1:4646".
func (c *Cluster) Addr() string { return "http://" + c.listener.Addr().String() }

// ConsulAddr is the Consul HTTP API's base URL.
func (c *Cluster) ConsulAddr() string { return "http://" + c.consulListener.Addr().String() }

// APIClient returns an official Nomad API client pointed at the cluster, using token
// (empty for none).
func (c *Cluster) APIClient(token string) (*api.Client, error) {
	cfg := api.DefaultConfig()
	cfg.Address = c.Addr()
	cfg.SecretID = token
	cfg.Region = ""
	cfg.Namespace = ""
	cl, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("nomadsim: api client: %w", err)
	}
	return cl, nil
}

// ConnStats returns the accounting of the Nomad listener's connections per client.
func (c *Cluster) ConnStats() ConnStats { return c.conns.stats() }

// ResetConnStats zeroes Refused and Answered429 and restarts PeakPerClient from the
// connections open now. ResetStats does not touch them.
func (c *Cluster) ResetConnStats() { c.conns.reset() }

// What follows is the state's Go API, for tests and the demo: faults, nodes, jobs and the
// waits on them, checks, templates, Consul's KV store, ACL tokens and the accounting.

// Region is the cluster's region.
func (c *Cluster) Region() string { return c.sim.Region() }

// Now is the simulated clock's current time.
func (c *Cluster) Now() time.Time { return c.sim.Now() }

// TimeScale is the number of simulated seconds per real second.
func (c *Cluster) TimeScale() float64 { return c.sim.TimeScale() }

// RealDuration converts a simulated duration into the real time it takes.
func (c *Cluster) RealDuration(d time.Duration) time.Duration { return c.sim.RealDuration(d) }

// ConsulKVPut sets a key of the simulated Consul's KV store, as PUT /v1/kv/<key> on
// ConsulAddr does (flags 0): a test's way to give a key a value without an HTTP client.
func (c *Cluster) ConsulKVPut(key, value string) { c.sim.ConsulKVPut(key, value) }

// ConsulKVGet returns a key's value in the simulated Consul's KV store and whether it exists.
func (c *Cluster) ConsulKVGet(key string) (string, bool) { return c.sim.ConsulKVGet(key) }

// ExpireLock ends the TTL of the lock held on the variable at path now, as if its holder
// had died and stopped renewing: the lock is released after its lock delay (on the lock
// clock: real time unless Options.ScaleLockTTL). It reports whether a lock's TTL was
// running. An empty namespace is "default".
func (c *Cluster) ExpireLock(namespace, path string) bool { return c.sim.ExpireLock(namespace, path) }

// BootstrapToken is the management token's secret when ACLs are on ("" otherwise).
func (c *Cluster) BootstrapToken() string { return c.sim.BootstrapToken() }

// CreateToken creates a client token with one policy per entry (policy name to HCL rules)
// and returns its secret.
func (c *Cluster) CreateToken(name string, policyRules map[string]string) (string, error) {
	return c.sim.CreateToken(name, policyRules)
}

// SetFault installs a fault and returns a function that removes it.
func (c *Cluster) SetFault(f Fault) (remove func()) { return c.sim.SetFault(f) }

// LoseLeader makes the cluster leaderless for the simulated duration d: every server
// request answers 500 "No cluster leader" and X-Nomad-KnownLeader is false.
func (c *Cluster) LoseLeader(d time.Duration) { c.sim.LoseLeader(d) }

// FailTaskStarts makes the next n starts of the task (in any allocation of the job) fail
// with a Driver Failure event; the restart policy then applies.
func (c *Cluster) FailTaskStarts(namespace, jobID, task string, n int) {
	c.sim.FailTaskStarts(namespace, jobID, task, n)
}

// RegisterJob registers (or updates) a job as the jobs endpoint does and returns the
// evaluation's ID.
func (c *Cluster) RegisterJob(job *api.Job) (string, error) { return c.sim.RegisterJob(job) }

// WaitJobRunning waits until every allocation the job wants is running (for batch and
// sysbatch jobs: running or complete) as the servers see it, none is pending, and the
// job's latest deployment, if any, is over (or waits only for a manual promotion of its
// Nomad's job restart refuses to run during a deployment. A canary deployment that waits
// for a manual promotion never ends, nor do the canaries' old allocations move to the new
// version: WaitJobRunning waits for ctx then.
func (c *Cluster) WaitJobRunning(ctx context.Context, namespace, jobID string) error {
	return c.sim.WaitJobRunning(ctx, namespace, jobID)
}

// WaitAllocsRunning waits, as WaitJobRunning does, for the job's allocations to run as
// the servers see them, without waiting for its deployment to end: for tests of
// deployments themselves, or of checks that keep a deployment from ending.
func (c *Cluster) WaitAllocsRunning(ctx context.Context, namespace, jobID string) error {
	return c.sim.WaitAllocsRunning(ctx, namespace, jobID)
}

// WaitDeploymentDone waits until no deployment of the job is running, paused or pending.
func (c *Cluster) WaitDeploymentDone(ctx context.Context, namespace, jobID string) error {
	return c.sim.WaitDeploymentDone(ctx, namespace, jobID)
}

// Nodes lists the cluster's nodes as the node list endpoint does.
func (c *Cluster) Nodes() []*api.NodeListStub { return c.sim.Nodes() }

// AddNode adds a ready, eligible node to datacenter dc and returns its ID. Blocked
// evaluations are retried, as Nomad unblocks them when capacity appears.
func (c *Cluster) AddNode(dc string) string { return c.sim.AddNode(dc) }

// SetNodeEligibility marks a node eligible or ineligible for new placements.
func (c *Cluster) SetNodeEligibility(nodeID string, eligible bool) {
	c.sim.SetNodeEligibility(nodeID, eligible)
}

// DownNode marks a node down: its allocations become lost and are replaced elsewhere per
// Nomad's rules (system allocations are not replaced).
func (c *Cluster) DownNode(nodeID string) { c.sim.DownNode(nodeID) }

// UpNode brings a down node back to ready: system jobs are evaluated for it and blocked
// evaluations retried, as when a Nomad client reconnects.
func (c *Cluster) UpNode(nodeID string) { c.sim.UpNode(nodeID) }

// ScriptCheck overrides, from now on, the script of the named check in every allocation of
// the job (see the package documentation for scripts; "" removes the override). Check
// results restart their clock at the override: pass_after=3s passes 3 s after this call
// for tasks already running.
func (c *Cluster) ScriptCheck(namespace, jobID, check, script string) {
	c.sim.ScriptCheck(namespace, jobID, check, script)
}

// Stats returns a snapshot of the request accounting.
func (c *Cluster) Stats() Stats { return c.sim.Stats() }

// ResetStats zeroes the request accounting.
func (c *Cluster) ResetStats() { c.sim.ResetStats() }

// RerenderTemplates changes the content of the job's templates whose destination (as the
// job writes it, like "local/app.conf") is destination, or of all its templates when
// destination is "", in every allocation whose client runs them, as if their data had
// changed: each allocation's templates are re-rendered together after a delay of its own,
// drawn uniformly from [0, spread) of simulated time, and their change modes then apply as
// on a real client. It returns how many templates (one per allocation and task) were
// scheduled. Templates with once = true are never re-rendered. An empty namespace is
// "default".
func (c *Cluster) RerenderTemplates(namespace, jobID, destination string, spread time.Duration) int {
	return c.sim.RerenderTemplates(namespace, jobID, destination, spread)
}

// RerenderAllocTemplate changes the content of the template of the allocation's task whose
// destination is destination (as the job writes it) and re-renders it at once; its change
// mode then applies as on a real client. It fails if there is no such template or the
// task's template manager does not run (the allocation is not running on its client, or
// the task has not started or is dead).
func (c *Cluster) RerenderAllocTemplate(allocID, task, destination string) error {
	return c.sim.RerenderAllocTemplate(allocID, task, destination)
}
