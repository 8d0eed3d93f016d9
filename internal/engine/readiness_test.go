package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// gateScale runs nomadsim fast enough for checks that pass seconds after a start, and
// slower than simtest.TimeScale: the gate reads the checks on real time, and each check's
// state must last long enough for it to be read.
const gateScale = 20

// startGateSim is an engine on nomadsim whose gates read Nomad's clock from the simulation
// and Consul from the simulation's health API (or consulAddr when given).
func startGateSim(t testing.TB, consulAddr string) *simEnv {
	t.Helper()
	return startGateSimScale(t, consulAddr, gateScale)
}

// startGateSimScale is startGateSim at another time scale: a slower one where a test needs
// every change of a check to be seen (a flap).
func startGateSimScale(t testing.TB, consulAddr string, scale float64) *simEnv {
	t.Helper()
	sim := simtest.Start(t, nomadsim.Options{TimeScale: scale, Seed: 3})
	client := simtest.Client(t, sim)
	s := localStore(t)
	if consulAddr == "" {
		consulAddr = sim.ConsulAddr()
	}
	e := New(Config{Cluster: cluster.NewNomad(client), Store: s, Holder: "gate:1", Health: HealthConfig{
		Clock: sim.Now, TimeScale: scale,
		Consul: health.ConsulDialer{Config: health.ConsulConfig{Address: consulAddr, Wait: time.Second}},
	}})
	return &simEnv{sim: sim, client: client, e: e, store: s}
}

// startGateSimAs is an engine on nomadsim, at the gates' time scale, that enforces ACLs and
// that the engine reaches with a token of policy; the test reads the cluster (env.client)
// with the management token.
func startGateSimAs(t testing.TB, policy string) *simEnv {
	t.Helper()
	sim := simtest.Start(t, nomadsim.Options{TimeScale: gateScale, Seed: 3, ACLs: true})
	client := simtest.ClientAs(t, sim, simtest.Token(t, sim, "operator", policy))
	s := localStore(t)
	return &simEnv{sim: sim, client: simtest.ClientAs(t, sim, sim.BootstrapToken()), store: s,
		e: New(Config{Cluster: cluster.NewNomad(client), Store: s, Holder: "acl:1", Health: HealthConfig{Clock: sim.Now, TimeScale: gateScale}})}
}

// gateEngine is another process's Engine on env's simulation, with its own store handle.
func (env *simEnv) gateEngine(st store.Store, holder string) *Engine {
	return New(Config{Cluster: cluster.NewNomad(env.client), Store: st, Holder: holder, Health: HealthConfig{
		Clock: env.sim.Now, TimeScale: gateScale, Consul: health.ConsulDialer{Config: health.ConsulConfig{Address: env.sim.ConsulAddr(), Wait: time.Second}}}})
}

