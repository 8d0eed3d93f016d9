package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// budgetCheckedJob has a group service on Nomad with a healthiness check "alive" and a
// readiness check "ready" (on_update ignore), and a task service on Consul with "http"
// (ignore_warnings) and "tcp" (require_healthy).
func budgetCheckedJob() *api.Job {
	task := api.NewTask("app", "raw_exec")
	task.Services = []*api.Service{{Name: "web-api", PortLabel: "http", Provider: "consul", Checks: []api.ServiceCheck{
		{Name: "http", Type: "http", OnUpdate: health.OnUpdateIgnoreWarnings, Interval: time.Second},
		{Name: "tcp", Type: "tcp", Interval: time.Second},
	}}}
	tg := api.NewTaskGroup("web", 4).AddTask(task)
	tg.Services = []*api.Service{{Name: "web-admin", PortLabel: "admin", Provider: "nomad", Checks: []api.ServiceCheck{
		{Name: "alive", Type: "tcp", Interval: time.Second},
		{Name: "ready", Type: "tcp", OnUpdate: health.OnUpdateIgnore, Interval: time.Second},
	}}}
	j := api.NewServiceJob("web", "web", "global", 50)
	j.TaskGroups = []*api.TaskGroup{tg}
	return j
}

// fakeChecks answers Nomad's checks endpoint from a map, counting calls and the most in
// flight at once. Each answer is stamped as a run that began a second after the read: the
// fake cluster's clock follows the local clock by a millisecond per event, so the result
// counts as the restarted task's own (the gate's rule on stale results is tested in
// internal/health and end to end on nomadsim).
type fakeChecks struct {
	mu       sync.Mutex
	results  map[string][]cluster.CheckResult
	errs     map[string]error
	calls    map[string]int
	inFlight int
	peak     int
}

func newFakeChecks() *fakeChecks {
	return &fakeChecks{results: map[string][]cluster.CheckResult{}, errs: map[string]error{}, calls: map[string]int{}}
}

func (f *fakeChecks) AllocChecks(_ context.Context, id string) ([]cluster.CheckResult, error) {
	f.mu.Lock()
	f.calls[id]++
	f.inFlight++
	f.peak = max(f.peak, f.inFlight)
	res, err := slices.Clone(f.results[id]), f.errs[id]
	f.mu.Unlock()
	ran := time.Now().Add(time.Second).Truncate(time.Second)
	for i := range res {
		res[i].Time = ran
	}
	time.Sleep(time.Millisecond) // long enough for concurrent reads to overlap
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
	return res, err
}

func (f *fakeChecks) set(id, aliveStatus, readyStatus string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results[id] = []cluster.CheckResult{
		{ID: id + "-alive", Name: "alive", Service: "web-admin", Mode: health.ModeHealthiness, Status: aliveStatus},
		{ID: id + "-ready", Name: "ready", Service: "web-admin", Mode: health.ModeReadiness, Status: readyStatus},
	}
}

// fakeConsul serves Consul's /v1/health/checks/<service> from a map; a service listed in
// hidden answers empty as filtered by ACLs, one in broken answers 500.
type fakeConsul struct {
	mu     sync.Mutex
	checks map[string][]*consulapi.HealthCheck
	hidden map[string]bool
	broken map[string]bool
	calls  map[string]int
}

func startFakeConsul(t *testing.T) (*fakeConsul, string) {
	t.Helper()
	fc := &fakeConsul{checks: map[string][]*consulapi.HealthCheck{}, hidden: map[string]bool{}, broken: map[string]bool{}, calls: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		svc, ok := strings.CutPrefix(r.URL.Path, "/v1/health/checks/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		fc.mu.Lock()
		fc.calls[svc]++
		checks, hidden, broken := fc.checks[svc], fc.hidden[svc], fc.broken[svc]
		fc.mu.Unlock()
		if broken {
			http.Error(w, "rpc error: no leader", http.StatusInternalServerError)
			return
		}
		w.Header().Set("X-Consul-Index", "7")
		w.Header().Set("X-Consul-LastContact", "0")
		w.Header().Set("X-Consul-KnownLeader", "true")
		if hidden {
			w.Header().Set("X-Consul-Results-Filtered-By-ACLs", "true")
			checks = nil
		}
		if checks == nil {
			checks = []*consulapi.HealthCheck{}
		}
		_ = json.NewEncoder(w).Encode(checks)
	}))
	t.Cleanup(srv.Close)
	return fc, srv.URL
}

