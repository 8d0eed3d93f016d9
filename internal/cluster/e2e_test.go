package cluster_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// The tests below run the Nomad implementation over real HTTP against nomadsim, with
// Nomad's blocking queries, texts and codes.

// timeScale is slower than simtest.TimeScale: these tests read allocations, deployments
// and events as they change on nomadsim's clock, through reads and watches on real time,
// and some expect a state before the next (a deployment still running).
const timeScale = 20

// startSim is simtest.Start at timeScale and seed 7, with opts' other settings.
func startSim(t *testing.T, opts nomadsim.Options) *nomadsim.Cluster {
	t.Helper()
	opts.TimeScale, opts.Seed = timeScale, 7
	return simtest.Start(t, opts)
}

func newNomad(t *testing.T, sim *nomadsim.Cluster, token string) *cluster.Nomad {
	t.Helper()
	return cluster.NewNomadWithOptions(simtest.ClientAs(t, sim, token), cluster.Options{
		Retry:     cluster.RetryPolicy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, MaxElapsed: 10 * time.Second},
		WatchWait: 2 * time.Second,
	})
}

func serviceJob(ns, id string, count int) *api.Job {
	j := api.NewServiceJob(id, id, "global", 50)
	j.Namespace = &ns
	j.Datacenters = []string{"dc1", "dc2"}
	task := api.NewTask("app", "raw_exec").SetConfig("command", "/bin/sleep")
	task.Resources = &api.Resources{CPU: new(100), MemoryMB: new(64)}
	j.TaskGroups = []*api.TaskGroup{api.NewTaskGroup("web", count).AddTask(task)}
	return j
}