// checkedJob is a service job of count allocations whose group has a Nomad-native service
// (check "ready-nomad") and whose task has a Consul service (check "ready-consul"), scripted
// as given ("" leaves a provider out); the update block sets the gate's times.
func checkedJob(id string, count int, nomadScript, consulScript string, minHealthy, deadline time.Duration) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.Datacenters = []string{"dc1", "dc2"}
	task := api.NewTask("app", "raw_exec").SetConfig("command", "/bin/sleep")
	task.Resources = &api.Resources{CPU: ptr(10), MemoryMB: ptr(16)}
	tg := api.NewTaskGroup("web", count).AddTask(task)
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}, {Label: "admin"}}}}
	tg.Meta = map[string]string{}
	if consulScript != "" {
		task.Services = []*api.Service{{Name: id + "-api", PortLabel: "http", Provider: "consul",
			Checks: []api.ServiceCheck{{Name: "ready-consul", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
		tg.Meta["nomadsim.check.ready-consul"] = consulScript
	}
	if nomadScript != "" {
		tg.Services = []*api.Service{{Name: id + "-admin", PortLabel: "admin", Provider: "nomad",
			Checks: []api.ServiceCheck{{Name: "ready-nomad", Type: "tcp", Interval: time.Second, Timeout: time.Second}}}}
		tg.Meta["nomadsim.check.ready-nomad"] = nomadScript
	}
	tg.Update = &api.UpdateStrategy{MinHealthyTime: ptr(minHealthy), HealthyDeadline: ptr(deadline)}
	j.TaskGroups = []*api.TaskGroup{tg}
	return j
}

// doneTimes records, on the simulation's clock, when each allocation was recorded done.
type doneTimes struct {
	mu  sync.Mutex
	at  map[string]time.Time
	log eventLog
	now func() time.Time
}

func (d *doneTimes) sink(e restart.Event) {
	d.log.sink(e)
	if e.Type == restart.EventAllocDone {
		d.mu.Lock()
		d.at[e.AllocID] = d.now()
		d.mu.Unlock()
	}
}

func (env *simEnv) driveGate(t *testing.T, rec *restart.Record) (*restart.Record, *doneTimes) {
	t.Helper()
	dt := &doneTimes{at: map[string]time.Time{}, now: env.sim.Now}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	final, err := env.e.Drive(ctx, rec.Namespace, rec.ID, dt.sink)
	if err != nil {
		t.Fatalf("Drive: %v\n%s", err, dt.log.messages())
	}
	return final, dt
}

// TestGateWaitsForLateChecks: checks of both providers that pass 5s (Nomad's time) after
// the task starts, and 1s of min-healthy time: no allocation may count as done before 6s
// after its task started again, and every allocation must be restarted exactly once.
func TestGateWaitsForLateChecks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		nomad, consul string
		reschedule    bool
	}{
		{"mixed providers in place", "pass_after=5s", "pass_after=5s", false},
		{"nomad only in place", "pass_after=5s", "", false},
		{"consul only, reschedule", "", "pass_after=5s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startGateSim(t, "")
			env.registerJob(t, checkedJob("web", 3, tc.nomad, tc.consul, time.Second, time.Minute))
			rec := env.plan(t, "web", restart.Spec{Health: restart.HealthAuto, Yes: true, OnError: restart.OnErrorFail, Reschedule: tc.reschedule})
			if rec.Spec.Health != restart.HealthChecks {
				t.Fatalf("auto resolved to %q, want checks", rec.Spec.Health)
			}
			if g := rec.Spec.GroupHealth["web"]; g.MinHealthyTime != time.Second || g.HealthyDeadline != time.Minute {
				t.Fatalf("group times %+v, want the update block's 1s and 1m", g)
			}
			final, dt := env.driveGate(t, rec)
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
			}
			env.checkOnce(t, final)
			for _, p := range final.Allocs {
				id := p.ID
				if p.Replacement != "" {
					id = p.Replacement
				}
				a, _, err := env.client.Allocations().Info(id, nil)
				if err != nil {
					t.Fatal(err)
				}
				started := a.TaskStates["app"].StartedAt
				done, ok := dt.at[p.ID]
				if !ok {
					t.Fatalf("no done event for %s", p.ID)
				}
				if got := done.Sub(started); got < 6*time.Second {
					t.Errorf("allocation %s done %s after its task started; the checks pass after 5s and must then hold 1s", p.ID, got)
				}
			}
			if !strings.Contains(dt.log.messages(), "ready-") {
				t.Errorf("no event says which check was awaited:\n%s", dt.log.messages())
			}
		})
	}
}

