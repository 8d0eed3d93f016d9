package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"
)

// svcReg is one registered service instance of an allocation, of either provider.
type svcReg struct {
	Reg    *api.ServiceRegistration
	svc    *api.Service
	task   *taskRun // nil for group services
	Consul bool
}

// serviceID is Nomad's MakeAllocServiceID (client/serviceregistration/id.go):
// _nomad-task-<alloc>-<task|group-<group>>-<service>-<port label>. The port label is
// always joined, so a service without one ends in "-"; tags play no part.
func serviceID(allocID, owner string, s *api.Service) string {
	return "_nomad-task-" + allocID + "-" + owner + "-" + s.Name + "-" + s.PortLabel
}

// nomadCheckID is a stable identifier for a Nomad-native check of an allocation.
func nomadCheckID(allocID, group string, chk *api.ServiceCheck) string {
	h := sha256.Sum256([]byte(allocID + "\x00" + group + "\x00" + chk.Name + "\x00" + chk.Type))
	return hex.EncodeToString(h[:])
}

// consulCheckID is Nomad's _nomad-check-<hash> form.
func consulCheckID(serviceID string, chk *api.ServiceCheck) string {
	h := sha256.Sum256([]byte(serviceID + "\x00" + chk.Name + "\x00" + chk.Type))
	return "_nomad-check-" + hex.EncodeToString(h[:20])
}

// checkName is the name Nomad gives a check without one: service: "<name>" check.
func checkName(svc *api.Service, chk *api.ServiceCheck) string {
	if chk.Name != "" {
		return chk.Name
	}
	return fmt.Sprintf("service: %q check", svc.Name)
}

// checkMode is healthiness unless the check is excluded from deployment health.
func checkMode(chk *api.ServiceCheck) string {
	if chk.OnUpdate == "ignore" {
		return "readiness"
	}
	return "healthiness"
}

// scriptFor finds a check's script in task, group or job Meta (nomadsim.check.<name>).
func (ar *AllocRun) scriptFor(tr *taskRun, svc *api.Service, chk *api.ServiceCheck) checkScript {
	var t *api.Task
	if tr != nil {
		t = tr.Task
	}
	if tr != nil && tr.bad > 0 {
		// The workload loaded a bad value: its checks fail, while it answers (badShare).
		return checkScript{kind: "fail", bad: true}
	}
	job := ar.Alloc.Job
	for _, name := range []string{checkName(svc, chk), chk.Name} {
		if name == "" {
			continue
		}
		if s, ok := ar.c.checkOverrides[ar.Job][name]; ok {
			return s
		}
		if v, ok := lookupMeta(job, ar.Group, t, metaCheckPrefix+name); ok {
			return parseCheckScript(v)
		}
	}
	return checkScript{kind: "pass"}
}

// base returns the time the checked workload last started and whether it runs now: the
// task for task services, the group's main tasks (all running) for group services. A
// task's workload runs through the group shutdown_delay of a stop, until the task is
// killed; a group's counts as down from the stop on (its services are deregistered then).
func (ar *AllocRun) base(tr *taskRun) (time.Time, bool) {
	if !ar.Received {
		return time.Time{}, false
	}
	if tr != nil {
		if ar.killingTasks() || tr.State.State != TaskRunning || tr.killing {
			return time.Time{}, false
		}
		return tr.State.StartedAt, true
	}
	if ar.Stopping {
		return time.Time{}, false
	}
	return ar.mainTasksStarted(func(t *taskRun) bool { return t.State.State == TaskRunning && !t.killing })
}

// eachService calls visit with each service of the allocation: the group's (with a nil
// task), then each task's, in the job's order.
func (ar *AllocRun) eachService(visit func(tr *taskRun, svc *api.Service)) {
	for _, svc := range ar.Group.Services {
		visit(nil, svc)
	}
	for _, tr := range ar.Tasks {
		for _, svc := range tr.Task.Services {
			visit(tr, svc)
		}
	}
}