// instance registers an allocation's instance of web-api with the given check statuses.
func (fc *fakeConsul) instance(allocID, httpStatus, tcpStatus string) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	sid := health.ServicePrefix(allocID) + "app-web-api-http"
	for name, st := range map[string]string{"http": httpStatus, "tcp": tcpStatus} {
		if st == "" {
			continue
		}
		fc.checks["web-api"] = append(fc.checks["web-api"], &consulapi.HealthCheck{Node: "n1", CheckID: sid + "-" + name,
			Name: name, Status: st, Output: name + " says " + st, ServiceID: sid, ServiceName: "web-api"})
	}
}

func budgetAlloc(i int, group string) *restart.Alloc {
	return &restart.Alloc{ID: fmt.Sprintf("%08d-0000-4000-8000-000000000000", i), Name: fmt.Sprintf("web.%s[%d]", group, i),
		Namespace: "default", JobID: "web", Group: group, DesiredStatus: restart.DesiredRun, ClientStatus: restart.ClientRunning,
		Tasks: map[string]restart.TaskState{"app": {State: restart.TaskRunning, StartedAt: time.Unix(1000, 0)}}}
}

// checksDriver is a driver of a restart of allocs under -health checks, batch i+1 holding
// allocs[i], reading the job budgetCheckedJob, Nomad checks from nomad and Consul at
// consulAddr, on a clock well after the tasks started.
func checksDriver(allocs []*restart.Alloc, nomad *fakeChecks, consulAddr string) *driver {
	e := New(Config{Holder: "budget:1", Health: HealthConfig{
		JobSpec: func(context.Context, string, string) (*onchange.JobSpec, error) {
			return cluster.NewJobSpec(budgetCheckedJob()), nil
		},
		Checks: nomad,
		Consul: health.ConsulDialer{Config: health.ConsulConfig{Address: consulAddr}},
		Clock:  func() time.Time { return time.Unix(2000, 0) },
	}})
	rec := &restart.Record{ID: "r", Spec: restart.Spec{Health: restart.HealthChecks}}
	for i, a := range allocs {
		rec.Allocs = append(rec.Allocs, restart.AllocProgress{ID: a.ID, Group: a.Group, Batch: i + 1})
	}
	rec.Batches = len(allocs)
	return &driver{e: e, id: "r", jobNS: "default", jobID: "web", log: e.log, rec: rec,
		changed: make(chan struct{}, 1), spec: normalizeSpec(rec.Spec)}
}

