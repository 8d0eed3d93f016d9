package sim

import (
	"strings"
	"time"
)

// Fault describes injected misbehaviour of matching requests. Method empty matches every
// method; Path is a route pattern ("/v1/job/:id/allocations") or a path prefix
// ("/v1/job/"). Each matching request, with probability ErrorRate (1 when zero and Status
// is set), is answered Status with Body (default Nomad-like text), or its connection is
// dropped when Drop is set. Latency delays every matching request (real time).
type Fault struct {
	Method    string
	Path      string
	ErrorRate float64
	Status    int
	Body      string
	Latency   time.Duration
	Drop      bool
}

type faultEntry struct {
	id int
	f  Fault
}

// SetFault installs a fault and returns a function that removes it.
func (c *Cluster) SetFault(f Fault) (remove func()) {
	c.Mu.Lock()
	c.faultSeq++
	e := &faultEntry{id: c.faultSeq, f: f}
	c.faults = append(c.faults, e)
	c.Mu.Unlock()
	return func() {
		c.Mu.Lock()
		defer c.Mu.Unlock()
		for i, x := range c.faults {
			if x == e {
				c.faults = append(c.faults[:i], c.faults[i+1:]...)
				return
			}
		}
	}
}

// LoseLeader makes the cluster leaderless for the simulated duration d: every server
// request answers 500 "No cluster leader" and X-Nomad-KnownLeader is false.
func (c *Cluster) LoseLeader(d time.Duration) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	c.leaderUntil = time.Now().Add(c.Clock.Real(d))
}

func (c *Cluster) LeaderLost() bool {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	return time.Now().Before(c.leaderUntil)
}

// FaultFor decides the fault applying to a request: latency to wait, and whether (and how)
// to fail it. The random draw uses the seeded generator.
func (c *Cluster) FaultFor(method, route, path string) (latency time.Duration, fail *Fault) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	for _, e := range c.faults {
		f := e.f
		if f.Method != "" && !strings.EqualFold(f.Method, method) {
			continue
		}
		if f.Path != "" && f.Path != route && !strings.HasPrefix(path, f.Path) {
			continue
		}
		if f.Latency > latency {
			latency = f.Latency
		}
		if fail != nil || (f.Status == 0 && !f.Drop) {
			continue
		}
		rate := f.ErrorRate
		if rate == 0 {
			rate = 1
		}
		if rate >= 1 || c.faultRng.Float64() < rate {
			ff := f
			fail = &ff
		}
	}
	return latency, fail
}

// failKey names a task whose next starts fail.
type failKey struct{ ns, job, task string }

// FailTaskStarts makes the next n starts of the task (in any allocation of the job) fail
// with a Driver Failure event; the restart policy then applies.
func (c *Cluster) FailTaskStarts(namespace, jobID, task string, n int) {
	if namespace == "" {
		namespace = "default"
	}
	c.Mu.Lock()
	defer c.Mu.Unlock()
	c.failStarts[failKey{namespace, jobID, task}] += n
}

func (c *Cluster) takeFailStart(ar *AllocRun, task string) bool {
	k := failKey{ar.Alloc.Namespace, ar.Alloc.JobID, task}
	if c.failStarts[k] <= 0 {
		return false
	}
	c.failStarts[k]--
	return true
}