// mainTasksStarted returns when the last of the group's main tasks started, and whether
// there is one and every one is up, as up judges it.
func (ar *AllocRun) mainTasksStarted(up func(t *taskRun) bool) (time.Time, bool) {
	var latest time.Time
	any := false
	for _, t := range ar.Tasks {
		if t.kind != kindMain {
			continue
		}
		any = true
		if !up(t) {
			return time.Time{}, false
		}
		if t.State.StartedAt.After(latest) {
			latest = t.State.StartedAt
		}
	}
	return latest, any
}

// killingTasks says the client is killing the allocation's tasks: it stops, past the group
// shutdown_delay (killPhase -1 while that is waited).
func (ar *AllocRun) killingTasks() bool { return ar.Stopping && ar.killPhase != -1 }

// baseSample is a checked workload's state from a moment on: when it last started and
// whether it runs.
type baseSample struct {
	at, start time.Time
	up        bool
}

// maxBaseSamples bounds each workload's history: a check is judged at its latest run, at
// most one interval ago, and a workload changes state a few times per restart.
const maxBaseSamples = 16

// recordBases appends the checked workloads' states that changed since their last sample.
func (ar *AllocRun) recordBases() {
	now := ar.c.Clock.Now()
	record := func(tr *taskRun) {
		start, up := ar.base(tr)
		h := ar.bases[tr]
		if n := len(h); n > 0 && h[n-1].up == up && h[n-1].start.Equal(start) {
			return
		}
		if ar.bases == nil {
			ar.bases = map[*taskRun][]baseSample{}
		}
		if len(h) >= maxBaseSamples {
			h = append(h[:0], h[1:]...)
		}
		ar.bases[tr] = append(h, baseSample{at: now, start: start, up: up})
	}
	if hasChecks(ar.Group.Services) {
		record(nil)
	}
	for _, tr := range ar.Tasks {
		if hasChecks(tr.Task.Services) {
			record(tr)
		}
	}
}

func hasChecks(svcs []*api.Service) bool {
	for _, s := range svcs {
		if s != nil && len(s.Checks) > 0 {
			return true
		}
	}
	return false
}

// baseAt is the workload's state at moment at, as base reported it then (not running
// before anything was recorded).
func (ar *AllocRun) baseAt(tr *taskRun, at time.Time) (time.Time, bool) {
	h := ar.bases[tr]
	for i := len(h) - 1; i >= 0; i-- {
		if !h[i].at.After(at) {
			return h[i].start, h[i].up
		}
	}
	return time.Time{}, false
}