// TestBudgetChecksJudge: the budget judges an allocation outside the batch by the gate's
// rules: readiness failures and Consul warnings on ignore_warnings checks let it serve;
// failures, pending Nomad checks, missing Consul instances and sources that cannot be read
// count it out of service, with the reason.
func TestBudgetChecksJudge(t *testing.T) {
	for _, tc := range []struct {
		name           string
		alive, ready   string // Nomad statuses ("": no result at all)
		nomadErr       error
		http, tcp      string // Consul statuses ("": not registered)
		hidden, broken bool
		want           string // "" passes; else a part of the reason
	}{
		{name: "all passing", alive: "success", ready: "success", http: "passing", tcp: "passing"},
		{name: "readiness failure ignored", alive: "success", ready: "failure", http: "passing", tcp: "passing"},
		{name: "warning on ignore_warnings", alive: "success", ready: "success", http: "warning", tcp: "passing"},
		{name: "warning on require_healthy", alive: "success", ready: "success", http: "passing", tcp: "warning", want: "check tcp (consul) warning: tcp says warning"},
		{name: "nomad healthiness failure", alive: "failure", ready: "success", http: "passing", tcp: "passing", want: "check alive (nomad) failure"},
		{name: "nomad pending", alive: "pending", ready: "success", http: "passing", tcp: "passing", want: "check alive (nomad) pending"},
		{name: "nomad unreadable", nomadErr: errors.New("node down"), http: "passing", tcp: "passing", want: "Nomad checks unreadable"},
		{name: "consul critical", alive: "success", ready: "success", http: "critical", tcp: "passing", want: "check http (consul) critical"},
		{name: "consul not registered", alive: "success", ready: "success", want: "not registered"},
		{name: "consul unreadable", alive: "success", ready: "success", broken: true, want: "Consul checks unreadable"},
		{name: "consul hidden by ACLs", alive: "success", ready: "success", hidden: true, want: "are hidden from this token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocs := []*restart.Alloc{budgetAlloc(0, "web"), budgetAlloc(1, "web")}
			other := allocs[1].ID
			nomad := newFakeChecks()
			if tc.alive != "" {
				nomad.set(other, tc.alive, tc.ready)
			}
			if tc.nomadErr != nil {
				nomad.errs[other] = tc.nomadErr
			}
			consul, addr := startFakeConsul(t)
			consul.instance(other, tc.http, tc.tcp)
			consul.hidden["web-api"], consul.broken["web-api"] = tc.hidden, tc.broken

			c := newBudgetChecks(checksDriver(allocs, nomad, addr), 1)
			c.read(t.Context(), allocs)
			got := c.failing(allocs)
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("failing %v, want none", got)
			case tc.want != "" && !strings.Contains(got[other], tc.want):
				t.Fatalf("failing %v, want %s: %q", got, other, tc.want)
			}
			if consul.calls["web-api"] != 1 || nomad.calls[other] != 1 {
				t.Errorf("reads: consul %v, nomad %v; want one of each", consul.calls, nomad.calls)
			}
		})
	}
}

// TestBudgetChecksCandidates: only allocations of the batch's groups, outside the batch,
// not accepted as failed and serving by task state are read; Consul is read once per
// service for all of them; an allocation that starts serving after a read counts as
// failing until the next read.
func TestBudgetChecksCandidates(t *testing.T) {
	inBatch, accepted, pending, other, good, bad := budgetAlloc(0, "web"), budgetAlloc(1, "web"), budgetAlloc(2, "web"),
		budgetAlloc(3, "api"), budgetAlloc(4, "web"), budgetAlloc(5, "web")
	pending.Tasks = map[string]restart.TaskState{"app": {State: restart.TaskPending}}
	allocs := []*restart.Alloc{inBatch, accepted, pending, other, good, bad}
	nomad := newFakeChecks()
	consul, addr := startFakeConsul(t)
	for _, a := range allocs {
		nomad.set(a.ID, "failure", "success")
		consul.instance(a.ID, "passing", "passing")
	}
	nomad.set(good.ID, "success", "success")
	d := checksDriver(allocs, nomad, addr)
	d.rec.Allocs[1].State = restart.AllocFailed

	c := newBudgetChecks(d, 1)
	c.read(t.Context(), allocs)
	got := c.failing(allocs)
	if len(got) != 1 || !strings.Contains(got[bad.ID], "check alive (nomad) failure") {
		t.Fatalf("failing %v, want only %s", got, bad.ID)
	}
	for _, a := range []*restart.Alloc{inBatch, accepted, pending, other} {
		if n := nomad.calls[a.ID]; n != 0 {
			t.Errorf("%s read %d times; it does not count", a.Name, n)
		}
	}
	if n := consul.calls["web-api"]; n != 1 {
		t.Errorf("Consul read %d times, want once for every instance", n)
	}
	// The pending allocation runs now: unread, it fails until the next read.
	pending.Tasks = map[string]restart.TaskState{"app": {State: restart.TaskRunning, StartedAt: time.Unix(1500, 0)}}
	if why := c.failing(allocs)[pending.ID]; why != "checks not yet read" {
		t.Fatalf("newly serving allocation: %q", why)
	}
	if c.due() <= 0 {
		t.Fatalf("a read is due at once after a read")
	}

	// restart.Budgets counts the failing allocations out of service, and says why; the batch's
	// own and the accepted one serve by their task states.
	job := &restart.Job{ID: "web", Type: "service", Groups: []restart.Group{{Name: "web", Count: 5}}}
	d.rec.Allocs[1].State = restart.AllocFailed
	c.read(t.Context(), allocs)
	bs := restart.Budgets(d.rec, d.spec, job, 1, allocs, c.failing(allocs))
	if len(bs) != 1 {
		t.Fatalf("budgets %+v", bs)
	}
	g := bs[0]
	if g.Failing != 2 || g.Serving != 3 || g.Fits() || !strings.Contains(g.Why(), "2 failing their health checks, allocation ") {
		t.Fatalf("budget %+v: %s", g, g.Why())
	}
}

