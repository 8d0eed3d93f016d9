package sim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Instances that answer (Options.ServeInstances): each port label an allocation's services
// use is backed by a real HTTP listener on 127.0.0.1, the address and port registered for
// those services in Nomad's service table and in Consul, so that a load balancer reading
// either catalog reaches the simulated workload. Every method runs with c.Mu held, except
// ServeHTTP.

// instanceHost is the address instances listen on and are registered under.
const instanceHost = "127.0.0.1"

// Instances' ports are drawn from below every common ephemeral range (Linux's starts at
// 32768, Windows' and macOS's at 49152): a port an instance gives up while its process is
// down is then not taken by the source port of some outgoing connection before the
// instance listens on it again.
const (
	InstancePortMin = 20000
	InstancePortMax = 32768
)

// instance is the workload behind one port label of an allocation.
type instance struct {
	allocID string
	label   string
	port    int
	// ready says whether the workload answers 200; it is read by the listener's handler
	// without c.Mu.
	ready atomic.Bool
	// badPermille is the share of requests answered 500, in thousandths (the workload
	// loaded a bad value); read by the handler without c.Mu.
	badPermille atomic.Int64
	srv         *http.Server // listening while non-nil
	// next is the simulated moment of the re-evaluation armed for the next change of the
	// checks' scripts (zero: none armed).
	next time.Time
}

// ServeHTTP answers as the simulated workload: 200 while its process runs and its checks'
// scripts pass, 503 for a request that reached it as it went down.
func (in *instance) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("X-Nomadsim-Alloc", in.allocID)
	if !in.ready.Load() {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	if p := in.badPermille.Load(); p > 0 && rand.Int64N(1000) < p {
		http.Error(w, "bad configuration", http.StatusInternalServerError)
		return
	}
	_, _ = fmt.Fprintf(w, "ok %s %s\n", in.allocID, in.label)
}

// makeInstances reserves a port for every port label the allocation's services use, when
// the cluster serves instances. The port stays the allocation's until it ends, as Nomad
// keeps an allocation's ports through in-place restarts.
func (ar *AllocRun) makeInstances() {
	c := ar.c
	if !c.Options.ServeInstances || ar.insts != nil {
		return
	}
	ar.insts = map[string]*instance{}
	add := func(svc *api.Service) {
		if svc == nil || svc.PortLabel == "" || ar.insts[svc.PortLabel] != nil {
			return
		}
		port, err := c.reservePort()
		if err != nil {
			c.log.Error("nomadsim: no port for an instance", "alloc", ar.Alloc.ID, "port", svc.PortLabel, "err", err)
			return
		}
		ar.insts[svc.PortLabel] = &instance{allocID: ar.Alloc.ID, label: svc.PortLabel, port: port}
	}
	ar.eachService(func(_ *taskRun, svc *api.Service) { add(svc) })
}

// reservePort finds a port of 127.0.0.1 free now and not held by another instance of the
// cluster. It draws from the process's random source, not the cluster's seeded one, so
// that serving instances changes no simulated choice.
func (c *Cluster) reservePort() (int, error) {
	for range 100 {
		p := InstancePortMin + rand.IntN(InstancePortMax-InstancePortMin)
		if c.instPorts[p] {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(instanceHost, strconv.Itoa(p)))
		if err != nil {
			continue
		}
		_ = ln.Close()
		c.instPorts[p] = true
		return p, nil
	}
	return 0, fmt.Errorf("no free port of %s in [%d, %d) after 100 tries", instanceHost, InstancePortMin, InstancePortMax)
}

// syncInstances opens or closes each instance's listener for the workload as it is now,
// and arms a re-evaluation for the next moment a check's script changes its answer.
func (ar *AllocRun) syncInstances() {
	if len(ar.insts) == 0 {
		return
	}
	c := ar.c
	now := c.Clock.Now()
	for _, label := range slices.Sorted(maps.Keys(ar.insts)) {
		in := ar.insts[label]
		ready, next := ar.instanceReady(label, now)
		in.badPermille.Store(int64(ar.badShare(label) * 1000))
		c.setInstance(in, ready)
		if next.Equal(in.next) {
			continue
		}
		in.next = next
		if next.IsZero() {
			continue
		}
		c.after(next.Sub(now), func() {
			if in.next.Equal(next) && ar.insts[label] == in {
				in.next = time.Time{}
				ar.syncInstances()
			}
		})
	}
}