// ServicesChanged registers and deregisters the allocation's services, in Nomad's service
// table and in Consul, as Nomad's hooks do: group services from the allocation's start on
// the client until it is stopped (and, during an in-place restart, not while the group
// shutdown_delay is waited); task services while their task runs, until it is signaled.
//
// Nomad's order (client/allocrunner): on an in-place restart of the allocation,
// restartTasks runs the task-restart hooks before it restarts any task, and the group
// service hook's PreTaskRestart is preKillLocked (deregister the group services, then wait
// the group shutdown_delay) followed by preRunLocked (register them again), so the services
// are back, and Consul's checks critical, while the old processes still run; see
// restartAlloc. On a stop, killTasks runs the PreKill hooks first (the same deregistration
// and delay) and only then kills the tasks, whose task service hook deregisters their own
// services in PreKilling, that is when each task is killed (or signaled for a restart);
// see stop, taskRun.kill and taskRun.restart. (Read in hashicorp/nomad:
// client/allocrunner/group_service_hook.go, alloc_runner.go restartTasks and killTasks,
// taskrunner/service_hook.go PreKilling and taskrunner/lifecycle.go Restart.)
func (ar *AllocRun) ServicesChanged() {
	c := ar.c
	ar.recordBases()
	want := map[string]*svcReg{}
	addr := ar.Node.Node.Attributes["unique.network.ip-address"]
	if c.Options.ServeInstances {
		addr = instanceHost
	}
	add := func(tr *taskRun, owner string, svc *api.Service) {
		if tr == nil {
			if !ar.Received || ar.Stopping || ar.ClientTerminal() || ar.Restarting > 0 {
				return
			}
		} else if _, up := ar.base(tr); !up {
			return
		}
		id := serviceID(ar.Alloc.ID, owner, svc)
		want[id] = &svcReg{svc: svc, task: tr, Consul: svc.Provider != "nomad", Reg: &api.ServiceRegistration{
			ID: id, ServiceName: svc.Name, Namespace: ar.Alloc.Namespace, NodeID: ar.Node.Node.ID,
			Datacenter: ar.Node.Node.Datacenter, JobID: ar.Alloc.JobID, AllocID: ar.Alloc.ID,
			Tags: append([]string{}, svc.Tags...), Address: addr, Port: ar.port(svc.PortLabel),
		}}
	}
	ar.eachService(func(tr *taskRun, svc *api.Service) {
		if tr == nil {
			add(nil, "group-"+*ar.Group.Name, svc)
		} else {
			add(tr, tr.Task.Name, svc)
		}
	})
	changed := false
	for id, r := range ar.Services {
		if _, ok := want[id]; !ok {
			c.deregisterService(r)
			delete(ar.Services, id)
			changed = true
		}
	}
	for id, r := range want {
		if _, ok := ar.Services[id]; ok {
			continue
		}
		if ar.Services == nil {
			ar.Services = map[string]*svcReg{}
		}
		ar.Services[id] = r
		c.registerService(ar, r)
		changed = true
	}
	if changed && !ar.consulOnly() {
		i := c.Bump(TableServices)
		for _, r := range ar.Services {
			if r.Reg.CreateIndex == 0 {
				r.Reg.CreateIndex, r.Reg.ModifyIndex = i, i
			}
		}
	}
	ar.checkHealth()
	ar.syncInstances()
}

func (ar *AllocRun) consulOnly() bool {
	for _, r := range ar.Services {
		if !r.Consul {
			return false
		}
	}
	return len(ar.Services) > 0
}

// deregisterServices removes every service of the allocation.
func (ar *AllocRun) deregisterServices() {
	if len(ar.Services) == 0 {
		return
	}
	for id, r := range ar.Services {
		ar.c.deregisterService(r)
		delete(ar.Services, id)
	}
	ar.c.Bump(TableServices)
}

// port is the port of a port label: its instance's when the cluster serves instances,
// else a stable made-up one in [20000, 30000).
func (ar *AllocRun) port(label string) int {
	if label == "" {
		return 0
	}
	if in := ar.insts[label]; in != nil {
		return in.port
	}
	h := sha256.Sum256([]byte(ar.Alloc.ID + label))
	return 20000 + (int(h[0])<<8|int(h[1]))%10000
}

func (c *Cluster) registerService(ar *AllocRun, r *svcReg) {
	if !r.Consul {
		key := ar.Alloc.Namespace + "\x00" + r.Reg.ServiceName
		m := c.ServicesByName[key]
		if m == nil {
			m = map[string]*svcReg{}
			c.ServicesByName[key] = m
		}
		m[r.Reg.ID] = r
		return
	}
	c.consulRegister(ar, r)
}

func (c *Cluster) deregisterService(r *svcReg) {
	if !r.Consul {
		key := r.Reg.Namespace + "\x00" + r.Reg.ServiceName
		if m := c.ServicesByName[key]; m != nil {
			delete(m, r.Reg.ID)
			if len(m) == 0 {
				delete(c.ServicesByName, key)
			}
		}
		return
	}
	c.consulDeregister(r)
}