// TestBudgetChecksBound: above budgetChecksMaxAllocs checked allocations outside the
// batch, a group's Nomad checks are not read (nor counted), and the restart says so once;
// at the bound they are all read, at most budgetChecksParallel at once.
func TestBudgetChecksBound(t *testing.T) {
	for _, n := range []int{budgetChecksMaxAllocs, budgetChecksMaxAllocs + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			allocs := []*restart.Alloc{budgetAlloc(0, "web")}
			nomad := newFakeChecks()
			consul, addr := startFakeConsul(t)
			for i := 1; i <= n; i++ {
				a := budgetAlloc(i, "web")
				allocs = append(allocs, a)
				nomad.set(a.ID, "failure", "success")
				consul.instance(a.ID, "passing", "passing")
			}
			d := checksDriver(allocs, nomad, addr)
			c := newBudgetChecks(d, 1)
			c.read(t.Context(), allocs)
			got := c.failing(allocs)
			reads := 0
			for _, k := range nomad.calls {
				reads += k
			}
			if n <= budgetChecksMaxAllocs {
				if len(got) != n || reads != n || nomad.peak > budgetChecksParallel || len(c.takeNotes()) != 0 {
					t.Fatalf("%d failing, %d reads, peak %d: want %d, %d, at most %d", len(got), reads, nomad.peak, n, n, budgetChecksParallel)
				}
				return
			}
			if len(got) != 0 || reads != 0 {
				t.Fatalf("%d failing, %d reads above the bound", len(got), reads)
			}
			d.noteBudgetChecks(1, c)
			c.read(t.Context(), allocs)
			d.noteBudgetChecks(1, c)
			d.noteBudgetChecks(2, newBudgetChecksRead(t, d, 2, allocs))
			var notes []string
			for _, e := range d.rec.Events {
				if e.Type == restart.EventWarning {
					notes = append(notes, e.Message)
				}
			}
			if len(notes) != 1 || !strings.Contains(notes[0], `The Nomad health checks of group "web" are not counted`) {
				t.Fatalf("warnings %q, want one", notes)
			}
		})
	}
}

func newBudgetChecksRead(t *testing.T, d *driver, b int, allocs []*restart.Alloc) *budgetChecks {
	c := newBudgetChecks(d, b)
	c.read(t.Context(), allocs)
	return c
}

// TestBudgetChecksOff: without -health checks, nothing is read and nothing fails.
func TestBudgetChecksOff(t *testing.T) {
	allocs := []*restart.Alloc{budgetAlloc(0, "web"), budgetAlloc(1, "web")}
	nomad := newFakeChecks()
	nomad.set(allocs[1].ID, "failure", "failure")
	d := checksDriver(allocs, nomad, "127.0.0.1:1")
	d.spec.Health = restart.HealthRunning
	c := newBudgetChecks(d, 1)
	c.read(t.Context(), allocs)
	if c != nil || len(c.failing(allocs)) != 0 || len(nomad.calls) != 0 || c.due() > 0 {
		t.Fatalf("checks read without -health checks: %v", nomad.calls)
	}
}

