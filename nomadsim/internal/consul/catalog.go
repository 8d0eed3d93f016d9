// Package consul is nomadsim's Consul: a catalog of nodes, service instances and their
// health checks behind the parts of Consul's HTTP API that health gates and load balancers
// read (/v1/health/..., /v1/catalog/service/...) and the catalog's own writes
// (/v1/catalog/register, /v1/catalog/deregister), and Consul's KV store (/v1/kv/), with
// Consul's blocking queries and X-Consul-* headers and consul/api's JSON shapes.
//
// The catalog holds what Consul's servers hold; each node that runs a Consul agent (the
// server's own, and each Nomad client's) also has the agent's local state: what Nomad
// registered through that agent (Register, Deregister, SetCheck). The agent writes its
// local changes to the catalog at once, and its anti-entropy brings the catalog back to its
// local state: what was written to a node of an agent through the catalog API (a check
// bound to an instance, say) is removed, and what the agent registered but the catalog API
// changed or removed is registered again (agent/local/state.go: updateSyncState, then
// SyncChanges). On a real agent that full sync runs every minute plus a random stagger of
// up to a minute (agent/ae); here it corrects each difference a fixed minute of the
// simulated clock after the write that made it.
package consul

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
)

// Check statuses, as Consul names them.
const (
	StatusPassing  = "passing"
	StatusWarning  = "warning"
	StatusCritical = "critical"
)

// Datacenter is the datacenter the simulated Consul reports.
const Datacenter = "dc1"

// AntiEntropyDelay is how long after a write through the catalog API to a node of an agent
// the agent's anti-entropy undoes it (simulated time). Real agents run a full sync every
// minute plus a random stagger of up to a minute, so there the delay is anywhere from 0 to
// about 2 minutes after the write.
const AntiEntropyDelay = time.Minute

// Instance is a registered service instance (a Consul service ID).
type Instance struct {
	ID      string
	Service string
	Tags    []string
	Address string
	Port    int
	Node    string // the Catalog's node if empty
	Checks  []Check
}

// Check is a health check of an instance. ServiceID defaults to the instance's ID, ID to
// "service:<instance ID>" (suffixed with its position when there are several) and Status
// to critical, as Consul starts checks.
type Check struct {
	ID, Name, Status, Output, ServiceID string
	// Notes and Type are as registered through the catalog API; a check that Nomad
	// registered through the agent shows type "http".
	Notes, Type string
}

// Config wires a Catalog into the simulation.
type Config struct {
	// Now is the clock of anti-entropy's delays; time.Now if nil.
	Now func() time.Time
	// AfterFunc schedules anti-entropy; time.AfterFunc if nil. A simulation with a time
	// scale passes one that shortens the durations. The returned function stops the timer
	// and reports whether it did.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
}

// nodeRow is a node in the catalog.
type nodeRow struct {
	name, id, address, datacenter string
	tagged, meta                  map[string]string
	agent                         bool // runs an agent: has serfHealth and anti-entropy
	createIndex, modifyIndex      uint64
	checks                        []*checkRow // node-level checks
}

// serviceRow is a service instance in the catalog.
type serviceRow struct {
	inst                     Instance // Checks unused
	createIndex, modifyIndex uint64
	checks                   []*checkRow // the checks bound to it
	// drift is when the row came to differ from its node agent's local state (registered
	// through the catalog API); zero while it agrees or its node has no agent.
	drift time.Time
}

// checkRow is a health check in the catalog.
type checkRow struct {
	check Check // ServiceID empty: a node-level check
	node  string
	// The name and tags of its service when the check was written: Consul copies them
	// into the check then, and a later registration of the service leaves them.
	serviceName              string
	serviceTags              []string
	createIndex, modifyIndex uint64
	drift                    time.Time // as serviceRow.drift
	foreign                  bool      // written through the catalog API
}

// localService is a service in its node agent's local state, with its checks.
type localService struct {
	inst Instance // with its checks' defaults filled in
	// gone is when the catalog API deleted its row or one of its checks' (zero: none).
	gone time.Time
}

