// Package consul is nomadsim's Consul: a catalog of service instances and their health
// checks behind the parts of Consul's HTTP API that health gates and load balancers read
// (/v1/health/..., /v1/catalog/service/...), and Consul's KV store (/v1/kv/), with Consul's blocking queries and X-Consul-* headers
// and consul/api's JSON shapes.
package consul

import (
	"slices"
	"strconv"
	"sync"

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
}

type instanceState struct {
	inst        Instance
	createIndex uint64
	modifyIndex uint64
	checks      []*checkState
}

type checkState struct {
	check       Check
	createIndex uint64
	modifyIndex uint64
}

// Catalog is the simulated Consul's state. It is safe for concurrent use.
type Catalog struct {
	nodeName string
	idx      *index.Index // Consul's own Raft index, apart from Nomad's

	mu        sync.Mutex
	instances map[string]*instanceState // by service ID
	// serviceIndex is the index of the latest change to each service name's instances or
	// checks: the index a blocking query on that service reports, as Consul's does.
	serviceIndex map[string]uint64
	nodeIndex    map[string]uint64
	// catalogIndex is the index of the catalog's latest write: the index of the health
	// state query, which KV writes (numbered on the same Raft index) must not move.
	catalogIndex uint64

	kv *kvStore // numbered by idx too: Consul has one Raft index for all its tables
}

// NewCatalog returns an empty catalog whose agent runs on nodeName.
func NewCatalog(nodeName string) *Catalog {
	c := &Catalog{
		nodeName:     nodeName,
		idx:          index.New(0),
		instances:    map[string]*instanceState{},
		serviceIndex: map[string]uint64{},
		nodeIndex:    map[string]uint64{},
	}
	c.kv = newKVStore(c.idx)
	c.catalogIndex = c.idx.Next()
	c.nodeIndex[nodeName] = c.catalogIndex
	return c
}

// write applies f under the catalog's lock with the next index and wakes blocking queries.
func (c *Catalog) write(f func(i uint64)) {
	c.mu.Lock()
	c.catalogIndex = c.idx.Next()
	f(c.catalogIndex)
	c.mu.Unlock()
	c.idx.Notify()
}

// Register adds or replaces a service instance and its checks.
func (c *Catalog) Register(inst Instance) {
	inst.Tags = slices.Clone(inst.Tags)
	inst.Checks = slices.Clone(inst.Checks)
	if inst.Node == "" {
		inst.Node = c.nodeName
	}
	c.write(func(i uint64) {
		st := &instanceState{inst: inst, createIndex: i, modifyIndex: i}
		if old, ok := c.instances[inst.ID]; ok {
			st.createIndex = old.createIndex
			c.serviceIndex[old.inst.Service] = i
		}
		for n, ch := range inst.Checks {
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
			st.checks = append(st.checks, &checkState{check: ch, createIndex: i, modifyIndex: i})
		}
		st.inst.Checks = nil
		c.instances[inst.ID] = st
		c.serviceIndex[inst.Service] = i
		if _, ok := c.nodeIndex[inst.Node]; !ok {
			c.nodeIndex[inst.Node] = i
		}
	})
}

// Deregister removes a service instance and its checks; an unknown ID is ignored.
func (c *Catalog) Deregister(serviceID string) {
	c.write(func(i uint64) {
		if old, ok := c.instances[serviceID]; ok {
			delete(c.instances, serviceID)
			c.serviceIndex[old.inst.Service] = i
		}
	})
}

// SetCheck sets a check's status and output. Writing the same status and output again
// changes nothing (Consul does not bump the index then); an unknown check is ignored.
func (c *Catalog) SetCheck(checkID, status, output string) {
	c.write(func(i uint64) {
		for _, st := range c.instances {
			for _, ch := range st.checks {
				if ch.check.ID != checkID {
					continue
				}
				if ch.check.Status == status && ch.check.Output == output {
					return
				}
				ch.check.Status, ch.check.Output = status, output
				ch.modifyIndex = i
				c.serviceIndex[st.inst.Service] = i
				return
			}
		}
	})
}