// TestGateFailingAndFlappingChecks: a check that never passes, or flaps faster than the
// min-healthy time, fails the allocation at the healthy deadline with the reason; with
// -on-error fail nothing else is touched, with ask the restart asks.
func TestGateFailingAndFlappingChecks(t *testing.T) {
	for _, tc := range []struct {
		name, nomad, consul string
		onError             restart.OnError
		want                string
	}{
		{"nomad check fails, on-error fail", "fail", "pass", restart.OnErrorFail, "ready-nomad"},
		{"consul check flaps, on-error fail", "pass", "flap=1s", restart.OnErrorFail, "not healthy within the healthy deadline"},
		{"consul check fails, on-error ask", "", "fail", restart.OnErrorAsk, "ready-consul"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A flap of 1s is 200ms of real time at this scale: every change is seen.
			env := startGateSimScale(t, "", 5)
			env.registerJob(t, checkedJob("web", 2, tc.nomad, "pass", 3*time.Second, 8*time.Second))
			// Registered passing, then the script changes: the restart must see the new
			// processes' results, not the old ones'.
			if tc.nomad != "" {
				env.sim.ScriptCheck("default", "web", "ready-nomad", tc.nomad)
			}
			env.sim.ScriptCheck("default", "web", "ready-consul", tc.consul)
			rec := env.plan(t, "web", restart.Spec{Health: restart.HealthChecks, OnError: tc.onError})
			if tc.onError == restart.OnErrorAsk {
				wait, cancel := driveAsync(env.e, rec)
				defer cancel()
				r := waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.Status == restart.StatusWaiting })
				if r.Allocs[0].State != restart.AllocFailed || !strings.Contains(r.Allocs[0].Error, tc.want) {
					t.Fatalf("first allocation %s %q, want failed naming %s", r.Allocs[0].State, r.Allocs[0].Error, tc.want)
				}
				if r.Allocs[1].State != restart.AllocPending {
					t.Fatalf("second allocation %s before the answer", r.Allocs[1].State)
				}
				if _, err := env.e.Cancel(context.Background(), rec.Namespace, rec.ID, "test"); err != nil {
					t.Fatal(err)
				}
				waitEnded(t, wait, restart.StatusCanceled)
				return
			}
			final, dt := env.driveGate(t, rec)
			if final.Status != restart.StatusFailed {
				t.Fatalf("status %s, want failed\n%s", final.Status, dt.log.messages())
			}
			if a := final.Allocs[0]; a.State != restart.AllocFailed || !strings.Contains(a.Error, tc.want) {
				t.Fatalf("first allocation %s %q, want failed naming %q", a.State, a.Error, tc.want)
			}
			if a := final.Allocs[1]; a.State != restart.AllocPending {
				t.Fatalf("second allocation %s, want untouched under -on-error fail", a.State)
			}
		})
	}
}