// Catalog is the simulated Consul's state. It is safe for concurrent use.
type Catalog struct {
	nodeName  string
	idx       *index.Index // Consul's own Raft index, apart from Nomad's
	now       func() time.Time
	afterFunc func(d time.Duration, f func()) func() bool

	mu       sync.Mutex
	nodes    map[string]*nodeRow    // by lowercased name
	services map[string]*serviceRow // by rowKey(node, service ID)
	checks   map[string]*checkRow   // by rowKey(node, check ID)
	// The agents' local state: services by ID (Nomad's IDs are unique across nodes), the
	// owner of each check ID, and the agent nodes the catalog API deleted, by when.
	local      map[string]*localService
	localCheck map[string]*localService
	agentGone  map[string]time.Time
	nodeDrift  map[string]time.Time // agent nodes whose node fields the catalog API changed
	// serviceIndex is the index of the latest change to each service name's instances or
	// checks: the index a blocking query on that service reports, as Consul's does.
	serviceIndex map[string]uint64
	// catalogIndex is the index of the catalog's latest change: the index of the health
	// state query, which KV writes (numbered on the same Raft index) must not move.
	catalogIndex uint64

	// Anti-entropy: the times differences fall due, and the one timer armed for the
	// earliest (its generation, so that a stopped timer that fired anyway does nothing).
	aeDue    []time.Time
	aeNext   time.Time
	aeStop   func() bool
	aeGen    uint64
	aeClosed bool

	kv *kvStore // numbered by idx too: Consul has one Raft index for all its tables
}

// NewCatalog returns an empty catalog whose agent runs on nodeName, on the real clock.
func NewCatalog(nodeName string) *Catalog { return New(nodeName, Config{}) }

