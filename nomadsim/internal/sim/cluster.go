// Package sim is nomadsim's simulated cluster: its state, as Nomad's servers and clients
// hold it, and what moves it (the scheduler, the clients running tasks on a simulated
// clock, deployments, services and their checks, templates, faults) with the accounting of
// requests. Its HTTP API, nomadsim/internal/httpapi, stands over it: the handlers read and
// change the state under Cluster.Mu, as Nomad's endpoints run their RPCs; nothing here
// knows of them.
package sim

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
)

// Options configure a simulated cluster. The zero value is a usable two-datacenter cluster.
type Options struct {
	Region             string   // default "global"
	Datacenters        []string // default {"dc1", "dc2"}
	NodesPerDatacenter int      // default 2
	// TimeScale is simulated seconds per real second (default 1): 20 makes a 5 s kill
	// timeout take 250 ms of real time.
	TimeScale float64
	// Seed drives every random choice (IDs, placement ties, fault rates, jitter).
	Seed int64
	// ACLs enforces ACL tokens on every endpoint.
	ACLs bool
	// Addr is the Nomad HTTP listener's address, default "127.0.0.1:0".
	Addr string
	// ConsulAddr is the Consul HTTP listener's address, default "127.0.0.1:0".
	ConsulAddr string
	// ConsulDNSAddr is where Consul's DNS interface listens, UDP and TCP on one port,
	// default "127.0.0.1:0".
	ConsulDNSAddr string
	// ScaleLockTTL runs variable lock TTLs and lock delays on the simulated clock. By
	// default they run in real time, because real clients renew on their own wall clock
	// (the api's LockLeaser renews at TTL/2 of real time): scaled TTLs would expire every
	// lease at high time scales. Cluster.ExpireLock frees a dead holder's lock sooner.
	ScaleLockTTL bool
	// AllocSyncInterval is how often a simulated client sends its allocations' changes to
	// the servers, in simulated time: 0 is Nomad's allocSyncIntv (200ms); negative makes
	// client changes visible to server reads at once (an unfaithful shortcut).
	AllocSyncInterval time.Duration
	// MaxConnsPerClient is the agent's limits.http_max_conns_per_client: how many TCP
	// connections one client IP may hold open on the Nomad listener at once (idle
	// keep-alive ones included); the next is answered 429 and closed, as Nomad does. 0 is
	// no limit (Nomad's default is 100: cmd/nomadsim uses that); negative is an error. The
	// Consul listener is never limited.
	MaxConnsPerClient int
	// ServeInstances backs each running allocation's service ports with a real HTTP
	// listener on 127.0.0.1, registered (address and port) in Nomad's service table and in
	// Consul in place of the node's address and a made-up port, so that a load balancer
	// reading either catalog reaches the simulated workload: it answers 200 while its
	// process runs and its checks' scripts pass, and refuses connections otherwise (see
	// the package documentation). Listeners close with the cluster.
	ServeInstances bool
	// JobMaxCount is the servers' job_max_count as their configuration sets it: nil leaves
	// it unset, and Nomad's default (50000) applies; 0 is no limit. The job scale, register
	// and plan endpoints refuse a job whose groups' counts add up to more, with Nomad's
	// status and text; /v1/agent/self shows it as a real server does (Server.JobMaxCount,
	// null when unset).
	JobMaxCount *int
	// Logger receives the simulation's logs; nil discards them.
	Logger *slog.Logger
}

func (o *Options) defaults() {
	if o.Region == "" {
		o.Region = "global"
	}
	if len(o.Datacenters) == 0 {
		o.Datacenters = []string{"dc1", "dc2"}
	}
	if o.NodesPerDatacenter <= 0 {
		o.NodesPerDatacenter = 2
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.ConsulAddr == "" {
		o.ConsulAddr = "127.0.0.1:0"
	}
	if o.ConsulDNSAddr == "" {
		o.ConsulDNSAddr = "127.0.0.1:0"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Cluster is a running simulated Nomad cluster. All its methods are safe for concurrent use.
type Cluster struct {
	Options Options
	log     *slog.Logger
	Clock   clock
	Index   *index.Index

	// Mu guards every field below it: the whole simulated state, like Nomad's state store
	// behind one Raft log.
	Mu             stateLock
	closed         bool
	rng            *rand.Rand // IDs and simulation choices
	faultRng       *rand.Rand // fault error rates, apart so that faults do not shift IDs
	jitterRng      *rand.Rand // blocking-query jitter, apart for the same reason
	tmplRng        *rand.Rand // template re-render delays and splays, apart for the same reason
	tables         map[string]uint64
	Jobs           map[JobKey]*JobEntry
	Allocs         map[string]*AllocRun
	Evals          map[string]*api.Evaluation
	Deployments    map[string]*api.Deployment
	NodeList       []*simNode
	NodeByID       map[string]*simNode
	Namespaces     map[string]*api.Namespace
	failStarts     map[failKey]int
	leaderUntil    time.Time // real time until which the leader is lost
	stats          map[statKey]*EndpointStats
	mutations      int64
	faults         []*faultEntry
	faultSeq       int
	Events         *broker
	pending        []pendingEvent // events raised during the current hold of mu
	pendingIdx     map[string]int // topic/key -> position in pending
	Ext            extensions
	ServicesByName map[string]map[string]*svcReg // namespace + "\x00" + service name -> ID -> registration
	instPorts      map[int]bool                  // ports held by instances (Options.ServeInstances)

	unblockArmed   bool
	checkOverrides map[JobKey]map[string]checkScript
	depPending     map[string]bool // deployments whose watcher run is scheduled

	statsMu sync.Mutex // guards stats and mutations (recorded outside mu)

	timers *timerQueue
	instWG sync.WaitGroup // instances' listeners serving
}

// Region is the cluster's region.
func (c *Cluster) Region() string { return c.Options.Region }

// Now is the simulated clock's current time.
func (c *Cluster) Now() time.Time { return c.Clock.Now() }

// TimeScale is the number of simulated seconds per real second.
func (c *Cluster) TimeScale() float64 { return c.Options.TimeScale }

// RealDuration converts a simulated duration into the real time it takes.
func (c *Cluster) RealDuration(d time.Duration) time.Duration { return c.Clock.Real(d) }

// after runs fn under c.Mu once the simulated duration d has passed, unless the cluster
// has closed by then. Callbacks run one at a time, in order of due time.
func (c *Cluster) after(d time.Duration, fn func()) {
	c.timers.add(time.Now().Add(c.Clock.Real(d)), fn)
}

// Bump allocates the next Raft index and records it as the index of the given tables.
// Callers hold c.Mu.
func (c *Cluster) Bump(tables ...string) uint64 {
	i := c.Index.Next()
	for _, t := range tables {
		c.tables[t] = i
	}
	return i
}

// TableIndex is the highest index of the given tables. Callers hold c.Mu.
func (c *Cluster) TableIndex(tables ...string) uint64 {
	var m uint64
	for _, t := range tables {
		if v := c.tables[t]; v > m {
			m = v
		}
	}
	return m
}

func (c *Cluster) NowNano() int64 { return c.Clock.Now().UnixNano() }

// Jitter draws blocking-query jitter from the seeded generator.
func (c *Cluster) Jitter(n int64) int64 {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return c.jitterRng.Int64N(n)
}