// TestGateRefusesUnreachableConsul: a job with Consul checks and a Consul that refuses
// connections is refused at planning (nothing changes), unless -health running.
func TestGateRefusesUnreachableConsul(t *testing.T) {
	env := startGateSim(t, "http://127.0.0.1:1")
	env.registerJob(t, checkedJob("web", 1, "", "pass", time.Second, time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := env.e.Plan(ctx, Request{Job: "web", Spec: restart.Spec{Health: restart.HealthAuto}})
	if err == nil || !strings.Contains(err.Error(), "Consul") || !strings.Contains(err.Error(), "-health running") {
		t.Fatalf("Plan: %v, want a refusal naming Consul and -health running", err)
	}
	p, err := env.e.Plan(ctx, Request{Job: "web", Spec: restart.Spec{Health: restart.HealthRunning}})
	if err != nil || p.Record.Spec.Health != restart.HealthRunning {
		t.Fatalf("Plan with -health running: %v", err)
	}
}

// TestGateAutoWithoutChecks: -health auto on a job without checks waits for running only,
// within the update block's healthy deadline; so does -health running, unless
// -healthy-deadline is given.
func TestGateAutoWithoutChecks(t *testing.T) {
	env := startGateSim(t, "http://127.0.0.1:1")
	env.registerJob(t, checkedJob("web", 1, "", "", time.Second, time.Minute))
	fromBlock := map[string]restart.GroupHealth{"web": {HealthyDeadline: time.Minute}}
	for _, tc := range []struct {
		name string
		spec restart.Spec
		want map[string]restart.GroupHealth
	}{
		{"auto", restart.Spec{Health: restart.HealthAuto, Yes: true}, fromBlock},
		{"running", restart.Spec{Health: restart.HealthRunning, Yes: true}, fromBlock},
		{"running with -healthy-deadline", restart.Spec{Health: restart.HealthRunning, Yes: true,
			HealthyDeadline: 2 * time.Minute, HealthyDeadlineGiven: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			p, err := env.e.Plan(ctx, Request{Job: "web", Spec: tc.spec})
			if err != nil {
				t.Fatal(err)
			}
			rec := p.Record
			if rec.Spec.Health != restart.HealthRunning || !maps.Equal(rec.Spec.GroupHealth, tc.want) {
				t.Fatalf("resolved to %q %v, want running %v", rec.Spec.Health, rec.Spec.GroupHealth, tc.want)
			}
			if _, deadline := rec.Spec.HealthTimes("web"); deadline != max(time.Minute, tc.spec.HealthyDeadline) {
				t.Fatalf("healthy deadline %s", deadline)
			}
		})
	}
}

// warmup is how long the tasks of staleJob take to serve after a start.
const warmup = 4 * time.Second

// staleJob is the job shape that took every instance down while the gate counted check
// results from before a restart: count instances whose task serves warmup after it starts,
// behind a check of the given provider ("nomad": a group service; "consul": a task's) that
// runs every 5 s, with a min_healthy_time of 1 s. A check runs every 5 s and the last
// result stays until the next run, so right after a restart the check still reads the old
// process's success.
func staleJob(count int, provider string) *api.Job {
	nomadScript, consulScript := "pass_after=4s", ""
	if provider == "consul" {
		nomadScript, consulScript = "", "pass_after=4s"
	}
	j := checkedJob("web", count, nomadScript, consulScript, time.Second, time.Minute)
	tg := j.TaskGroups[0]
	for _, svcs := range [][]*api.Service{tg.Services, tg.Tasks[0].Services} {
		for _, s := range svcs {
			for i := range s.Checks {
				s.Checks[i].Interval = 5 * time.Second
			}
		}
	}
	return j
}

// servingInterval is a stretch of Nomad's time during which an allocation served.
type servingInterval struct{ from, to time.Time }

// servingIntervals reads, from Nomad's task events of every allocation of job "web"
// (replacements and surge allocations included), when each served: from warmup after a
// Started event until the next Restart Signaled or Killing event, or on.
func servingIntervals(t *testing.T, client *api.Client) map[string][]servingInterval {
	t.Helper()
	stubs, _, err := client.Jobs().Allocations("web", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]servingInterval{}
	for _, s := range stubs {
		a, _, err := client.Allocations().Info(s.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		ts := a.TaskStates["app"]
		if ts == nil {
			continue
		}
		var up time.Time
		for _, e := range ts.Events {
			at := time.Unix(0, e.Time)
			switch e.Type {
			case api.TaskStarted:
				up = at.Add(warmup)
			case "Restart Signaled", api.TaskKilling:
				if !up.IsZero() && at.After(up) {
					out[a.ID] = append(out[a.ID], servingInterval{up, at})
				}
				up = time.Time{}
			}
		}
		if !up.IsZero() {
			out[a.ID] = append(out[a.ID], servingInterval{up, time.Unix(1<<40, 0)})
		}
	}
	return out
}

// fewestServing is the fewest allocations serving at any moment of [from, to].
func fewestServing(intervals map[string][]servingInterval, from, to time.Time) (int, time.Time) {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	n := 0
	for _, ivs := range intervals {
		for _, iv := range ivs {
			if !iv.from.After(from) && iv.to.After(from) {
				n++
			} else if iv.from.After(from) && iv.from.Before(to) {
				edges = append(edges, edge{iv.from, +1})
			}
			if iv.to.After(from) && iv.to.Before(to) {
				edges = append(edges, edge{iv.to, -1})
			}
		}
	}
	// At one instant, a start before an end: a handover at the same moment is no gap.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta > edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	fewest, when := n, from
	for _, e := range edges {
		n += e.delta
		if n < fewest {
			fewest, when = n, e.at
		}
	}
	return fewest, when
}

// TestGateIgnoresResultsFromBeforeTheRestart: with checks every 5 s, a min_healthy_time
// of 1 s and a 4 s warm-up, a graceful restart keeps all but the batch serving throughout
// (counted from Nomad's task events), in place, with -reschedule and with -surge; each
// allocation is restarted exactly once. Counting the result the check kept from before the
// restart took every instance down (issue 25: measured on Nomad 2.0).
func TestGateIgnoresResultsFromBeforeTheRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		provider string
		count    int
		spec     restart.Spec
		want     int // fewest serving
	}{
		{"nomad check in place", "nomad", 3, restart.Spec{}, 2},
		{"consul check in place", "consul", 3, restart.Spec{}, 2},
		{"nomad check, reschedule", "nomad", 3, restart.Spec{Reschedule: true}, 2},
		{"nomad check, surge 1 on one instance", "nomad", 1, restart.Spec{Surge: 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := startGateSim(t, "")
			env.registerJob(t, staleJob(tc.count, tc.provider))
			// Let every instance serve before the restart starts.
			time.Sleep(env.sim.RealDuration(warmup))
			spec := tc.spec
			spec.Health, spec.Yes, spec.OnError = restart.HealthAuto, true, restart.OnErrorFail
			spec.BatchSizes = []restart.BatchSize{{N: 1}}
			rec := env.plan(t, "web", spec)
			from := env.sim.Now()
			final, dt := env.driveGate(t, rec)
			to := env.sim.Now()
			if final.Status != restart.StatusSucceeded {
				t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
			}
			env.checkOnce(t, final)
			ivs := servingIntervals(t, env.client)
			fewest, when := fewestServing(ivs, from, to)
			if fewest < tc.want {
				t.Errorf("%d of %d instances served %.1fs into the restart (which took %.1fs); want at least %d throughout\n%s\n%s",
					fewest, tc.count, when.Sub(from).Seconds(), to.Sub(from).Seconds(), tc.want, describeServing(ivs, from), dt.log.messages())
			}
		})
	}
}

// describeServing lists when each allocation served, in seconds from `from`.
func describeServing(ivs map[string][]servingInterval, from time.Time) string {
	var lines []string
	for id, list := range ivs {
		for _, iv := range list {
			lines = append(lines, fmt.Sprintf("%s serves %.1fs .. %.1fs", id[:8], iv.from.Sub(from).Seconds(), iv.to.Sub(from).Seconds()))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestGateResumedLongAfterTheRestart: a driver that dies while an allocation's gate waits,
// resumed long after the allocation's healthy deadline, takes the gate up with a full
// period: the allocation passes (it has served since), rather than failing a deadline that
// ran out while no one drove the restart.
func TestGateResumedLongAfterTheRestart(t *testing.T) {
	env := startGateSim(t, "")
	env.registerJob(t, checkedJob("web", 1, "pass_after=2s", "", time.Second, 8*time.Second))
	rec := env.plan(t, "web", restart.Spec{Health: restart.HealthAuto, Yes: true, OnError: restart.OnErrorFail})
	wait, cancel := driveAsync(env.e, rec)
	waitStatus(t, env.store, rec, func(r *restart.Record) bool { return r.Allocs[0].Waiting != "" })
	cancel()
	if _, err := wait(); err == nil {
		t.Fatal("the driver was stopped but its drive ended without an error")
	}
	time.Sleep(env.sim.RealDuration(20 * time.Second)) // the 8 s deadline runs out twice over
	final, dt := env.driveGate(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("resumed: %s (%s)\n%s", final.Status, final.Reason, dt.log.messages())
	}
	env.checkOnce(t, final)
}

// depsDriver is a driver whose gates read the job through read, and whose Consul is an
// address nobody dials (building the source does not connect).
func depsDriver(read func(ctx context.Context, call int) (*api.Job, error)) (*driver, *atomic.Int32) {
	var calls atomic.Int32
	e := New(Config{Holder: "deps:1", Health: HealthConfig{
		JobSpec: func(ctx context.Context, _, _ string) (*onchange.JobSpec, error) {
			job, err := read(ctx, int(calls.Add(1)))
			if err != nil {
				return nil, err
			}
			return cluster.NewJobSpec(job), nil
		},
		Consul: health.ConsulDialer{Config: health.ConsulConfig{Address: "127.0.0.1:1"}},
	}})
	return &driver{e: e, id: "r", jobNS: "default", jobID: "web", log: e.log,
		spec: normalizeSpec(restart.Spec{Health: restart.HealthChecks})}, &calls
}

var webJob = &api.Job{ID: ptr("web"), Name: ptr("web")}

// TestGateDepsErrorsNotKept: a read that failed because its caller's context ended, or
// transiently, is read again by the next gate; a permanent failure and a success are kept.
func TestGateDepsErrorsNotKept(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancelExpired()
	<-expired.Done()
	live := context.Background()
	notFound := fmt.Errorf("job web: %w", cluster.ErrJobNotFound)

	cases := []struct {
		name string
		// first is the context of the first gate; read answers the calls in order.
		first     context.Context
		read      func(ctx context.Context, call int) (*api.Job, error)
		secondErr error // nil: the second gate gets the job
		calls     int32 // reads after both gates
	}{
		{name: "canceled", first: canceled, calls: 2,
			read: func(ctx context.Context, _ int) (*api.Job, error) {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return webJob, nil
			}},
		{name: "deadline passed", first: expired, calls: 2,
			read: func(ctx context.Context, _ int) (*api.Job, error) {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("Get \"/v1/job/web\": %w", ctx.Err())
				}
				return webJob, nil
			}},
		{name: "transient", first: live, calls: 2,
			read: func(_ context.Context, call int) (*api.Job, error) {
				if call == 1 {
					return nil, errors.New("Unexpected response code: 500 (No cluster leader)")
				}
				return webJob, nil
			}},
		{name: "permanent kept", first: live, calls: 1, secondErr: cluster.ErrJobNotFound,
			read: func(_ context.Context, call int) (*api.Job, error) {
				if call == 1 {
					return nil, notFound
				}
				return webJob, nil
			}},
		{name: "success kept", first: live, calls: 1,
			read: func(context.Context, int) (*api.Job, error) { return webJob, nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, calls := depsDriver(tc.read)
			job1, _, err1 := d.readinessDeps(tc.first)
			job2, src2, err2 := d.readinessDeps(live)
			switch {
			case tc.secondErr != nil:
				if !errors.Is(err1, tc.secondErr) || !errors.Is(err2, tc.secondErr) {
					t.Errorf("gates: %v, then %v; want %v both times", err1, err2, tc.secondErr)
				}
			case err2 != nil || job2.Name != *webJob.Name || src2.Consul == nil:
				t.Errorf("second gate: job %v consul %v err %v; want the job and a Consul source (the first gate's error %v must not be kept)", job2, src2.Consul, err2, err1)
			case tc.first == live && (err1 == nil) != (job1 != nil && job1.Name == *webJob.Name):
				t.Errorf("first gate: job %v err %v", job1, err1)
			}
			if got := calls.Load(); got != tc.calls {
				t.Errorf("%d reads of the job, want %d", got, tc.calls)
			}
		})
	}
}

// TestGateDepsSharedRead: gates that start while a read is in flight share it; one whose
// context ends meanwhile returns at once with its own context's error, and that does not
// spoil the read for the others.
func TestGateDepsSharedRead(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	d, calls := depsDriver(func(ctx context.Context, _ int) (*api.Job, error) {
		once.Do(func() { close(started) })
		select {
		case <-release:
			return webJob, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	const waiters = 4
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _, err := d.readinessDeps(ctx)
		errs <- err
	}()
	<-started
	for range waiters - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := d.readinessDeps(ctx)
			errs <- err
		}()
	}
	// A gate canceled while it waits for the shared read.
	gone, stop := context.WithCancel(ctx)
	stop()
	if _, _, err := d.readinessDeps(gone); !errors.Is(err, context.Canceled) {
		t.Errorf("gate canceled while waiting: %v, want context.Canceled", err)
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("gate sharing the read: %v", err)
		}
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("%d reads of the job, want 1 shared", got)
	}
}
