package sim

import (
	"fmt"
	"math/rand/v2"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
)

// A cluster's life: New builds its state, Shutdown ends what outlives a request.

// New builds a cluster's state from opts, which it completes with their defaults. Its
// timers run once RunTimers runs; Shutdown ends what it serves beside the HTTP APIs.
func New(opts Options) (*Cluster, error) {
	opts.defaults()
	if opts.MaxConnsPerClient < 0 {
		return nil, fmt.Errorf("nomadsim: MaxConnsPerClient must be >= 0 (0 for no limit), not %d", opts.MaxConnsPerClient)
	}
	if m := opts.JobMaxCount; m != nil && *m < 0 {
		// Nomad's agent refuses to start with it.
		return nil, fmt.Errorf("nomadsim: job_max_count (%d) cannot be negative", *m)
	}
	c := &Cluster{
		Options:        opts,
		log:            opts.Logger,
		Clock:          newClock(opts.TimeScale),
		Index:          index.New(0),
		rng:            rand.New(rand.NewPCG(uint64(opts.Seed), uint64(opts.Seed)^0x9e3779b97f4a7c15)),
		faultRng:       rand.New(rand.NewPCG(uint64(opts.Seed)+1, uint64(opts.Seed)^0x51afd7ed558ccd)),
		jitterRng:      rand.New(rand.NewPCG(uint64(opts.Seed)+2, uint64(opts.Seed)^0xc4ceb9fe1a85ec53)),
		tmplRng:        rand.New(rand.NewPCG(uint64(opts.Seed)+3, uint64(opts.Seed)^0x2545f4914f6cdd1d)),
		tables:         map[string]uint64{},
		Jobs:           map[JobKey]*JobEntry{},
		Allocs:         map[string]*AllocRun{},
		Evals:          map[string]*api.Evaluation{},
		Deployments:    map[string]*api.Deployment{},
		NodeByID:       map[string]*simNode{},
		Namespaces:     map[string]*api.Namespace{},
		failStarts:     map[failKey]int{},
		ServicesByName: map[string]map[string]*svcReg{},
		instPorts:      map[int]bool{},
		depPending:     map[string]bool{},
		checkOverrides: map[JobKey]map[string]checkScript{},
		stats:          map[statKey]*EndpointStats{},
	}
	c.Events = newBroker()
	c.Mu.onUnlock = c.flushEvents
	c.pendingIdx = map[string]int{}
	c.timers = newTimerQueue()
	c.Mu.Lock()
	c.bootstrap()
	c.Mu.Unlock()
	if err := c.initExtensions(); err != nil {
		return nil, err
	}
	return c, nil
}

// Shutdown ends the simulated activity that outlives a request: no callback runs after it,
// the instances' listeners close, and the event streams, variables and Consul's catalog
// end theirs.
func (c *Cluster) Shutdown() {
	c.Mu.Lock()
	c.closed = true
	c.Mu.Unlock()
	c.closeInstances()
	c.Events.close()
	c.Ext.Vars.Close()
	c.Ext.catalog.Close()
}