// TestBudgetWaitsForFailingChecks: on the fake cluster, one allocation outside the first
// batch fails its Nomad check; the first batch waits, naming it, re-reading the checks
// while it waits (there is no blocking query on them), and starts once the check passes.
func TestBudgetWaitsForFailingChecks(t *testing.T) {
	fc := newFakeCluster("service", map[string]int{"web": 3})
	nomad := newFakeChecks()
	for id := range fc.allocs {
		nomad.set(id, "success", "success")
	}
	e := New(Config{Cluster: fc, Store: newMemStore(), Holder: "test:1", Health: HealthConfig{
		TimeScale: 100,
		Checks:    nomad,
		JobSpec: func(context.Context, string, string) (*onchange.JobSpec, error) {
			tg := api.NewTaskGroup("web", 3).AddTask(api.NewTask("main", "raw_exec"))
			tg.Services = []*api.Service{{Name: "web-admin", Provider: "nomad", Checks: []api.ServiceCheck{
				{Name: "alive", Type: "tcp", Interval: time.Second}, {Name: "ready", Type: "tcp", Interval: time.Second}}}}
			j := api.NewServiceJob("web", "web", "global", 50)
			j.TaskGroups = []*api.TaskGroup{tg}
			return cluster.NewJobSpec(j), nil
		},
	}})
	rec := planAndCreate(t, e, restart.Spec{Health: restart.HealthChecks, Yes: true, MinHealthyTimeGiven: true, OnError: restart.OnErrorFail})
	bad := rec.Allocs[len(rec.Allocs)-1].ID
	nomad.set(bad, "failure", "success")
	wait, cancel := driveAsync(e, rec)
	defer cancel()
	s := e.store.(*memStore)
	r := waitStatus(t, s, rec, func(r *restart.Record) bool { return strings.Contains(r.Allocs[0].Waiting, "availability budget") })
	if !strings.Contains(r.Allocs[0].Waiting, "1 failing its health checks, allocation "+short(bad)+": check alive (nomad) failure") {
		t.Fatalf("waiting %q", r.Allocs[0].Waiting)
	}
	if n := len(fc.counts(false)); n != 0 {
		t.Fatalf("%d allocations restarted while the budget was spent", n)
	}
	// Nothing else changes: only a re-read of the checks can let the batch start.
	nomad.set(bad, "success", "success")
	final := waitEnded(t, wait, restart.StatusSucceeded)
	assertOnce(t, fc.counts(false), final)
}

// BenchmarkBudgetChecksRead: one read of the checks of a group at the bound, the Nomad
// endpoint answering in about a millisecond.
func BenchmarkBudgetChecksRead(b *testing.B) {
	allocs := []*restart.Alloc{budgetAlloc(0, "web")}
	nomad := newFakeChecks()
	for i := 1; i <= budgetChecksMaxAllocs; i++ {
		a := budgetAlloc(i, "web")
		allocs = append(allocs, a)
		nomad.set(a.ID, "success", "success")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Consul-LastContact", "0")
		_, _ = w.Write([]byte("[]"))
	}))
	defer srv.Close()
	d := checksDriver(allocs, nomad, srv.URL)
	b.ResetTimer()
	for b.Loop() {
		c := newBudgetChecks(d, 1)
		c.read(b.Context(), allocs)
		if len(c.failing(allocs)) != budgetChecksMaxAllocs {
			b.Fatal("the Consul service has no instances: every allocation should fail its checks")
		}
	}
}