// CheckStatuses answers /v1/client/allocation/:id/checks: Nomad-native checks only, as
// Nomad's checks hook keeps them. Each check is probed every interval, first half an
// interval after the allocation started on the client, and reports its latest probe,
// stamped with the second it began; before the first probe it is pending. A probe judges
// the workload as it was at that moment: it fails while the workload is down, and follows
// the check's script while it runs. So, as on a real client, whose checks hook has no
// restart hook, the result from before an in-place restart stays until the check runs
// again. Results are purged when the allocation is stopped (the hook's PreKill).
func (ar *AllocRun) CheckStatuses() map[string]*checkResult {
	out := map[string]*checkResult{}
	if !ar.Received || ar.Stopping || ar.ClientTerminal() {
		return out
	}
	now := ar.c.Clock.Now()
	each := func(tr *taskRun, svc *api.Service) {
		if svc.Provider != "nomad" {
			return
		}
		for k := range svc.Checks {
			chk := &svc.Checks[k]
			id := nomadCheckID(ar.Alloc.ID, *ar.Group.Name, chk)
			res := &checkResult{
				ID: id, Mode: checkMode(chk), Check: checkName(svc, chk), Group: ar.Alloc.Name,
				Service: svc.Name, Timestamp: ar.deployStart.Unix(),
				Status: "pending", Output: "nomad: waiting to run",
			}
			if tr != nil {
				res.Task = tr.Task.Name
			}
			out[id] = res
			interval := chk.Interval
			if interval <= 0 {
				interval = 10 * time.Second
			}
			first := ar.deployStart.Add(interval / 2)
			if now.Before(first) {
				continue
			}
			probe := first.Add(now.Sub(first) / interval * interval)
			res.Timestamp = probe.Unix()
			start, up := ar.baseAt(tr, probe)
			sc := ar.scriptFor(tr, svc, chk)
			origin := sc.origin(start)
			if up && !start.After(probe) && sc.passing(probe.Sub(origin)) {
				res.Status, res.Output, res.StatusCode = "success", "nomad: http ok", 200
				if chk.Type == "tcp" {
					res.Output, res.StatusCode = "nomad: tcp ok", 0
				}
				continue
			}
			res.Status, res.Output, res.StatusCode = "failure", "nomad: simulated check failure", 503
			if chk.Type == "tcp" || !up || start.After(probe) {
				res.Output, res.StatusCode = "nomad: dial tcp: connection refused", 0
			}
		}
	}
	ar.eachService(each)
	return out
}

// SortedRegs returns registrations ordered by ID.
func SortedRegs(m map[string]*svcReg) []*api.ServiceRegistration {
	out := make([]*api.ServiceRegistration, 0, len(m))
	for _, r := range m {
		out = append(out, r.Reg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// checkResult is one check's status as the client checks endpoint answers it (the shape of
// the api module's AllocCheckStatus; Task is omitted for group services, as Nomad does).
type checkResult struct {
	Check      string
	Group      string
	ID         string
	Mode       string
	Output     string
	Service    string
	Status     string
	StatusCode int
	Task       string `json:",omitempty"`
	Timestamp  int64
}

// ScriptCheck overrides, from now on, the script of the named check in every allocation of
// the job (see the package documentation for scripts; "" removes the override). Check
// results restart their clock at the override: pass_after=3s passes 3 s after this call
// for tasks already running.
func (c *Cluster) ScriptCheck(namespace, jobID, check, script string) {
	if namespace == "" {
		namespace = "default"
	}
	c.Mu.Lock()
	defer c.Mu.Unlock()
	k := JobKey{namespace, jobID}
	if script == "" {
		delete(c.checkOverrides[k], check)
	} else {
		if c.checkOverrides[k] == nil {
			c.checkOverrides[k] = map[string]checkScript{}
		}
		sc := parseCheckScript(script)
		sc.since = c.Clock.Now()
		c.checkOverrides[k][check] = sc
	}
	j := c.Jobs[k]
	if j == nil {
		return
	}
	// Nomad's checks judge the new script at their next run, and so do Consul's runners.
	for _, ar := range j.Allocs {
		if !ar.Terminal() {
			ar.checkHealth()
			ar.syncInstances()
		}
	}
}