func createNamespaces(t *testing.T, sim *nomadsim.Cluster, names ...string) {
	t.Helper()
	client := simtest.ClientAs(t, sim, sim.BootstrapToken())
	for _, n := range names {
		// The api's Namespaces().Register puts to /v1/namespace, which nomadsim does not
		// serve yet; /v1/namespace/<name> is Nomad's other route for the same write.
		if _, err := client.Raw().Write("/v1/namespace/"+n, &api.Namespace{Name: n}, nil, nil); err != nil {
			t.Fatalf("creating namespace %s: %v", n, err)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startJobs is nomadsim running jobs, a Nomad client of it without a token and the test's
// context.
func startJobs(t *testing.T, jobs ...*api.Job) (*nomadsim.Cluster, *cluster.Nomad, context.Context) {
	t.Helper()
	sim := startSim(t, nomadsim.Options{})
	simtest.RegisterRunning(t, sim, jobs...)
	return sim, newNomad(t, sim, ""), testCtx(t)
}

// startDeploying is startJobs of job default/web with count allocations, waiting for the
// allocations only (WaitJobRunning would also wait for the deployment, which runs on).
func startDeploying(t *testing.T, count int) (*nomadsim.Cluster, *cluster.Nomad, context.Context) {
	t.Helper()
	sim := startSim(t, nomadsim.Options{})
	if _, err := sim.RegisterJob(serviceJob("default", "web", count)); err != nil {
		t.Fatal(err)
	}
	n, ctx := newNomad(t, sim, ""), testCtx(t)
	if err := sim.WaitAllocsRunning(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	return sim, n, ctx
}

// smallJob is serviceJob with tasks small enough that hundreds fit on the benchmarks'
// nodes.
func smallJob(id string, count int) *api.Job {
	j := serviceJob("default", id, count)
	j.TaskGroups[0].Tasks[0].Resources = &api.Resources{CPU: new(10), MemoryMB: new(10)}
	return j
}

// startBenchSim is nomadsim running job default/web (count allocations of smallJob) and a
// Nomad client of it.
func startBenchSim(b *testing.B, count int) (*nomadsim.Cluster, *cluster.Nomad) {
	b.Helper()
	sim := simtest.Start(b, nomadsim.Options{TimeScale: timeScale, Seed: 7, NodesPerDatacenter: 5})
	simtest.RegisterRunning(b, sim, smallJob("web", count))
	return sim, cluster.NewNomad(simtest.Client(b, sim))
}

// webAllocs is job default/web's allocations as n reads them.
func webAllocs(t *testing.T, ctx context.Context, n *cluster.Nomad) []*restart.Alloc {
	t.Helper()
	allocs, _, err := n.JobAllocations(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	return allocs
}

func TestE2EResolveJob(t *testing.T) {
	sim := startSim(t, nomadsim.Options{})
	createNamespaces(t, sim, "prod")
	simtest.RegisterRunning(t, sim, serviceJob("default", "web", 1), serviceJob("default", "web-api", 1),
		serviceJob("prod", "web", 1), serviceJob("prod", "batcher", 1))
	n := newNomad(t, sim, "")
	ctx := testCtx(t)

	for _, tc := range []struct {
		ns, prefix string
		wantNS     string
		wantMatch  []string
		wantErr    error
	}{
		{ns: "default", prefix: "web", wantNS: "default"},
		{ns: "", prefix: "web-", wantNS: "default"},
		{ns: "default", prefix: "we", wantMatch: []string{"default/web", "default/web-api"}},
		{ns: "*", prefix: "web", wantMatch: []string{"default/web", "prod/web", "default/web-api"}},
		{ns: "*", prefix: "bat", wantNS: "prod"},
		{ns: "prod", prefix: "w", wantNS: "prod"},
		{ns: "default", prefix: "nosuch", wantErr: cluster.ErrJobNotFound},
	} {
		t.Run(tc.ns+"/"+tc.prefix, func(t *testing.T) {
			job, err := n.ResolveJob(ctx, tc.ns, tc.prefix)
			switch {
			case tc.wantMatch != nil:
				var amb *cluster.AmbiguousJobError
				if !errors.As(err, &amb) {
					t.Fatalf("want ambiguous, got %v, %v", job, err)
				}
				got := slices.Clone(amb.Matches)
				want := slices.Clone(tc.wantMatch)
				slices.Sort(got)
				slices.Sort(want)
				if !slices.Equal(got, want) {
					t.Fatalf("matches %v, want %v", amb.Matches, tc.wantMatch)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("want %v, got %v", tc.wantErr, err)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if job.Namespace != tc.wantNS || !strings.HasPrefix(job.ID, tc.prefix) || job.Type != "service" ||
					len(job.Groups) != 1 || !job.Groups[0].HasTask("app") {
					t.Fatalf("got %+v", job)
				}
			}
		})
	}
	if n.Region() != "global" {
		t.Fatalf("region %q", n.Region())
	}
}

// waitAlloc watches an allocation until ok accepts it.
func waitAlloc(t *testing.T, ctx context.Context, n *cluster.Nomad, id string, ok func(*restart.Alloc) bool) *restart.Alloc {
	t.Helper()
	var idx uint64
	for {
		a, next, err := n.WatchAllocation(ctx, id, idx)
		if err != nil {
			t.Fatalf("watching %s: %v", id, err)
		}
		if ok(a) {
			return a
		}
		idx = next
	}
}

func TestE2ERestartInPlaceAndWatch(t *testing.T) {
	_, n, ctx := startJobs(t, serviceJob("default", "web", 2))

	allocs, idx, err := n.JobAllocations(ctx, "default", "web")
	if err != nil || len(allocs) != 2 || idx != 0 { // streamed: no index
		t.Fatalf("%d allocs at %d: %v", len(allocs), idx, err)
	}
	target := allocs[0]
	before := target.Tasks["app"]
	if before.State != restart.TaskRunning {
		t.Fatalf("task not running before: %+v", before)
	}
	if err := n.RestartTasks(ctx, target.ID, "", false); err != nil {
		t.Fatal(err)
	}
	after := waitAlloc(t, ctx, n, target.ID, func(a *restart.Alloc) bool {
		ts := a.Tasks["app"]
		return ts.Restarts > before.Restarts && ts.State == restart.TaskRunning
	})
	ts := after.Tasks["app"]
	var signaled, started time.Time
	for _, ev := range ts.Events {
		switch ev.Type {
		case restart.TaskEventRestartSignaled:
			signaled = ev.Time
		case restart.TaskEventStarted:
			started = ev.Time
		}
	}
	if signaled.IsZero() || !started.After(signaled) {
		t.Fatalf("want a Started event after the Restart Signaled one: %+v", ts.Events)
	}
	if after.ModifyIndex <= target.ModifyIndex {
		t.Fatalf("ModifyIndex did not move: %d -> %d", target.ModifyIndex, after.ModifyIndex)
	}

	// A named task that does not exist is refused with the client's text.
	err = n.RestartTasks(ctx, target.ID, "nosuch", false)
	if err == nil || cluster.IsTransient(err) || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("restart of an unknown task: %v", err)
	}
	// An unknown allocation.
	if _, err := n.Allocation(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, cluster.ErrAllocNotFound) {
		t.Fatalf("unknown allocation: %v", err)
	}
}

func TestE2EStopAndFollowTheChain(t *testing.T) {
	_, n, ctx := startJobs(t, serviceJob("default", "web", 2))

	allocs := webAllocs(t, ctx, n)
	old := allocs[0]
	stopIndex, err := n.StopAlloc(ctx, old.ID, true)
	if err != nil || stopIndex == 0 {
		t.Fatalf("stop at %d: %v", stopIndex, err)
	}
	stopped := waitAlloc(t, ctx, n, old.ID, func(a *restart.Alloc) bool { return a.NextAllocation != "" })
	if stopped.DesiredStatus != restart.DesiredStop {
		t.Fatalf("old allocation desired status %q", stopped.DesiredStatus)
	}
	repl := waitAlloc(t, ctx, n, stopped.NextAllocation, func(a *restart.Alloc) bool { return a.ClientStatus == restart.ClientRunning })
	if repl.PreviousAllocation != old.ID || repl.Name != old.Name || repl.CreateIndex < stopIndex {
		t.Fatalf("replacement %+v of %s (stop at %d)", repl, old.ID, stopIndex)
	}

	// No placement failure follows a stop that was replaced.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if pf, err := n.WatchPlacementFailure(wctx, "default", "web", "web", stopIndex); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want no placement failure, got %+v, %v", pf, err)
	}
}

func TestE2EPlacementFailure(t *testing.T) {
	sim, n, ctx := startJobs(t, serviceJob("default", "web", 1))
	for _, node := range sim.Nodes() {
		sim.SetNodeEligibility(node.ID, false)
	}
	allocs := webAllocs(t, ctx, n)
	stopIndex, err := n.StopAlloc(ctx, allocs[0].ID, false)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := n.WatchPlacementFailure(ctx, "default", "web", "web", stopIndex)
	if err != nil {
		t.Fatal(err)
	}
	if pf.Group != "web" || pf.EvalID == "" || len(pf.Reasons) == 0 {
		t.Fatalf("got %+v", pf)
	}
	if !strings.Contains(pf.Error(), "No nodes were eligible for evaluation") {
		t.Fatalf("reasons: %v", pf.Error())
	}
}

func TestE2ERetriesThroughErrors(t *testing.T) {
	sim, n, ctx := startJobs(t, serviceJob("default", "web", 3))
	remove := sim.SetFault(nomadsim.Fault{Method: "GET", Path: "/v1/", ErrorRate: 0.5, Status: 500, Body: "rpc error: EOF"})
	defer remove()
	for range 20 {
		if _, err := n.ResolveJob(ctx, "default", "web"); err != nil {
			t.Fatal(err)
		}
		allocs, _, err := n.JobAllocations(ctx, "default", "web")
		if err != nil || len(allocs) != 3 {
			t.Fatalf("%d allocs: %v", len(allocs), err)
		}
		if _, err := n.Allocation(ctx, allocs[0].ID); err != nil {
			t.Fatal(err)
		}
	}
	stats := sim.Stats()
	if stats.Requests <= 60 {
		t.Fatalf("with half the reads failing, 60 reads should take more than 60 requests, took %d", stats.Requests)
	}
}

func TestE2ELeaderLoss(t *testing.T) {
	sim, n, ctx := startJobs(t, serviceJob("default", "web", 1))
	allocs := webAllocs(t, ctx, n)
	sim.LoseLeader(10 * time.Second) // 500 ms at the time scale
	start := sim.Stats().Requests
	a, err := n.Allocation(ctx, allocs[0].ID)
	if err != nil || a.ID != allocs[0].ID {
		t.Fatalf("read across a leader loss: %v", err)
	}
	if sim.Stats().Requests-start < 2 {
		t.Fatal("the read was not retried while the leader was lost")
	}
	// Writes are not retried: the engine decides from facts.
	sim.LoseLeader(10 * time.Second)
	_, err = n.StopAlloc(ctx, allocs[0].ID, false)
	if err == nil || !cluster.IsTransient(err) || !strings.Contains(err.Error(), "No cluster leader") {
		t.Fatalf("stop during leader loss: %v", err)
	}
}

func TestE2EACL(t *testing.T) {
	sim := startSim(t, nomadsim.Options{ACLs: true})
	simtest.RegisterRunning(t, sim, serviceJob("default", "web", 1))
	ctx := testCtx(t)

	reader := simtest.Token(t, sim, "reader", `namespace "default" { capabilities = ["read-job"] }`)
	n := newNomad(t, sim, reader)
	// Without list-jobs, the exact ID still resolves, a prefix does not.
	job, err := n.ResolveJob(ctx, "default", "web")
	if err != nil || job.ID != "web" {
		t.Fatalf("literal ID without list-jobs: %+v, %v", job, err)
	}
	if _, err := n.ResolveJob(ctx, "default", "we"); !errors.Is(err, cluster.ErrJobNotFound) {
		t.Fatalf("prefix without list-jobs: %v", err)
	}
	allocs, _, err := n.JobAllocations(ctx, "default", "web")
	if err != nil || len(allocs) != 1 {
		t.Fatalf("%d allocs: %v", len(allocs), err)
	}
	err = n.RestartTasks(ctx, allocs[0].ID, "", false)
	if !errors.Is(err, cluster.ErrPermissionDenied) || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("restart without alloc-lifecycle: %v", err)
	}

	anon := newNomad(t, sim, "")
	if _, _, err := anon.JobAllocations(ctx, "default", "web"); !errors.Is(err, cluster.ErrPermissionDenied) {
		t.Fatalf("anonymous read: %v", err)
	}
}

func TestE2EReachable(t *testing.T) {
	sim := startSim(t, nomadsim.Options{})
	client, err := cluster.NewClient(cluster.ClientConfig{Address: sim.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.Reachable(testCtx(t), client); err != nil {
		t.Fatal(err)
	}
	// Without a job read, the region comes from the agent.
	if r := cluster.NewNomad(client).Region(); r != "global" {
		t.Fatalf("region %q", r)
	}
	if r := cluster.NewNomadWithOptions(client, cluster.Options{Region: "east"}).Region(); r != "east" {
		t.Fatalf("configured region %q", r)
	}
}

func TestE2EStreamJobAllocations(t *testing.T) {
	_, n, ctx := startJobs(t, serviceJob("default", "web", 3))
	allocs, idx, err := n.JobAllocations(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	updates := n.StreamJobAllocations(sctx, "default", "web", idx)

	targets := map[string]uint64{}
	for _, a := range allocs[:2] {
		targets[a.ID] = a.Tasks["app"].Restarts
		if err := n.RestartTasks(ctx, a.ID, "", false); err != nil {
			t.Fatal(err)
		}
	}
	stopIndex, err := n.StopAlloc(ctx, allocs[2].ID, false)
	if err != nil {
		t.Fatal(err)
	}
	var replacement *restart.Alloc
	for len(targets) > 0 || replacement == nil || replacement.ClientStatus != restart.ClientRunning {
		select {
		case u, ok := <-updates:
			if !ok {
				t.Fatal("stream closed")
			}
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			a := u.Alloc
			if a.JobID != "web" || u.Index == 0 {
				t.Fatalf("update %+v at %d", a, u.Index)
			}
			if before, ok := targets[a.ID]; ok && a.Tasks["app"].Restarts > before && a.Tasks["app"].State == restart.TaskRunning {
				delete(targets, a.ID)
			}
			if a.PreviousAllocation == allocs[2].ID {
				if a.CreateIndex < stopIndex {
					t.Fatalf("replacement created at %d before the stop at %d", a.CreateIndex, stopIndex)
				}
				replacement = a
			}
		case <-ctx.Done():
			t.Fatalf("waiting for restarts %v and the replacement (%+v)", targets, replacement)
		}
	}
}

func TestE2EActiveDeployment(t *testing.T) {
	sim, n, ctx := startDeploying(t, 2)
	// The first version's deployment runs until the allocations have been healthy for
	// min_healthy_time (10 s, half a second at the time scale), then succeeds.
	d, err := n.ActiveDeployment(ctx, "default", "web")
	if err != nil || d == nil || d.Status != api.DeploymentStatusRunning {
		t.Fatalf("right after the first run: %+v, %v", d, err)
	}
	for d != nil {
		if ctx.Err() != nil {
			t.Fatalf("the first deployment never ended: %+v", d)
		}
		time.Sleep(20 * time.Millisecond)
		if d, err = n.ActiveDeployment(ctx, "default", "web"); err != nil {
			t.Fatal(err)
		}
	}
	// A canary that waits for manual promotion keeps its deployment running.
	update := serviceJob("default", "web", 2)
	update.TaskGroups[0].Update = &api.UpdateStrategy{Canary: new(1), AutoPromote: new(false), MaxParallel: new(1)}
	update.TaskGroups[0].Tasks[0].Env = map[string]string{"VERSION": "2"}
	if _, err := sim.RegisterJob(update); err != nil {
		t.Fatal(err)
	}
	d, err = n.ActiveDeployment(ctx, "default", "web")
	if err != nil || d == nil || d.ID == "" || d.Status != api.DeploymentStatusRunning {
		t.Fatalf("with a canary awaiting promotion: %+v, %v", d, err)
	}
}

func TestE2EAllocChecks(t *testing.T) {
	sim := startSim(t, nomadsim.Options{})
	job := serviceJob("default", "web", 1)
	tg := job.TaskGroups[0]
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	tg.Services = []*api.Service{{
		Name: "web", PortLabel: "http", Provider: "nomad",
		Checks: []api.ServiceCheck{
			{Name: "alive", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second},
			{Name: "ready", Type: "http", Path: "/ready", Interval: time.Second, Timeout: time.Second, OnUpdate: "ignore"},
		},
	}}
	tg.Meta = map[string]string{"nomadsim.check.alive": "pass", "nomadsim.check.ready": "fail"}
	simtest.RegisterRunning(t, sim, job)
	n := newNomad(t, sim, "")
	ctx := testCtx(t)
	allocs := webAllocs(t, ctx, n)
	checks, err := n.AllocChecks(ctx, allocs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]cluster.CheckResult{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	alive, ready := byName["alive"], byName["ready"]
	if alive.Mode != "healthiness" || ready.Mode != "readiness" || alive.Service != "web" || alive.ID == "" {
		t.Fatalf("checks %+v", checks)
	}
	if ready.Status == "success" {
		t.Fatalf("a check scripted to fail passed: %+v", ready)
	}
	if _, err := n.AllocChecks(ctx, "00000000-0000-0000-0000-000000000000"); !errors.Is(err, cluster.ErrAllocNotFound) {
		t.Fatalf("unknown allocation: %v", err)
	}
}

// FollowJobAllocations carries the job's own changes beside its allocations: the job as
// re-registered (a Job event), and its deployments' states (Deployment events) until the
// deployment ends; a stopped job says JobGone.
func TestE2EFollowCarriesJobAndDeployments(t *testing.T) {
	sim, n, ctx := startDeploying(t, 2)
	updates := n.FollowJobAllocations(ctx, "default", "web", 0)
	next := func(what string, match func(u cluster.AllocUpdate) bool) cluster.AllocUpdate {
		t.Helper()
		for {
			select {
			case u, ok := <-updates:
				if !ok || u.Err != nil {
					t.Fatalf("waiting for %s: the stream ended (%v)", what, u.Err)
				}
				if match(u) {
					return u
				}
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v", what, ctx.Err())
			}
		}
	}
	next("the first sync", func(u cluster.AllocUpdate) bool { return u.Synced })

	scaled := serviceJob("default", "web", 3)
	if _, err := sim.RegisterJob(scaled); err != nil {
		t.Fatal(err)
	}
	u := next("the Job event of the new version", func(u cluster.AllocUpdate) bool { return u.Job != nil && u.Job.Version > 0 })
	if g, ok := u.Job.Group("web"); !ok || g.Count != 3 || u.Job.ID != "web" {
		t.Fatalf("the Job event's job: %+v", u.Job)
	}
	d := next("the new version's deployment", func(u cluster.AllocUpdate) bool { return u.Deployment != nil && u.Deployment.Active() })
	id := d.Deployment.ID
	next("the deployment's end", func(u cluster.AllocUpdate) bool {
		return u.Deployment != nil && u.Deployment.ID == id && !u.Deployment.Active()
	})

	if _, _, err := simtest.Client(t, sim).Jobs().Deregister("web", false, nil); err != nil {
		t.Fatal(err)
	}
	next("the stop's Job event", func(u cluster.AllocUpdate) bool { return u.JobGone })
}