// eventLines is a record's event log, one line per event, for failure messages.
func eventLines(r *restart.Record) string {
	var b strings.Builder
	for _, ev := range r.Events {
		fmt.Fprintf(&b, "%s %s %s %s\n", ev.Time.Format("15:04:05.000"), ev.Type, short(ev.AllocID), ev.Message)
	}
	return b.String()
}

// TestJudgeTakesWhatTheGateProved: the budget reads a Consul check once per batch, which
// cannot show that its status changed since the task's restart; an allocation whose own gate
// saw it change (proved it healthy after its latest start) serves, one restarted since does
// not until the check can have run again.
func TestJudgeTakesWhatTheGateProved(t *testing.T) {
	start := time.Unix(1000, 0)
	restarted := budgetAlloc(1, "web")
	ts := restarted.Tasks["app"]
	ts.Restarts = 1
	restarted.Tasks["app"] = ts
	spec := health.CheckSpec{Provider: health.ProviderConsul, Service: "web-api", Task: "app", Name: "http",
		OnUpdate: health.OnUpdateRequireHealthy, Interval: 5 * time.Second, Timeout: time.Second}
	now := start.Add(3 * time.Second)
	passing := &health.Snapshot{Provider: health.ProviderConsul, At: now, Checks: []health.Check{{Provider: health.ProviderConsul,
		ID: "c1", Name: "http", Service: "web-api", Task: "app", Status: health.ConsulPassing}}}
	it := budgetItem{restarted, []health.CheckSpec{spec}}
	tests := []struct {
		name     string
		provenAt time.Time
		want     string
	}{
		{"never proved: the check may not have run since the restart", time.Time{}, "check http (consul): no result since the restart"},
		{"proved after the latest start", start.Add(2 * time.Second), ""},
		{"proved before the latest start", start.Add(-time.Second), "check http (consul): no result since the restart"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judge(it, now, tt.provenAt, passing); !strings.HasPrefix(got, tt.want) || (tt.want == "") != (got == "") {
				t.Fatalf("judge: %q, want %q", got, tt.want)
			}
		})
	}
}

// budgetChecksLate is how long (Nomad's time) the checks of the jobs below fail after their
// task starts: a window in which one allocation restarted by hand fails its checks while
// the others pass. It must outlast the budget's wait of budgetChecksWait (real time,
// budgetChecksWait*gateScale of Nomad's) with room to spare.
const (
	budgetChecksLate = 60 * time.Second
	budgetChecksWait = time.Second
)