// New returns an empty catalog whose agent runs on nodeName.
func New(nodeName string, cfg Config) *Catalog {
	c := &Catalog{
		nodeName:     nodeName,
		idx:          index.New(0),
		now:          cfg.Now,
		afterFunc:    cfg.AfterFunc,
		nodes:        map[string]*nodeRow{},
		services:     map[string]*serviceRow{},
		checks:       map[string]*checkRow{},
		local:        map[string]*localService{},
		localCheck:   map[string]*localService{},
		agentGone:    map[string]time.Time{},
		nodeDrift:    map[string]time.Time{},
		serviceIndex: map[string]uint64{},
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.afterFunc == nil {
		c.afterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	c.kv = newKVStore(c.idx)
	c.catalogIndex = c.idx.Next()
	c.ensureAgentNode(nodeName, c.catalogIndex)
	return c
}

// Close stops anti-entropy.
func (c *Catalog) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.aeClosed = true
	if c.aeStop != nil {
		c.aeStop()
		c.aeStop = nil
	}
}

// rowKey keys a node's service or check: Consul's catalog indexes ignore case.
func rowKey(node, id string) string { return strings.ToLower(node) + "\x00" + strings.ToLower(id) }

// write applies f under the catalog's lock with the next index and wakes blocking queries;
// f reports whether it changed the catalog (a write that changes nothing still takes an
// index, as a Raft apply does, but moves no table's index).
func (c *Catalog) write(f func(i uint64) bool) {
	c.mu.Lock()
	i := c.idx.Next()
	if f(i) {
		c.catalogIndex = i
	}
	c.mu.Unlock()
	c.idx.Notify()
}

// ensureAgentNode registers the node of an agent if the catalog lacks it.
func (c *Catalog) ensureAgentNode(name string, i uint64) *nodeRow {
	n := c.nodes[strings.ToLower(name)]
	if n == nil {
		n = &nodeRow{name: name, createIndex: i, modifyIndex: i}
		c.nodes[strings.ToLower(name)] = n
	}
	if !n.agent {
		n.agent = true
		setAgentNodeFields(n)
	}
	return n
}

// setAgentNodeFields sets the fields an agent registers its node with.
func setAgentNodeFields(n *nodeRow) {
	n.id, n.address, n.datacenter = nodeID(n.name), "127.0.0.1", Datacenter
	n.tagged = map[string]string{"lan": "127.0.0.1", "wan": "127.0.0.1"}
	n.meta = map[string]string{"consul-network-segment": ""}
}

// touchNodeServices moves the index of every service with an instance on the node: a
// node-level change shows in each of their health queries.
func (c *Catalog) touchNodeServices(node string, i uint64) {
	for _, s := range c.services {
		if strings.EqualFold(s.inst.Node, node) {
			c.serviceIndex[s.inst.Service] = i
		}
	}
}

// Register adds or replaces a service instance and its checks, as Nomad does through the
// node's agent: the agent's local state takes it, and the agent writes it to the catalog
// at once. Checks that the catalog API bound to the instance stay, as a re-registration
// through the agent leaves them (Nomad deregisters an instance before it registers it
// again, which removes them).
func (c *Catalog) Register(inst Instance) {
	inst.Tags = slices.Clone(inst.Tags)
	inst.Checks = slices.Clone(inst.Checks)
	if inst.Node == "" {
		inst.Node = c.nodeName
	}
	for n := range inst.Checks {
		ch := &inst.Checks[n]
		if ch.ServiceID == "" {
			ch.ServiceID = inst.ID
		}
		if ch.ID == "" {
			ch.ID = "service:" + inst.ID
			if len(inst.Checks) > 1 {
				ch.ID += ":" + strconv.Itoa(n+1)
			}
		}
		if ch.Status == "" {
			ch.Status = StatusCritical
		}
	}
	c.write(func(i uint64) bool {
		if old := c.local[inst.ID]; old != nil {
			// The agent drops the checks the new definition leaves out.
			for _, ch := range old.inst.Checks {
				if !slices.ContainsFunc(inst.Checks, func(x Check) bool { return x.ID == ch.ID }) {
					delete(c.localCheck, ch.ID)
					if row := c.checks[rowKey(old.inst.Node, ch.ID)]; row != nil {
						c.deleteCheck(row, i)
					}
				}
			}
		}
		ls := &localService{inst: inst}
		c.local[inst.ID] = ls
		for _, ch := range inst.Checks {
			c.localCheck[ch.ID] = ls
		}
		c.ensureAgentNode(inst.Node, i)
		c.syncService(ls, i)
		return true
	})
}

// Deregister removes a service instance, as Nomad does through the node's agent: the
// catalog deletes it with every check bound to it, those that the catalog API registered
// too. An unknown ID is ignored.
func (c *Catalog) Deregister(serviceID string) {
	c.write(func(i uint64) bool {
		ls := c.local[serviceID]
		if ls == nil {
			return false
		}
		delete(c.local, serviceID)
		for _, ch := range ls.inst.Checks {
			delete(c.localCheck, ch.ID)
		}
		if row := c.services[rowKey(ls.inst.Node, serviceID)]; row != nil {
			c.deleteService(row, i)
			return true
		}
		return false
	})
}

// SetCheck sets a check's status and output, as the agent's check runner does. Writing the
// status and output the agent already has changes nothing (the agent sends nothing then);
// an unknown check is ignored.
func (c *Catalog) SetCheck(checkID, status, output string) {
	c.mu.Lock()
	ls := c.localCheck[checkID]
	if ls == nil {
		c.mu.Unlock()
		return
	}
	k := slices.IndexFunc(ls.inst.Checks, func(x Check) bool { return x.ID == checkID })
	ch := &ls.inst.Checks[k]
	if ch.Status == status && ch.Output == output {
		c.mu.Unlock()
		return
	}
	ch.Status, ch.Output = status, output
	i := c.idx.Next()
	// The agent registers the check, with its service (agent/local: syncCheck).
	if c.services[rowKey(ls.inst.Node, ls.inst.ID)] == nil || c.nodes[strings.ToLower(ls.inst.Node)] == nil {
		c.ensureAgentNode(ls.inst.Node, i)
		c.ensureService(ls.inst, false, i)
	}
	if c.ensureCheck(ls.inst.Node, *ch, false, i) {
		c.catalogIndex = i
	}
	c.mu.Unlock()
	c.idx.Notify()
}

// syncService writes a local service and its checks to the catalog, as the agent's sync
// does: rows that already agree are left as they are.
func (c *Catalog) syncService(ls *localService, i uint64) {
	c.ensureService(ls.inst, false, i)
	for _, ch := range ls.inst.Checks {
		c.ensureCheck(ls.inst.Node, ch, false, i)
	}
	ls.gone = time.Time{}
}

// sameInstance reports whether two registrations of an instance are the same.
func sameInstance(a, b Instance) bool {
	return a.ID == b.ID && a.Service == b.Service && slices.Equal(a.Tags, b.Tags) &&
		a.Address == b.Address && a.Port == b.Port
}

// ensureService creates or updates a service row (state: ensureServiceTxn). foreign says
// it comes through the catalog API. It reports whether the row changed.
func (c *Catalog) ensureService(inst Instance, foreign bool, i uint64) bool {
	inst.Checks = nil
	k := rowKey(inst.Node, inst.ID)
	row := c.services[k]
	drift := c.driftAt(inst.Node, foreign)
	if row != nil && sameInstance(row.inst, inst) {
		if !foreign {
			row.drift = time.Time{}
		}
		return false
	}
	if row == nil {
		row = &serviceRow{createIndex: i}
		c.services[k] = row
	} else if row.inst.Service != inst.Service {
		c.serviceIndex[row.inst.Service] = i
	}
	inst.Node = c.nodes[strings.ToLower(inst.Node)].name
	row.inst, row.modifyIndex = inst, i
	if drift.IsZero() || row.drift.IsZero() {
		row.drift = drift
	}
	c.serviceIndex[inst.Service] = i
	return true
}

// driftAt is the drift a write through the catalog API (foreign) starts on a node of an
// agent, scheduling the anti-entropy that corrects it; zero otherwise.
func (c *Catalog) driftAt(node string, foreign bool) time.Time {
	n := c.nodes[strings.ToLower(node)]
	if !foreign || n == nil || !n.agent {
		return time.Time{}
	}
	now := c.now()
	c.scheduleAntiEntropy(now.Add(AntiEntropyDelay))
	return now
}

// sameCheck reports whether a check row already holds ch (structs.HealthCheck.IsSame).
func sameCheck(a, b Check) bool { return a == b }

// ensureCheck creates or updates a check row (state: ensureCheckTxn); the node exists and
// so does the service the check names. It reports whether the row changed.
func (c *Catalog) ensureCheck(node string, ch Check, foreign bool, i uint64) bool {
	k := rowKey(node, ch.ID)
	row := c.checks[k]
	drift := c.driftAt(node, foreign)
	var name string
	var tags []string
	if ch.ServiceID != "" {
		s := c.services[rowKey(node, ch.ServiceID)]
		name, tags = s.inst.Service, s.inst.Tags
	}
	if row != nil && sameCheck(row.check, ch) && row.serviceName == name && slices.Equal(row.serviceTags, tags) {
		if !foreign {
			row.drift, row.foreign = time.Time{}, false
		}
		return false
	}
	if row == nil {
		row = &checkRow{node: c.nodes[strings.ToLower(node)].name, createIndex: i}
		c.checks[k] = row
	} else {
		c.detachCheck(row, i)
	}
	row.check, row.modifyIndex, row.foreign = ch, i, foreign
	row.serviceName, row.serviceTags = name, tags
	if drift.IsZero() || row.drift.IsZero() {
		row.drift = drift
	}
	c.attachCheck(row, i)
	return true
}

// attachCheck lists a check row under its service, or its node for a node-level check,
// and moves the index of the services it shows in.
func (c *Catalog) attachCheck(row *checkRow, i uint64) {
	if row.check.ServiceID == "" {
		n := c.nodes[strings.ToLower(row.node)]
		n.checks = append(n.checks, row)
		c.touchNodeServices(row.node, i)
		return
	}
	s := c.services[rowKey(row.node, row.check.ServiceID)]
	s.checks = append(s.checks, row)
	c.serviceIndex[s.inst.Service] = i
}

// detachCheck takes a check row off its service's or node's list.
func (c *Catalog) detachCheck(row *checkRow, i uint64) {
	drop := func(list []*checkRow) []*checkRow {
		return slices.DeleteFunc(list, func(x *checkRow) bool { return x == row })
	}
	if row.check.ServiceID == "" {
		if n := c.nodes[strings.ToLower(row.node)]; n != nil {
			n.checks = drop(n.checks)
			c.touchNodeServices(row.node, i)
		}
		return
	}
	if s := c.services[rowKey(row.node, row.check.ServiceID)]; s != nil {
		s.checks = drop(s.checks)
		c.serviceIndex[s.inst.Service] = i
	}
}

// deleteCheck removes a check row (state: deleteCheckTxn).
func (c *Catalog) deleteCheck(row *checkRow, i uint64) {
	c.detachCheck(row, i)
	delete(c.checks, rowKey(row.node, row.check.ID))
}

// deleteService removes a service row with every check bound to it (state:
// deleteServiceTxn).
func (c *Catalog) deleteService(row *serviceRow, i uint64) {
	for _, ch := range row.checks {
		delete(c.checks, rowKey(ch.node, ch.check.ID))
	}
	delete(c.services, rowKey(row.inst.Node, row.inst.ID))
	c.serviceIndex[row.inst.Service] = i
}

// deleteNode removes a node with its services and checks (state: deleteNodeTxn).
func (c *Catalog) deleteNode(n *nodeRow, i uint64) {
	for _, s := range c.services {
		if strings.EqualFold(s.inst.Node, n.name) {
			c.deleteService(s, i)
		}
	}
	for _, ch := range n.checks {
		delete(c.checks, rowKey(ch.node, ch.check.ID))
	}
	delete(c.nodes, strings.ToLower(n.name))
}

// localOn is the agent's local service of the ID on the node, if any.
func (c *Catalog) localOn(node, serviceID string) *localService {
	for _, ls := range c.local {
		if strings.EqualFold(ls.inst.ID, serviceID) && strings.EqualFold(ls.inst.Node, node) {
			return ls
		}
	}
	return nil
}

// localCheckOn is the agent's local check of the ID on the node, with its service.
func (c *Catalog) localCheckOn(node, checkID string) (*localService, *Check) {
	for id, ls := range c.localCheck {
		if strings.EqualFold(id, checkID) && strings.EqualFold(ls.inst.Node, node) {
			k := slices.IndexFunc(ls.inst.Checks, func(x Check) bool { return x.ID == id })
			return ls, &ls.inst.Checks[k]
		}
	}
	return nil, nil
}

// scheduleAntiEntropy arms anti-entropy for due, unless it runs by then already.
func (c *Catalog) scheduleAntiEntropy(due time.Time) {
	c.aeDue = append(c.aeDue, due)
	if c.aeClosed || (c.aeStop != nil && !c.aeNext.After(due)) {
		return
	}
	c.armAntiEntropy(due)
}

func (c *Catalog) armAntiEntropy(due time.Time) {
	if c.aeStop != nil {
		c.aeStop()
	}
	c.aeGen++
	gen := c.aeGen
	c.aeNext = due
	c.aeStop = c.afterFunc(due.Sub(c.now()), func() { c.antiEntropy(gen) })
}

// antiEntropy corrects the differences that are due, and arms itself for the next ones.
func (c *Catalog) antiEntropy(gen uint64) {
	c.mu.Lock()
	if gen != c.aeGen || c.aeClosed {
		c.mu.Unlock()
		return
	}
	c.aeStop = nil
	now := c.now()
	i := c.idx.Next()
	if c.syncAgents(now, i) {
		c.catalogIndex = i
	}
	var next time.Time
	c.aeDue = slices.DeleteFunc(c.aeDue, func(d time.Time) bool { return !d.After(now) })
	for _, d := range c.aeDue {
		if next.IsZero() || d.Before(next) {
			next = d
		}
	}
	if !next.IsZero() {
		c.armAntiEntropy(next)
	}
	c.mu.Unlock()
	c.idx.Notify()
}

// syncAgents is each agent's full sync, for the differences due at now: the catalog takes
// the agent's local state again. It reports whether the catalog changed.
func (c *Catalog) syncAgents(now time.Time, i uint64) bool {
	due := func(t time.Time) bool { return !t.IsZero() && !t.Add(AntiEntropyDelay).After(now) }
	changed := false
	// Deleted agent nodes come back, with all their services.
	for name, t := range c.agentGone {
		if !due(t) {
			continue
		}
		delete(c.agentGone, name)
		c.ensureAgentNode(name, i)
		for _, ls := range c.local {
			if strings.EqualFold(ls.inst.Node, name) {
				ls.gone = t
			}
		}
		changed = true
	}
	for name, t := range c.nodeDrift {
		if !due(t) {
			continue
		}
		delete(c.nodeDrift, name)
		if n := c.nodes[name]; n != nil && n.agent {
			setAgentNodeFields(n)
			n.modifyIndex = i
			c.touchNodeServices(n.name, i)
			changed = true
		}
	}
	for _, row := range byKey(c.checks) {
		if !due(row.drift) {
			continue
		}
		if ls, ch := c.localCheckOn(row.node, row.check.ID); ch != nil {
			if c.services[rowKey(ls.inst.Node, ls.inst.ID)] == nil {
				c.ensureService(ls.inst, false, i)
			}
			changed = c.ensureCheck(ls.inst.Node, *ch, false, i) || changed
			row.drift = time.Time{}
			continue
		}
		c.deleteCheck(row, i)
		changed = true
	}
	for _, row := range byKey(c.services) {
		if !due(row.drift) {
			continue
		}
		if ls := c.localOn(row.inst.Node, row.inst.ID); ls != nil {
			changed = c.ensureService(ls.inst, false, i) || changed
			row.drift = time.Time{}
			continue
		}
		c.deleteService(row, i)
		changed = true
	}
	for _, ls := range c.local {
		if due(ls.gone) {
			c.syncService(ls, i)
			changed = true
		}
	}
	return changed
}

// byKey lists a map's values in the order of their keys, so that a sync's effects are the
// same from run to run.
func byKey[V any](m map[string]V) []V {
	keys := slices.Sorted(maps.Keys(m))
	out := make([]V, len(keys))
	for n, k := range keys {
		out[n] = m[k]
	}
	return out
}

// compareRows orders by node, then ID, ignoring case, as Consul's indexes list them.
func compareRows(nodeA, idA, nodeB, idB string) int {
	return cmp.Or(cmp.Compare(strings.ToLower(nodeA), strings.ToLower(nodeB)),
		cmp.Compare(strings.ToLower(idA), strings.ToLower(idB)))
}
