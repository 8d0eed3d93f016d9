package nomadsim

import (
	"net/http"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// Client-side simulation of an allocation: Nomad's alloc runner and task runners, driven by
// timers on the simulated clock. Every method runs with c.mu held.

// allocRun is an allocation and the client state that runs it.
type allocRun struct {
	c       *Cluster
	a       *api.Allocation
	job     jobKey
	jobType string
	tg      *api.TaskGroup
	node    *simNode
	tasks   []*taskRun
	byName  map[string]*taskRun

	received    bool // the client has picked the allocation up
	stopping    bool // the client is killing the allocation
	killPhase   int
	noShutdown  bool
	holdsRes    bool // counted in its node's used resources
	cpu, mem    int
	healthGen   uint64
	deployStart time.Time          // when the allocation started counting for deployment health
	healthFrom  time.Time          // the client restarted its health watch (an in-place update moved it to a new deployment)
	svcs        map[string]*svcReg // registered services by ID
	touched     uint64             // hold of the state lock that last gave a new index
	restarting  int                // in-place restarts holding group services down
	srv         clientView         // client fields as last synced to the servers
	dirty       bool               // client changes not yet synced
	// bases is the history of each checked workload (nil: the group's main tasks, else a
	// task), so that a check run at a moment is judged on the workload of that moment.
	bases map[*taskRun][]baseSample
	// insts are the instances answering on the allocation's ports, by port label
	// (Options.ServeInstances).
	insts map[string]*instance
	// fs is the allocation's directory on its client, from the moment the client picked
	// the allocation up.
	fs *allocFS
}

// task lifecycle kinds
const (
	kindMain = iota
	kindPrestart
	kindPrestartSidecar
	kindPoststart
	kindPoststartSidecar
	kindPoststop
)

// taskRun is one task's runner.
type taskRun struct {
	ar     *allocRun
	t      *api.Task
	st     *api.TaskState
	kind   int
	script taskScript
	// gen invalidates timers armed for an earlier run of the task.
	gen      uint64
	launched bool // a start is in flight or the task runs
	// proc says the task's process runs: from its start until it exits, through a kill
	// signal it has not yet obeyed and through the task's shutdown_delay.
	proc bool
	// restart policy bookkeeping
	attempts    int
	windowStart time.Time
	killing     bool
	waiters     []chan struct{}
	// the template manager: the task's templates, whether its first prestart rendered
	// them, whether the manager runs, and a generation that ends a stopped manager's
	// pending work; the time of the latest prestart; whether the task API socket exists.
	tmpls       []*tmplRun
	tmplStarted bool
	tmplRunning bool
	tmplGen     uint64
	prestartAt  time.Time
	apiSocket   bool
}

// errTaskNotRunning is the client's ErrTaskNotRunning, answered as a 500.
var errTaskNotRunning = simhttp.Errorf(http.StatusInternalServerError, "Task not running")

func taskKind(t *api.Task) int {
	if t.Lifecycle == nil {
		return kindMain
	}
	switch t.Lifecycle.Hook {
	case api.TaskLifecycleHookPrestart:
		if t.Lifecycle.Sidecar {
			return kindPrestartSidecar
		}
		return kindPrestart
	case api.TaskLifecycleHookPoststart:
		if t.Lifecycle.Sidecar {
			return kindPoststartSidecar
		}
		return kindPoststart
	case api.TaskLifecycleHookPoststop:
		return kindPoststop
	}
	return kindMain
}

func (tr *taskRun) sidecar() bool {
	return tr.kind == kindPrestartSidecar || tr.kind == kindPoststartSidecar
}

// ephemeral tasks run to completion as part of the allocation's lifecycle.
func (tr *taskRun) ephemeral() bool {
	return tr.kind == kindPrestart || tr.kind == kindPoststart || tr.kind == kindPoststop
}

func (ar *allocRun) clientTerminal() bool {
	switch ar.a.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

func (ar *allocRun) serverTerminal() bool {
	return ar.a.DesiredStatus == api.AllocDesiredStatusStop || ar.a.DesiredStatus == api.AllocDesiredStatusEvict
}

// terminal is Nomad's Allocation.TerminalStatus: stopped by the server or done on the client.
func (ar *allocRun) terminal() bool { return ar.serverTerminal() || ar.clientTerminal() }

// touchServer records a server-side change (desired status, transition, links).
func (ar *allocRun) touchServer(eventType string) {
	ar.a.AllocModifyIndex = ar.bumpIndex()
	ar.c.publishAlloc(ar, eventType)
}

// bumpIndex gives the allocation a new modify index, unless it already got one during
// this hold of the state lock (no reader can have seen the state in between).
func (ar *allocRun) bumpIndex() uint64 {
	c := ar.c
	if ar.touched != c.mu.hold() || ar.a.ModifyIndex == 0 {
		ar.a.ModifyIndex = c.bump(tAllocs)
		ar.touched = c.mu.hold()
	}
	ar.a.ModifyTime = c.nowNano()
	return ar.a.ModifyIndex
}

// releaseResources returns the allocation's resources to its node.
func (ar *allocRun) releaseResources() {
	if !ar.holdsRes {
		return
	}
	ar.holdsRes = false
	ar.node.usedCPU -= ar.cpu
	ar.node.usedMem -= ar.mem
}

// receive is the client picking the allocation up: task states appear, tasks set up.
func (ar *allocRun) receive() {
	if ar.received || ar.serverTerminal() || ar.clientTerminal() {
		return
	}
	if prev := ar.c.allocs[ar.a.PreviousAllocation]; prev != nil && prev.node == ar.node && !prev.clientTerminal() {
		// Nomad's client waits for a previous allocation on the same node to stop
		// (prevAllocWatcher) before it runs the replacement.
		return
	}
	ar.received = true
	c := ar.c
	ar.a.TaskStates = make(map[string]*api.TaskState, len(ar.tasks))
	ar.fs = newAllocFS(ar, c.clk.now())
	for _, tr := range ar.tasks {
		tr.tmpls = newTmplRuns(tr)
		tr.st = &api.TaskState{State: taskPending}
		appendEvent(tr.st, c.evReceived())
		appendEvent(tr.st, c.evSetup())
		ar.a.TaskStates[tr.t.Name] = tr.st
	}
	ar.a.ClientStatus = api.AllocClientStatusPending
	ar.a.ClientDescription = "No tasks have started"
	ar.deployStart = c.clk.now()
	ar.makeInstances()
	ar.touch()
	ar.servicesChanged()
	ar.progress()
	ar.armHealthDeadline()
}

// progress starts the tasks whose lifecycle turn has come, as Nomad's task coordinator
// does, and recomputes the allocation's client status.
func (ar *allocRun) progress() {
	if !ar.received {
		return
	}
	if ar.stopping {
		ar.killProgress()
		ar.updateClientStatus()
		return
	}
	prestartDone, sidecarsUp, mainsRunning, mainsDead := true, true, true, true
	anyMain := false
	for _, tr := range ar.tasks {
		switch tr.kind {
		case kindPrestart:
			if tr.st.State != taskDead || tr.st.Failed {
				prestartDone = false
			}
		case kindPrestartSidecar:
			if tr.st.State != taskRunning && tr.st.StartedAt.IsZero() {
				sidecarsUp = false
			}
		case kindMain:
			anyMain = true
			if tr.st.State != taskRunning {
				mainsRunning = false
			}
			if tr.st.State != taskDead {
				mainsDead = false
			}
		}
	}
	if !anyMain {
		mainsRunning, mainsDead = false, false
	}
	failed := ar.failedTask()
	if failed != nil || (mainsDead && anyMain) {
		// The main work is over (or a task failed): stop what still runs, then run the
		// poststop tasks, as Nomad's alloc runner does.
		ar.finishRun(failed)
		ar.updateClientStatus()
		return
	}
	for _, tr := range ar.tasks {
		if tr.launched || tr.st.State == taskDead {
			continue
		}
		switch tr.kind {
		case kindPrestart, kindPrestartSidecar:
			tr.launch()
		case kindMain:
			if prestartDone && sidecarsUp {
				tr.launch()
			}
		case kindPoststart, kindPoststartSidecar:
			if mainsRunning {
				tr.launch()
			}
		}
	}
	ar.updateClientStatus()
	ar.checkHealth()
}

func (ar *allocRun) failedTask() *taskRun {
	for _, tr := range ar.tasks {
		if tr.st.Failed {
			return tr
		}
	}
	return nil
}

// finishRun ends an allocation whose main tasks are done or whose task failed: siblings
// still running are killed, then poststop tasks run.
func (ar *allocRun) finishRun(failed *taskRun) {
	if ar.stopping {
		return
	}
	ar.stopping = true
	ar.noShutdown = true
	ar.killPhase = 0
	for _, tr := range ar.tasks {
		if tr.kind == kindPoststop || tr.st.State == taskDead {
			continue
		}
		if failed != nil && tr != failed {
			appendEvent(tr.st, ar.c.evSiblingFailed(failed.t.Name))
		}
	}
	ar.deregisterServices()
	ar.killProgress()
}

// stop is the client's reaction to a desired status of stop: deregister group services,
// honour the group shutdown_delay, then kill tasks (main and non-sidecar first, then
// sidecars), then run poststop tasks.
func (ar *allocRun) stop(noShutdownDelay bool) {
	if ar.stopping || ar.clientTerminal() {
		return
	}
	if !ar.received {
		// Never started on the client: it completes at once.
		ar.stopping = true
		ar.a.ClientStatus = api.AllocClientStatusComplete
		ar.a.ClientDescription = "All tasks have completed"
		ar.afterTerminal()
		ar.touch()
		return
	}
	ar.stopping = true
	ar.noShutdown = noShutdownDelay
	ar.healthGen++
	delay := time.Duration(0)
	if !noShutdownDelay && ar.tg.ShutdownDelay != nil {
		delay = *ar.tg.ShutdownDelay
	}
	// The group service hook's PreKill: group services go now and the delay is waited;
	// task services stay registered until their task is killed (servicesChanged).
	ar.killPhase = -1
	ar.servicesChanged()
	gen := ar.healthGen
	ar.c.after(delay, func() {
		if ar.healthGen != gen || ar.killPhase != -1 {
			return
		}
		ar.killPhase = 0
		ar.servicesChanged()
		ar.killProgress()
		ar.updateClientStatus()
	})
}

// killProgress advances the kill phases: 0 kills main and non-sidecar tasks, 1 kills
// sidecars, 2 runs poststop tasks, 3 is done.
func (ar *allocRun) killProgress() {
	for ar.killPhase >= 0 && ar.killPhase < 3 {
		allDone := true
		for _, tr := range ar.tasks {
			inPhase := false
			switch ar.killPhase {
			case 0:
				inPhase = !tr.sidecar() && tr.kind != kindPoststop
			case 1:
				inPhase = tr.sidecar()
			case 2:
				inPhase = tr.kind == kindPoststop
			}
			if !inPhase {
				continue
			}
			if ar.killPhase == 2 {
				if !tr.launched && tr.st.State != taskDead {
					tr.launch()
				}
				if tr.st.State != taskDead {
					allDone = false
				}
				continue
			}
			if tr.st.State != taskDead {
				allDone = false
				tr.kill()
			}
		}
		if !allDone {
			return
		}
		ar.killPhase++
	}
}

// updateClientStatus derives the allocation's client status from its task states with
// Nomad's rules (allocrunner getClientStatus): failed, then running, then pending, then
// complete.
func (ar *allocRun) updateClientStatus() {
	if ar.a.ClientStatus == api.AllocClientStatusLost || !ar.received {
		return
	}
	var pending, running, dead, failed bool
	for _, tr := range ar.tasks {
		switch tr.st.State {
		case taskPending:
			pending = true
		case taskRunning:
			running = true
		case taskDead:
			if tr.st.Failed {
				failed = true
			} else {
				dead = true
			}
		}
	}
	status, desc := ar.a.ClientStatus, ar.a.ClientDescription
	switch {
	case failed:
		status, desc = api.AllocClientStatusFailed, "Failed tasks"
	case running:
		status, desc = api.AllocClientStatusRunning, "Tasks are running"
	case pending:
		status, desc = api.AllocClientStatusPending, "No tasks have started"
	case dead:
		status, desc = api.AllocClientStatusComplete, "All tasks have completed"
	}
	wasTerminal := ar.clientTerminal()
	changed := status != ar.a.ClientStatus || desc != ar.a.ClientDescription
	ar.a.ClientStatus, ar.a.ClientDescription = status, desc
	if changed {
		ar.touch()
		if ar.clientTerminal() && !wasTerminal {
			ar.afterTerminal()
		}
	}
}

// afterTerminal reacts to the allocation reaching a terminal client status.
func (ar *allocRun) afterTerminal() {
	c := ar.c
	ar.healthGen++
	ar.deregisterServices()
	ar.releaseInstances()
	ar.releaseResources()
	// Wake a replacement waiting for this allocation on the same node.
	if next := c.allocs[ar.a.NextAllocation]; next != nil && !next.received {
		c.after(10*time.Millisecond, next.receive)
	}
	if ar.a.ClientStatus == api.AllocClientStatusFailed && !ar.serverTerminal() {
		c.onAllocFailed(ar)
	}
	if ar.a.DeploymentID != "" && ar.a.DeploymentStatus != nil && ar.a.DeploymentStatus.Healthy == nil && ar.a.ClientStatus == api.AllocClientStatusFailed {
		ar.setHealth(false)
	}
	c.jobChanged(ar.job)
	c.unblockSoon()
}

// markLost is a node going down under the allocation.
func (ar *allocRun) markLost() {
	ar.stopping = true
	ar.healthGen++
	for _, tr := range ar.tasks {
		tr.gen++
		tr.proc = false
		if tr.st != nil && tr.st.State != taskDead {
			tr.st.State = taskDead
			tr.st.FinishedAt = ar.c.clk.now()
		}
		tr.release()
	}
	ar.a.ClientStatus = api.AllocClientStatusLost
	ar.a.ClientDescription = "alloc is lost since its node is down"
	ar.deregisterServices()
	ar.releaseInstances()
	ar.releaseResources()
	ar.touch()
	ar.syncNow() // the servers mark it lost themselves
}