// TestBudgetCountsFailingChecks: a 4-allocation group one of whose allocations (not in the
// first batch) runs but fails its checks before the restart; with -max-unavailable 1 the
// first batch waits, saying which check fails, and at the deadline -on-error fail stops
// the restart with nothing restarted. One case per check provider.
func TestBudgetCountsFailingChecks(t *testing.T) {
	for _, provider := range []string{"nomad", "consul"} {
		t.Run(provider, func(t *testing.T) {
			env := startGateSim(t, "")
			script := "pass_after=" + budgetChecksLate.String()
			job := budgetE2EJob(provider, script)
			env.registerJob(t, job) // healthy once the checks pass, budgetChecksLate after start
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()

			spec := restart.Spec{Health: restart.HealthChecks, Yes: true, OnError: restart.OnErrorFail,
				MaxUnavailable: &restart.BatchSize{N: 1}, HealthyDeadline: budgetChecksWait, HealthyDeadlineGiven: true}
			p, err := env.e.Plan(ctx, Request{Job: "web", Spec: spec})
			if err != nil {
				t.Fatal(err)
			}
			// The last allocation in batch order restarts by hand: its checks fail again
			// for budgetChecksLate, while the others' pass.
			target := p.Record.Allocs[len(p.Record.Allocs)-1].ID
			a, _, err := env.client.Allocations().Info(target, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := env.client.Allocations().RestartAllTasks(a, nil); err != nil {
				t.Fatal(err)
			}
			waitChecks(ctx, t, env, provider, target)
			before := taskRestarts(t, env)

			rec := env.plan(t, "web", spec)
			if rec.Allocs[0].ID == target {
				t.Fatalf("the failing allocation is in the first batch: the test proves nothing")
			}
			final, dt := env.driveGate(t, rec)
			first := final.Allocs[0]
			if final.Status != restart.StatusFailed || first.State != restart.AllocFailed ||
				!strings.Contains(first.Error, "availability budget") || !strings.Contains(first.Error, "1 failing its health checks, allocation "+short(target)) {
				t.Fatalf("status %s (%s), first allocation %s %q\n%s", final.Status, final.Reason, first.State, first.Error, dt.log.messages())
			}
			if !strings.Contains(dt.log.messages(), "check ready-"+provider) {
				t.Errorf("no event names the failing check:\n%s", dt.log.messages())
			}
			after := taskRestarts(t, env)
			for id, n := range before {
				if after[id] != n {
					t.Errorf("allocation %s restarted while the budget was spent (%d restarts, then %d)", id, n, after[id])
				}
			}
		})
	}
}

// TestBudgetChecksPassingRestarts: the same job, every check passing, restarts normally.
func TestBudgetChecksPassingRestarts(t *testing.T) {
	env := startGateSim(t, "")
	env.registerJob(t, budgetE2EJob("nomad", "pass"))
	// The checks' first results may predate the tasks' start (the deployment judged
	// health by the script): the restart begins once every check reports passing.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	waitChecks(ctx, t, env, "nomad", "")
	rec := env.plan(t, "web", restart.Spec{Health: restart.HealthChecks, Yes: true, OnError: restart.OnErrorFail,
		MaxUnavailable: &restart.BatchSize{N: 1}})
	final, dt := env.driveGate(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
	}
	env.checkOnce(t, final)
	if strings.Contains(dt.log.messages(), "availability budget") {
		t.Errorf("a batch waited for the budget:\n%s", dt.log.messages())
	}
}

// budgetE2EJob is checkedJob with four allocations and one provider's check scripted.
func budgetE2EJob(provider, script string) *api.Job {
	nomadScript, consulScript := script, ""
	if provider == "consul" {
		nomadScript, consulScript = "", script
	}
	return checkedJob("web", 4, nomadScript, consulScript, 100*time.Millisecond, 10*time.Minute)
}

// waitChecks waits until the failing allocation's check fails ("": none) and every other
// allocation's passes, as the provider reports them.
func waitChecks(ctx context.Context, t *testing.T, env *simEnv, provider, failing string) {
	t.Helper()
	consul, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(env.sim.ConsulAddr(), "http://")})
	if err != nil {
		t.Fatal(err)
	}
	for {
		stubs, _, err := env.client.Jobs().Allocations("web", false, nil)
		if err != nil {
			t.Fatal(err)
		}
		ok := len(stubs) == 4
		for _, s := range stubs {
			if s.ClientStatus != "running" || s.TaskStates["app"] == nil || s.TaskStates["app"].State != "running" {
				ok = false
				continue
			}
			status := ""
			if provider == "nomad" {
				checks, err := env.client.Allocations().Checks(s.ID, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range checks {
					status = c.Status
				}
			} else {
				checks, _, err := consul.Health().Checks("web-api", nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range checks {
					if strings.HasPrefix(c.ServiceID, health.ServicePrefix(s.ID)) {
						status = c.Status
					}
				}
			}
			want := map[bool]map[string]string{true: {"nomad": "failure", "consul": "critical"},
				false: {"nomad": "success", "consul": "passing"}}[s.ID == failing][provider]
			ok = ok && status == want
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("checks never settled with only %q failing", failing)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// taskRestarts is the restart count of each allocation's task.
func taskRestarts(t *testing.T, env *simEnv) map[string]uint64 {
	t.Helper()
	stubs, _, err := env.client.Jobs().Allocations("web", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, s := range stubs {
		if ts := s.TaskStates["app"]; ts != nil {
			out[s.ID] = ts.Restarts
		}
	}
	return out
}