// instanceReady judges the workload behind a port label at now, as the check scripts do:
// ready while the process of every service on the port runs (for group services: every
// main task) and each of their checks' scripts passes, counted from the process's last
// start. A service without checks is ready while it runs. It also returns the next moment
// a script changes its answer (zero if none will). Unlike registration, readiness follows
// the process, not the allocation's state: a process keeps answering through a shutdown
// delay and until it exits, whatever the catalog says.
func (ar *AllocRun) instanceReady(label string, now time.Time) (bool, time.Time) {
	ready, any := true, false
	var next time.Time
	visit := func(tr *taskRun, svc *api.Service) {
		if svc == nil || svc.PortLabel != label {
			return
		}
		any = true
		start, up := ar.procUp(tr)
		if !up {
			ready = false
			return
		}
		for k := range svc.Checks {
			chk := &svc.Checks[k]
			sc := ar.scriptFor(tr, svc, chk)
			if sc.bad {
				continue // its health endpoint reports the bad value; it serves all the same
			}
			origin := sc.origin(start)
			el := now.Sub(origin)
			if !sc.passing(el) {
				ready = false
			}
			if d, ok := sc.nextChange(el); ok {
				if at := origin.Add(d); next.IsZero() || at.Before(next) {
					next = at
				}
			}
		}
	}
	ar.eachService(visit)
	return ready && any, next
}

// procUp reports whether the workload's process runs (for group services: every main
// task's) and when it last started.
func (ar *AllocRun) procUp(tr *taskRun) (time.Time, bool) {
	if tr != nil {
		if tr.State == nil || !tr.proc {
			return time.Time{}, false
		}
		return tr.State.StartedAt, true
	}
	return ar.mainTasksStarted(func(t *taskRun) bool { return t.proc })
}

// setInstance makes the instance listen while ready and refuse connections otherwise.
// A process that is down has no socket: its port refuses connections, and the connections
// it held are closed. A process that started but is not ready yet refuses too, as a
// server that binds its port once it has warmed up does.
func (c *Cluster) setInstance(in *instance, ready bool) {
	in.ready.Store(ready)
	switch {
	case ready && in.srv == nil:
		if c.closed {
			return
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(instanceHost, strconv.Itoa(in.port)))
		if err != nil {
			// Someone else took the port while the instance was down: it refuses (or, worse,
			// that someone answers) until the port is free again at its next change.
			c.log.Error("nomadsim: instance cannot listen again", "alloc", in.allocID, "port", in.port, "err", err)
			return
		}
		srv := &http.Server{Handler: in, ReadHeaderTimeout: 10 * time.Second}
		in.srv = srv
		c.instWG.Add(1)
		go func() {
			defer c.instWG.Done()
			_ = srv.Serve(ln)
		}()
	case !ready && in.srv != nil:
		// Close, not Shutdown: the process is gone, and so are its connections.
		_ = in.srv.Close()
		in.srv = nil
	}
}

// releaseInstances closes the allocation's listeners for good and frees their ports: the
// allocation ended (or its node went away).
func (ar *AllocRun) releaseInstances() {
	for _, in := range ar.insts {
		ar.c.setInstance(in, false)
		in.next = time.Time{}
		delete(ar.c.instPorts, in.port)
	}
	if ar.insts != nil {
		ar.insts = map[string]*instance{}
	}
}

// closeInstances closes every listener of the cluster (Close).
func (c *Cluster) closeInstances() {
	c.Mu.Lock()
	for _, ar := range c.Allocs {
		for _, in := range ar.insts {
			c.setInstance(in, false)
		}
	}
	c.Mu.Unlock()
	c.instWG.Wait()
}
