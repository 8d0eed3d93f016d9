package sim

import (
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Client-to-server sync. Nomad's client does not write task states to the servers as they
// change: its allocSync loop collects allocation updates and sends them in one
// Node.UpdateAlloc call per tick of allocSyncIntv (200ms), so the servers (and every
// read, list, blocking query and event of the HTTP API) see the client's changes up to a
// tick late, while the client endpoints (/v1/client/...) act on the client's own, newer
// state. An allocation therefore has two views here: ar.a is the client's (and the
// scheduler's) truth, ar.srv the client fields as last synced to the servers.

// defaultAllocSyncInterval is Nomad's allocSyncIntv (client/client.go).
const defaultAllocSyncInterval = 200 * time.Millisecond

// clientView is the client-owned part of an allocation as the servers last received it.
type clientView struct {
	status, desc string
	tasks        map[string]*api.TaskState
}

// syncInterval is the simulated client sync period; 0 means client changes are visible
// at once.
func (c *Cluster) syncInterval() time.Duration {
	switch {
	case c.Options.AllocSyncInterval < 0:
		return 0
	case c.Options.AllocSyncInterval == 0:
		return defaultAllocSyncInterval
	}
	return c.Options.AllocSyncInterval
}

// snapshotClient copies the client-owned fields of the allocation, deep enough that later
// client changes do not show through.
func (ar *AllocRun) snapshotClient() clientView {
	v := clientView{status: ar.Alloc.ClientStatus, desc: ar.Alloc.ClientDescription}
	if ar.Alloc.TaskStates != nil {
		v.tasks = make(map[string]*api.TaskState, len(ar.Alloc.TaskStates))
		for name, st := range ar.Alloc.TaskStates {
			cp := *st
			cp.Events = slices.Clone(st.Events)
			v.tasks[name] = &cp
		}
	}
	return v
}

// View is the allocation as the servers know it: server fields current, client fields as
// last synced. Callers hold c.Mu and must not modify the result.
func (ar *AllocRun) View() *api.Allocation {
	if ar.c.syncInterval() == 0 {
		return ar.Alloc
	}
	cp := *ar.Alloc
	cp.ClientStatus, cp.ClientDescription, cp.TaskStates = ar.srv.status, ar.srv.desc, ar.srv.tasks
	return &cp
}

// ServerClientStatus is the client status the servers know.
func (ar *AllocRun) ServerClientStatus() string {
	status, _, _ := ar.ServerClientFields()
	return status
}

// ServerClientFields are the client status, its description and the task states the
// servers know (without copying the allocation, for lists of thousands).
func (ar *AllocRun) ServerClientFields() (status, desc string, states map[string]*api.TaskState) {
	if ar.c.syncInterval() == 0 {
		return ar.Alloc.ClientStatus, ar.Alloc.ClientDescription, ar.Alloc.TaskStates
	}
	return ar.srv.status, ar.srv.desc, ar.srv.tasks
}

// Touch records a change of the client's state of the allocation. It reaches the servers
// (a new index, an event) at the node's next sync tick.
func (ar *AllocRun) Touch() {
	c := ar.c
	ar.recordBases()
	if c.syncInterval() == 0 {
		ar.bumpIndex()
		c.publishAlloc(ar, "AllocationUpdated")
		return
	}
	if ar.dirty {
		return
	}
	ar.dirty = true
	n := ar.Node
	n.dirty = append(n.dirty, ar)
	if !n.syncArmed {
		n.syncArmed = true
		c.after(c.untilSyncTick(n), func() { c.syncNode(n) })
	}
}

// syncNow sends the allocation's client state to the servers at once (the servers
// themselves changed it, such as marking it lost).
func (ar *AllocRun) syncNow() {
	if ar.c.syncInterval() == 0 {
		return
	}
	ar.dirty = false
	ar.srv = ar.snapshotClient()
	ar.bumpIndex()
	ar.c.publishAlloc(ar, "AllocationUpdated")
}

// untilSyncTick is the simulated time until the node's next sync tick. Each node's
// ticker runs freely from its own phase, as every Nomad client's does.
func (c *Cluster) untilSyncTick(n *simNode) time.Duration {
	iv := c.syncInterval()
	elapsed := c.Clock.Now().Sub(c.Clock.simStart) - n.syncPhase
	for elapsed < 0 {
		elapsed += iv
	}
	return iv - elapsed%iv
}

// syncNode is one tick of a node's allocSync: every allocation changed since the last tick
// reaches the servers in one update, under one index.
func (c *Cluster) syncNode(n *simNode) {
	n.syncArmed = false
	batch := n.dirty
	n.dirty = nil
	var idx uint64
	for _, ar := range batch {
		if !ar.dirty {
			continue
		}
		ar.dirty = false
		ar.srv = ar.snapshotClient()
		if idx == 0 {
			idx = c.Bump(TableAllocs)
		}
		ar.Alloc.ModifyIndex = idx
		ar.touched = c.Mu.hold()
		ar.Alloc.ModifyTime = c.NowNano()
		c.publishAlloc(ar, "AllocationUpdated")
	}
}
