package sim

import (
	"net/http"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// Client-side simulation of an allocation: Nomad's alloc runner and task runners, driven by
// timers on the simulated clock. Every method runs with c.Mu held.

// AllocRun is an allocation and the client state that runs it.
type AllocRun struct {
	c           *Cluster
	Alloc       *api.Allocation
	Job         JobKey
	JobType     string
	Group       *api.TaskGroup
	Node        *simNode
	Tasks       []*taskRun
	TasksByName map[string]*taskRun

	Received    bool // the client has picked the allocation up
	Stopping    bool // the client is killing the allocation
	killPhase   int
	noShutdown  bool
	holdsRes    bool // counted in its node's used resources
	cpu, mem    int
	healthGen   uint64
	deployStart time.Time          // when the allocation started counting for deployment health
	healthFrom  time.Time          // the client restarted its health watch (an in-place update moved it to a new deployment)
	Services    map[string]*svcReg // registered services by ID
	touched     uint64             // hold of the state lock that last gave a new index
	Restarting  int                // in-place restarts holding group services down
	srv         clientView         // client fields as last synced to the servers
	dirty       bool               // client changes not yet synced
	// bases is the history of each checked workload (nil: the group's main tasks, else a
	// task), so that a check run at a moment is judged on the workload of that moment.
	bases map[*taskRun][]baseSample
	// insts are the instances answering on the allocation's ports, by port label
	// (Options.ServeInstances).
	insts map[string]*instance
	// FS is the allocation's directory on its client, from the moment the client picked
	// the allocation up.
	FS *AllocFS
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
	ar     *AllocRun
	Task   *api.Task
	State  *api.TaskState
	kind   int
	script taskScript
	// gen invalidates timers armed for an earlier run of the task.
	gen      uint64
	launched bool // a start is in flight or the task runs
	// proc says the task's process runs: from its start until it exits, through a kill
	// signal it has not yet obeyed and through the task's shutdown_delay.
	proc bool
	// bad is the share of requests its services answer 500, having loaded a bad value at
	// its start (nomadsim.bad_when); its services' checks fail meanwhile. 0: not bad.
	bad float64
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
	// firstScripts are the change scripts to run once the task runs after a manager's
	// first render (run_on_first_render).
	firstScripts []*api.ChangeScript
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

func (ar *AllocRun) ClientTerminal() bool {
	switch ar.Alloc.ClientStatus {
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		return true
	}
	return false
}

func (ar *AllocRun) ServerTerminal() bool {
	return ar.Alloc.DesiredStatus == api.AllocDesiredStatusStop || ar.Alloc.DesiredStatus == api.AllocDesiredStatusEvict
}

// Terminal is Nomad's Allocation.TerminalStatus: stopped by the server or done on the client.
func (ar *AllocRun) Terminal() bool { return ar.ServerTerminal() || ar.ClientTerminal() }

// TouchServer records a server-side change (desired status, transition, links).
func (ar *AllocRun) TouchServer(eventType string) {
	ar.Alloc.AllocModifyIndex = ar.bumpIndex()
	ar.c.publishAlloc(ar, eventType)
}

// bumpIndex gives the allocation a new modify index, unless it already got one during
// this hold of the state lock (no reader can have seen the state in between).
func (ar *AllocRun) bumpIndex() uint64 {
	c := ar.c
	if ar.touched != c.Mu.hold() || ar.Alloc.ModifyIndex == 0 {
		ar.Alloc.ModifyIndex = c.Bump(TableAllocs)
		ar.touched = c.Mu.hold()
	}
	ar.Alloc.ModifyTime = c.NowNano()
	return ar.Alloc.ModifyIndex
}

// releaseResources returns the allocation's resources to its node.
func (ar *AllocRun) releaseResources() {
	if !ar.holdsRes {
		return
	}
	ar.holdsRes = false
	ar.Node.usedCPU -= ar.cpu
	ar.Node.usedMem -= ar.mem
}

// receive is the client picking the allocation up: task states appear, tasks set up.
func (ar *AllocRun) receive() {
	if ar.Received || ar.ServerTerminal() || ar.ClientTerminal() {
		return
	}
	if prev := ar.c.Allocs[ar.Alloc.PreviousAllocation]; prev != nil && prev.Node == ar.Node && !prev.ClientTerminal() {
		// Nomad's client waits for a previous allocation on the same node to stop
		// (prevAllocWatcher) before it runs the replacement.
		return
	}
	ar.Received = true
	c := ar.c
	ar.Alloc.TaskStates = make(map[string]*api.TaskState, len(ar.Tasks))
	ar.FS = newAllocFS(ar, c.Clock.Now())
	for _, tr := range ar.Tasks {
		tr.tmpls = newTmplRuns(tr)
		tr.State = &api.TaskState{State: TaskPending}
		appendEvent(tr.State, c.evReceived())
		appendEvent(tr.State, c.evSetup())
		ar.Alloc.TaskStates[tr.Task.Name] = tr.State
	}
	ar.Alloc.ClientStatus = api.AllocClientStatusPending
	ar.Alloc.ClientDescription = "No tasks have started"
	ar.deployStart = c.Clock.Now()
	ar.makeInstances()
	ar.Touch()
	ar.ServicesChanged()
	ar.Progress()
	ar.armHealthDeadline()
}

// Progress starts the tasks whose lifecycle turn has come, as Nomad's task coordinator
// does, and recomputes the allocation's client status.
func (ar *AllocRun) Progress() {
	if !ar.Received {
		return
	}
	if ar.Stopping {
		ar.killProgress()
		ar.updateClientStatus()
		return
	}
	prestartDone, sidecarsUp, mainsRunning, mainsDead := true, true, true, true
	anyMain := false
	for _, tr := range ar.Tasks {
		switch tr.kind {
		case kindPrestart:
			if tr.State.State != taskDead || tr.State.Failed {
				prestartDone = false
			}
		case kindPrestartSidecar:
			if tr.State.State != TaskRunning && tr.State.StartedAt.IsZero() {
				sidecarsUp = false
			}
		case kindMain:
			anyMain = true
			if tr.State.State != TaskRunning {
				mainsRunning = false
			}
			if tr.State.State != taskDead {
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
	for _, tr := range ar.Tasks {
		if tr.launched || tr.State.State == taskDead {
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

func (ar *AllocRun) failedTask() *taskRun {
	for _, tr := range ar.Tasks {
		if tr.State.Failed {
			return tr
		}
	}
	return nil
}

// finishRun ends an allocation whose main tasks are done or whose task failed: siblings
// still running are killed, then poststop tasks run.
func (ar *AllocRun) finishRun(failed *taskRun) {
	if ar.Stopping {
		return
	}
	ar.Stopping = true
	ar.noShutdown = true
	ar.killPhase = 0
	for _, tr := range ar.Tasks {
		if tr.kind == kindPoststop || tr.State.State == taskDead {
			continue
		}
		if failed != nil && tr != failed {
			appendEvent(tr.State, ar.c.evSiblingFailed(failed.Task.Name))
		}
	}
	ar.deregisterServices()
	ar.killProgress()
}

// stop is the client's reaction to a desired status of stop: deregister group services,
// honour the group shutdown_delay, then kill tasks (main and non-sidecar first, then
// sidecars), then run poststop tasks.
func (ar *AllocRun) stop(noShutdownDelay bool) {
	if ar.Stopping || ar.ClientTerminal() {
		return
	}
	if !ar.Received {
		// Never started on the client: it completes at once.
		ar.Stopping = true
		ar.Alloc.ClientStatus = api.AllocClientStatusComplete
		ar.Alloc.ClientDescription = "All tasks have completed"
		ar.afterTerminal()
		ar.Touch()
		return
	}
	ar.Stopping = true
	ar.noShutdown = noShutdownDelay
	ar.healthGen++
	delay := time.Duration(0)
	if !noShutdownDelay && ar.Group.ShutdownDelay != nil {
		delay = *ar.Group.ShutdownDelay
	}
	// The group service hook's PreKill: group services go now and the delay is waited;
	// task services stay registered until their task is killed (ServicesChanged).
	ar.killPhase = -1
	ar.ServicesChanged()
	gen := ar.healthGen
	ar.c.after(delay, func() {
		if ar.healthGen != gen || ar.killPhase != -1 {
			return
		}
		ar.killPhase = 0
		ar.ServicesChanged()
		ar.killProgress()
		ar.updateClientStatus()
	})
}

// killProgress advances the kill phases: 0 kills main and non-sidecar tasks, 1 kills
// sidecars, 2 runs poststop tasks, 3 is done.
func (ar *AllocRun) killProgress() {
	for ar.killPhase >= 0 && ar.killPhase < 3 {
		allDone := true
		for _, tr := range ar.Tasks {
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
				if !tr.launched && tr.State.State != taskDead {
					tr.launch()
				}
				if tr.State.State != taskDead {
					allDone = false
				}
				continue
			}
			if tr.State.State != taskDead {
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
func (ar *AllocRun) updateClientStatus() {
	if ar.Alloc.ClientStatus == api.AllocClientStatusLost || !ar.Received {
		return
	}
	var pending, running, dead, failed bool
	for _, tr := range ar.Tasks {
		switch tr.State.State {
		case TaskPending:
			pending = true
		case TaskRunning:
			running = true
		case taskDead:
			if tr.State.Failed {
				failed = true
			} else {
				dead = true
			}
		}
	}
	status, desc := ar.Alloc.ClientStatus, ar.Alloc.ClientDescription
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
	wasTerminal := ar.ClientTerminal()
	changed := status != ar.Alloc.ClientStatus || desc != ar.Alloc.ClientDescription
	ar.Alloc.ClientStatus, ar.Alloc.ClientDescription = status, desc
	if changed {
		ar.Touch()
		if ar.ClientTerminal() && !wasTerminal {
			ar.afterTerminal()
		}
	}
}

// afterTerminal reacts to the allocation reaching a terminal client status.
func (ar *AllocRun) afterTerminal() {
	c := ar.c
	ar.healthGen++
	ar.deregisterServices()
	ar.releaseInstances()
	ar.releaseResources()
	// Wake a replacement waiting for this allocation on the same node.
	if next := c.Allocs[ar.Alloc.NextAllocation]; next != nil && !next.Received {
		c.after(10*time.Millisecond, next.receive)
	}
	if ar.Alloc.ClientStatus == api.AllocClientStatusFailed && !ar.ServerTerminal() {
		c.onAllocFailed(ar)
	}
	if ar.Alloc.DeploymentID != "" && ar.Alloc.DeploymentStatus != nil && ar.Alloc.DeploymentStatus.Healthy == nil && ar.Alloc.ClientStatus == api.AllocClientStatusFailed {
		ar.setHealth(false)
	}
	c.jobChanged(ar.Job)
	c.unblockSoon()
}

// markLost is a node going down under the allocation.
func (ar *AllocRun) markLost() {
	ar.Stopping = true
	ar.healthGen++
	for _, tr := range ar.Tasks {
		tr.gen++
		tr.proc = false
		if tr.State != nil && tr.State.State != taskDead {
			tr.State.State = taskDead
			tr.State.FinishedAt = ar.c.Clock.Now()
		}
		tr.release()
	}
	ar.Alloc.ClientStatus = api.AllocClientStatusLost
	ar.Alloc.ClientDescription = "alloc is lost since its node is down"
	ar.deregisterServices()
	ar.releaseInstances()
	ar.releaseResources()
	ar.Touch()
	ar.syncNow() // the servers mark it lost themselves
}
