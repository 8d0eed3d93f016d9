package sim

import (
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Simulated node capacity: generous enough for the 10,000-allocation scenario on 500 nodes
// with the api's default task resources (100 MHz, 300 MB).
const (
	nodeCPU    = 16000
	nodeMemory = 32768
	nodeDisk   = 200000
)

// NomadVersion is the version of Nomad the cluster says its agents run.
const NomadVersion = "2.0.6"

// bootstrap creates the default namespace and the nodes. Callers hold c.Mu.
func (c *Cluster) bootstrap() {
	i := c.Bump(TableNamespaces)
	c.Namespaces["default"] = &api.Namespace{Name: "default", Description: "Default shared namespace", CreateIndex: i, ModifyIndex: i}
	n := 0
	for _, dc := range c.Options.Datacenters {
		for k := 0; k < c.Options.NodesPerDatacenter; k++ {
			c.addNode(dc, n)
			n++
		}
	}
}

// addNode registers a ready, eligible node. Callers hold c.Mu.
func (c *Cluster) addNode(dc string, n int) *simNode {
	id := c.newID()
	i := c.Bump(TableNodes)
	class := "standard"
	if n%2 == 1 {
		class = "large"
	}
	node := &api.Node{
		ID:         id,
		Datacenter: dc,
		Name:       fmt.Sprintf("sim-%s-%d", dc, n),
		HTTPAddr:   fmt.Sprintf("10.0.%d.%d:4646", n/250, n%250+1),
		Attributes: map[string]string{
			"kernel.name":               "linux",
			"kernel.version":            "6.8.0",
			"os.name":                   "ubuntu",
			"cpu.arch":                  "amd64",
			"nomad.version":             NomadVersion,
			"unique.hostname":           fmt.Sprintf("sim-%s-%d", dc, n),
			"unique.network.ip-address": fmt.Sprintf("10.0.%d.%d", n/250, n%250+1),
			"driver.raw_exec":           "1",
			"driver.exec":               "1",
			"driver.docker":             "1",
			"consul.version":            "1.20.0",
		},
		NodeResources: &api.NodeResources{
			Cpu:    api.NodeCpuResources{CpuShares: nodeCPU, TotalCpuCores: 8},
			Memory: api.NodeMemoryResources{MemoryMB: nodeMemory},
			Disk:   api.NodeDiskResources{DiskMB: nodeDisk},
		},
		Meta:                  map[string]string{},
		NodeClass:             class,
		NodePool:              "default",
		SchedulingEligibility: api.NodeSchedulingEligible,
		Status:                api.NodeStatusReady,
		StatusUpdatedAt:       c.Clock.Now().Unix(),
		Drivers: map[string]*api.DriverInfo{
			"raw_exec": {Detected: true, Healthy: true, HealthDescription: "Healthy"},
			"exec":     {Detected: true, Healthy: true, HealthDescription: "Healthy"},
			"docker":   {Detected: true, Healthy: true, HealthDescription: "Healthy"},
		},
		CreateIndex: i,
		ModifyIndex: i,
	}
	sn := &simNode{Node: node, Allocs: map[string]*AllocRun{}}
	if iv := c.syncInterval(); iv > 0 {
		// Spread the nodes' sync tickers, as clients started at different moments are.
		sn.syncPhase = time.Duration(n) * 37 * time.Millisecond % iv
	}
	c.NodeList = append(c.NodeList, sn)
	c.NodeByID[id] = sn
	return sn
}

// Nodes lists the cluster's nodes as the node list endpoint does.
func (c *Cluster) Nodes() []*api.NodeListStub {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	out := make([]*api.NodeListStub, 0, len(c.NodeList))
	for _, n := range c.NodeList {
		out = append(out, n.Stub())
	}
	return out
}

// AddNode adds a ready, eligible node to datacenter dc and returns its ID. Blocked
// evaluations are retried, as Nomad unblocks them when capacity appears.
func (c *Cluster) AddNode(dc string) string {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	n := c.addNode(dc, len(c.NodeList))
	c.unblockEvals()
	return n.Node.ID
}

// SetNodeEligibility marks a node eligible or ineligible for new placements.
func (c *Cluster) SetNodeEligibility(nodeID string, eligible bool) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	n := c.NodeByID[nodeID]
	if n == nil {
		return
	}
	if eligible {
		n.Node.SchedulingEligibility = api.NodeSchedulingEligible
	} else {
		n.Node.SchedulingEligibility = api.NodeSchedulingIneligible
	}
	n.Node.ModifyIndex = c.Bump(TableNodes)
	if eligible {
		c.unblockEvals()
	}
}

// setNodeStatus moves the node to status, as a Nomad node status update does, and returns
// it; nil when the node is unknown or has that status already (nothing changes). Callers
// hold c.Mu.
func (c *Cluster) setNodeStatus(nodeID, status, desc string) *simNode {
	n := c.NodeByID[nodeID]
	if n == nil || n.Node.Status == status {
		return nil
	}
	n.Node.Status = status
	n.Node.StatusDescription = desc
	n.Node.StatusUpdatedAt = c.Clock.Now().Unix()
	n.Node.ModifyIndex = c.Bump(TableNodes)
	return n
}

// DownNode marks a node down: its allocations become lost and are replaced elsewhere per
// Nomad's rules (system allocations are not replaced).
func (c *Cluster) DownNode(nodeID string) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	n := c.setNodeStatus(nodeID, api.NodeStatusDown, "node is down")
	if n == nil {
		return
	}
	jobs := map[JobKey]bool{}
	for _, ar := range n.Allocs {
		if ar.ClientTerminal() {
			continue
		}
		ar.markLost()
		jobs[ar.Job] = true
	}
	for k := range jobs {
		if j := c.Jobs[k]; j != nil {
			c.CreateEval(j, "node-update", EvalOpts{nodeID: nodeID})
		}
	}
}

// UpNode brings a down node back to ready: system jobs are evaluated for it and blocked
// evaluations retried, as when a Nomad client reconnects.
func (c *Cluster) UpNode(nodeID string) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	n := c.setNodeStatus(nodeID, api.NodeStatusReady, "")
	if n == nil {
		return
	}
	for _, j := range c.SortedJobs("*") {
		switch Deref(j.Current().Type) {
		case api.JobTypeSystem, api.JobTypeSysbatch:
			c.CreateEval(j, "node-update", EvalOpts{nodeID: nodeID})
		}
	}
	c.unblockEvals()
}
