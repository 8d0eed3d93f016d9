package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// A job whose meta opts in is rolled when the variable its template reads changes: once
// per change (a burst within the debounce is one rollout), each allocation restarted once
// per rollout, from Nomad's facts; the allocations started after the variable's last
// change are not rolled when the agent starts; a job that does not opt in is never
// touched.
func TestConfigChangeRollouts(t *testing.T) {
	t.Parallel()
	e, path, index := startChangeEnv(t, "cfg", 3, rolloutMeta("2s"))
	ctx := agenttest.Context(t)
	registerTemplated(t, e, "bystander", 2, path, nil) // reads the variable, never opted in

	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), rollingOn(e, sourcewatch.New(e.Vars, sourcewatch.Options{})))
	defer agenttest.Run(t, a)()

	rollouts := func() []*restart.Record {
		recs, err := e.Store.List(ctx, store.Filter{Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	index = agenttest.PutVar(t, e.Client, path, "bonjour", index)
	var first *restart.Record
	simtest.WaitFor(t, ctx, "the rollout of the change", func() bool {
		recs := rollouts()
		if len(recs) > 0 {
			first = recs[0]
		}
		return first != nil
	})
	first = e.WaitEnd(t, first)
	if first.Status != restart.StatusSucceeded || first.JobID != "cfg" {
		t.Fatalf("the rollout %s of %s ended %s: %s", first.ID, first.JobID, first.Status, first.Reason)
	}
	if len(first.Triggers) != 1 || first.Triggers[0].NewIndex != index || first.Triggers[0].Source != "nomad:"+path {
		t.Fatalf("the rollout's triggers %+v, want the change to index %d", first.Triggers, index)
	}
	if len(first.Allocs) != 3 {
		t.Fatalf("the rollout planned %d allocations, want the job's 3", len(first.Allocs))
	}

	// A burst of five changes within the debounce: one rollout, for the last.
	for i := range 5 {
		index = agenttest.PutVar(t, e.Client, path, "v"+string(rune('a'+i)), index)
	}
	var second *restart.Record
	simtest.WaitFor(t, ctx, "the rollout of the burst", func() bool {
		for _, r := range rollouts() {
			if r.ID != first.ID {
				second = r
			}
		}
		return second != nil
	})
	second = e.WaitEnd(t, second)
	if second.Status != restart.StatusSucceeded || len(second.Triggers) != 1 || second.Triggers[0].NewIndex != index {
		t.Fatalf("the burst's rollout ended %s with triggers %+v, want the last change (index %d)", second.Status, second.Triggers, index)
	}
	if recs := rollouts(); len(recs) != 2 {
		t.Fatalf("%d restarts recorded, want the two rollouts", len(recs))
	}
	counts, err := simtest.CountRestarts(ctx, e.Client, "default", "cfg")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range first.Allocs {
		if n := counts.InPlace[a.ID]; n != 2 {
			t.Errorf("allocation %s was restarted %d times, want twice (once per rollout)", a.ID, n)
		}
	}
	untouched, err := simtest.CountRestarts(ctx, e.Client, "default", "bystander")
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range untouched.InPlace {
		if n != 0 {
			t.Errorf("allocation %s of the job that did not opt in was restarted %d times", id, n)
		}
	}
}

// startChangeEnv starts an env whose time is real time (TimeScale 1: a rollout's debounce
// is a timer of the agent's, and the variables' ModifyTime and the tasks' start times must
// be comparable with it), creates the variable nomad/jobs/<job>/config, and registers job,
// count allocations reading it with meta; it returns the env, the variable's path and its
// ModifyIndex.
func startChangeEnv(t *testing.T, job string, count int, meta map[string]string) (e *env, path string, index uint64) {
	t.Helper()
	e = startEnv(t, nomadsim.Options{TimeScale: realTime})
	path = "nomad/jobs/" + job + "/config"
	index = agenttest.PutVar(t, e.Client, path, "v1", 0)
	registerTemplated(t, e, job, count, path, meta)
	return e, path, index
}

// rolloutMeta is the job meta that opts in to config-change rollouts with health running
// and the debounce, and the extra pairs of keys and values.
func rolloutMeta(debounce string, extra ...string) map[string]string {
	m := map[string]string{"nomad-restart.on-change": "auto", "nomad-restart.debounce": debounce, "nomad-restart.health": "running"}
	for i := 0; i+1 < len(extra); i += 2 {
		m[extra[i]] = extra[i+1]
	}
	return m
}

// rollingOn is a Config tweak: config-change rollouts on, watching sources, and the
// simulation's clock (the variables' and tasks' times are Nomad's).
func rollingOn(e *env, sources *sourcewatch.Hub) func(*Config) {
	return func(c *Config) {
		c.Now = e.Sim.Now
		c.Changes = &ChangeRollouts{Sources: sources, Values: sources, BusyRecheck: 200 * time.Millisecond}
	}
}

// registerTemplated runs a service job whose task renders the variable at path with
// change_mode noop, with meta at job level, and waits until it runs.
func registerTemplated(t *testing.T, e *env, id string, count int, path string, meta map[string]string) {
	t.Helper()
	submitTemplated(t, e, templatedJob(id, count, agenttest.GreetingTemplate(path), meta), count)
}

// submitTemplated registers job, of count allocations, and waits until they run; not for
// its deployment (Nomad's default min_healthy_time, 10s, in real time here), which a
// rollout waits for.
func submitTemplated(t testing.TB, e *env, job *api.Job, count int) {
	t.Helper()
	if _, err := e.Sim.RegisterJob(job); err != nil {
		t.Fatalf("registering job %s: %v", *job.ID, err)
	}
	ctx := agenttest.Context(t)
	simtest.WaitFor(t, ctx, "job "+*job.ID+" running", func() bool { return agenttest.Running(ctx, e.Client, "default", *job.ID, count) })
}

// A Consul key read by `key` rolls the job when it changes while the agent watches it
// (Consul keeps no time of a change: the agent's first sight of the key is no change).
func TestConfigChangeRolloutsOnAConsulKey(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{TimeScale: realTime})
	ctx := agenttest.Context(t)
	e.Sim.ConsulKVPut("web/flags", "a=1")
	submitTemplated(t, e, templatedJob("flags", 2, `{{ key "web/flags" }}`, rolloutMeta("2s")), 2)

	a := e.newAgent(t, "agent-1", e.Sim.BootstrapToken(), rollingOn(e, sourcewatch.New(e.Vars, sourcewatch.Options{
		Consul: func(string) (*consulapi.Client, error) {
			return consulapi.NewClient(&consulapi.Config{Address: e.Sim.ConsulAddr()})
		},
	})))
	defer agenttest.Run(t, a)()
	simtest.WaitFor(t, ctx, "the agent to follow the job", func() bool {
		var m dto.Metric
		return a.metrics.changeMetrics().jobs.Write(&m) == nil && m.GetGauge().GetValue() == 1
	})
	// The agent's first answer from Consul is its baseline, whenever it comes: a change
	// made before it is no change. Change the key until one lands after it, each time
	// waiting out the debounce and more.
	var rec *restart.Record
	find := func() bool {
		recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: "flags"})
		if err == nil && len(recs) > 0 {
			rec = recs[0] // the newest
		}
		return rec != nil
	}
	for i := 2; rec == nil; i++ {
		if i > 8 {
			t.Fatal("no rollout after 7 changes of the key")
		}
		e.Sim.ConsulKVPut("web/flags", fmt.Sprintf("a=%d", i))
		deadline := time.Now().Add(8 * time.Second)
		for !find() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	rec = e.WaitEnd(t, rec)
	if rec.Status != restart.StatusSucceeded || len(rec.Triggers) != 1 || rec.Triggers[0].Source != "consul:web/flags" {
		t.Fatalf("the rollout ended %s (%s) with triggers %+v, want succeeded for consul:web/flags", rec.Status, rec.Reason, rec.Triggers)
	}
	e.CheckOnce(t, rec)
}

// templatedJob is a service job whose task renders tmpl with change_mode noop, with meta
// at job level.
func templatedJob(id string, count int, tmpl string, meta map[string]string) *api.Job {
	return agenttest.Templated(agenttest.Job("default", id, count, nil), tmpl, meta)
}

// End to end, on nomadsim, the config-change rollouts of issue 12 (item 8) that need more
// than one agent, a change in the middle of a rollout, an agent that dies during one, or a
// job that must never be rolled. Nomad's time is real time here (TimeScale 1): a rollout's
// debounce is a timer of the agent's, and the variables' ModifyTime and the tasks' start
// times must be comparable with it.

// Two agents, each with its own watch of the sources, see one change: they decide the
// same rollout (its ID derives from the change), both try to file it, one record results,
// and each allocation is restarted once.
func TestConfigChangeTwoAgentsFileOneRollout(t *testing.T) {
	t.Parallel()
	// Batches of one with a wait between them: the rollout lasts long enough for the
	// slower agent to decide it too while it runs.
	e, path, old := startChangeEnv(t, "pair", 3, rolloutMeta("1s", "nomad-restart.batch-size", "1", "nomad-restart.batch-wait", "1s"))
	ctx := agenttest.Context(t)
	filers := map[string]*createLog{}
	for _, holder := range []string{"agent-a", "agent-b"} {
		filers[holder] = &createLog{}
		e.runChangeAgent(t, holder, e.Sim.BootstrapToken(), filers[holder].wrap, "pair")
	}

	index := agenttest.PutVar(t, e.Client, path, "bonjour", old)
	rec := waitRollout(t, ctx, e, "pair", nil)
	simtest.WaitFor(t, ctx, "both agents to try filing a rollout", func() bool {
		return len(filers["agent-a"].all()) > 0 && len(filers["agent-b"].all()) > 0
	})
	final := e.WaitSucceeded(t, rec)
	if len(final.Triggers) != 1 || !hasTrigger(final, "nomad:"+path, old, index) {
		t.Errorf("the rollout's triggers %+v, want the change from index %d to %d", final.Triggers, old, index)
	}
	filed := 0
	for holder, log := range filers {
		if ids := log.ids(); len(ids) != 1 || ids[0] != rec.ID {
			t.Errorf("%s tried to file restarts %v, want only the rollout %s (one ID per change on every agent)", holder, ids, rec.ID)
		}
		for _, err := range log.all() {
			switch {
			case err == nil:
				filed++
			case !errors.Is(err, store.ErrExists) && !errors.As(err, new(*store.JobBusyError)):
				t.Errorf("%s failed to file the rollout: %v", holder, err)
			}
		}
	}
	if filed != 1 {
		t.Errorf("the rollout was filed %d times, want once", filed)
	}
	if recs := jobRestarts(t, ctx, e, "pair"); len(recs) != 1 {
		t.Errorf("%d restarts of the job recorded, want the one rollout", len(recs))
	}
	if len(final.Allocs) != 3 {
		t.Errorf("the rollout planned %d allocations, want the job's 3", len(final.Allocs))
	}
	e.CheckOnce(t, final)
}

// A change made while a rollout runs: the rollout finishes, then a second one restarts
// once more the allocations that the first restarted before the change, and no other;
// its record names the second change and the first, which it supersedes.
func TestConfigChangeDuringRollout(t *testing.T) {
	t.Parallel()
	// The batch wait is several debounces long: the second change, made as the first
	// batch ends, comes due (change + debounce, when the allocations have re-rendered)
	// before the first rollout restarts its next allocation. An allocation restarted
	// within the debounce after a change may still run the old data, and Decide rolls it
	// again by design; this test keeps clear of that window.
	e, path, old := startChangeEnv(t, "mid", 3, rolloutMeta("1s", "nomad-restart.batch-size", "1", "nomad-restart.batch-wait", "4s"))
	ctx := agenttest.Context(t)
	e.runChangeAgent(t, "agent-1", e.Sim.BootstrapToken(), nil, "mid")

	index := agenttest.PutVar(t, e.Client, path, "v2", old)
	first := waitRollout(t, ctx, e, "mid", func(r *restart.Record) bool {
		return r.Progress(time.Now()).Done >= 1
	})
	if first.Status.Terminal() {
		t.Fatalf("the first rollout ended (%s) before the second change could be made during it", first.Status)
	}
	// Which allocations the first rollout restarted before the second change, from Nomad's
	// facts read just before it is written (its batch wait is running).
	before, err := simtest.CountRestarts(ctx, e.Client, "default", "mid")
	if err != nil {
		t.Fatal(err)
	}
	second := agenttest.PutVar(t, e.Client, path, "v3", index)

	first = e.WaitSucceeded(t, first)
	if len(first.Triggers) != 1 || !hasTrigger(first, "nomad:"+path, old, index) {
		t.Errorf("the first rollout's triggers %+v, want the first change (index %d to %d)", first.Triggers, old, index)
	}
	next := waitRollout(t, ctx, e, "mid", func(r *restart.Record) bool { return r.ID != first.ID })
	next = e.WaitSucceeded(t, next)
	// It names the change it answers, and the one it supersedes.
	if len(next.Triggers) != 2 || !hasTrigger(next, "nomad:"+path, index, second) || !hasTrigger(next, "nomad:"+path, old, index) {
		t.Errorf("the second rollout's triggers %+v, want the changes from index %d to %d and %d to %d", next.Triggers, old, index, index, second)
	}
	var again []string
	for _, a := range next.Allocs {
		again = append(again, a.ID)
		if before.InPlace[a.ID] != 1 {
			t.Errorf("the second rollout planned allocation %s, which the first restarted after the second change", a.ID)
		}
	}
	if len(again) != len(before.InPlace) {
		t.Errorf("the second rollout planned %v, want the %d allocation(s) restarted before the change: %v", again, len(before.InPlace), before.InPlace)
	}
	if recs := jobRestarts(t, ctx, e, "mid"); len(recs) != 2 {
		t.Errorf("%d restarts of the job recorded, want the two rollouts", len(recs))
	}
	// Each allocation restarted once after the second change: twice in all for those the
	// first rollout restarted before it, once for the others.
	final, err := simtest.CountRestarts(ctx, e.Client, "default", "mid")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range first.Allocs {
		if want := 1 + before.InPlace[a.ID]; final.InPlace[a.ID] != want {
			t.Errorf("allocation %s was restarted %d times, want %d", a.ID, final.InPlace[a.ID], want)
		}
	}
}

// An agent that files and drives a rollout dies in the middle of it; another agent with
// config-change rollouts on takes it over (and files no second one), and every allocation
// is restarted exactly once. Killed: nothing more of the first agent reaches Nomad, its
// lease is left to expire. Stopped: its Run's context ends, it detaches and releases.
func TestConfigChangeAgentDiesMidRollout(t *testing.T) {
	t.Parallel()
	for _, kill := range []bool{true, false} {
		name := "stopped"
		if kill {
			name = "killed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			agentDiesMidRollout(t, kill)
		})
	}
}

func agentDiesMidRollout(t *testing.T, kill bool) {
	e, path, old := startChangeEnv(t, "orphan", 4, rolloutMeta("1s", "nomad-restart.batch-size", "1", "nomad-restart.batch-wait", "2s"))
	ctx := agenttest.Context(t)
	_, net, stopFirst := e.runChangeAgent(t, "agent-a", e.Sim.BootstrapToken(), nil, "orphan")

	index := agenttest.PutVar(t, e.Client, path, "v2", old)
	rec := waitRollout(t, ctx, e, "orphan", func(r *restart.Record) bool {
		return r.Progress(time.Now()).Done >= 1 && r.Progress(time.Now()).Done < len(r.Allocs)
	})
	if kill {
		net.cut.Store(true) // from here nothing it sends reaches Nomad: not a detach, not a release
	}
	stopFirst()
	if !kill {
		simtest.WaitFor(t, ctx, "the first agent's detach", func() bool {
			cur, err := e.Store.Get(ctx, rec.Namespace, rec.ID)
			if err != nil {
				return false
			}
			_, _, detached := agenttest.DriverEvents(cur)
			return detached == 1
		})
	}
	filer := &createLog{}
	e.runChangeAgent(t, "agent-b", e.Sim.BootstrapToken(), filer.wrap)
	var final *restart.Record
	if kill {
		// A killed driver records no detach: the lease, not the events, kept the drivers
		// apart (waitSucceeded's check of the events does not apply).
		if final = e.WaitEnd(t, rec); final.Status != restart.StatusSucceeded {
			t.Errorf("the rollout ended %s (%s)", final.Status, final.Reason)
		}
	} else {
		final = e.WaitSucceeded(t, rec)
	}
	if started, tookOver, _ := agenttest.DriverEvents(final); started != 1 || tookOver != 1 {
		t.Errorf("the rollout was started %d and taken over %d times, want once each; events:\n%s", started, tookOver, agenttest.EventLines(final))
	}
	if len(final.Triggers) != 1 || !hasTrigger(final, "nomad:"+path, old, index) {
		t.Errorf("the rollout's triggers %+v, want the change from index %d to %d", final.Triggers, old, index)
	}
	if recs := jobRestarts(t, ctx, e, "orphan"); len(recs) != 1 {
		t.Errorf("%d restarts of the job recorded, want the one rollout", len(recs))
	}
	for _, err := range filer.all() {
		if err == nil {
			t.Errorf("the second agent filed a rollout of its own")
		}
	}
	e.CheckOnce(t, final)
}

// A job whose nomad-restart meta is invalid, and a job whose template reads a variable the
// agent's token (the shipped agent policy) may not list, are never rolled, while a valid
// job that reads the changed variable is: its rollout ending shows the agent acted on the
// changes meanwhile. The agent counts a warning for each (it logs them too).
func TestConfigChangeInvalidMetaOrUnlistableSourceRestartsNothing(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{TimeScale: realTime, ACLs: true})
	ctx := agenttest.Context(t)
	// The shipped agent policy lets the agent list the variables under nomad/jobs/ (where
	// workload identities read by default), not those elsewhere.
	visible, hidden := "nomad/jobs/visible/config", "team/payments/config"
	oldVisible := agenttest.PutVar(t, e.Client, visible, "v1", 0)
	hiddenIndex := agenttest.PutVar(t, e.Client, hidden, "v1", 0)
	valid := rolloutMeta("1s")
	registerTemplated(t, e, "valid", 2, visible, valid)
	registerTemplated(t, e, "hidden", 2, hidden, valid)
	// Invalid meta: a batch size the planner would refuse anyway, and a batch wait that,
	// were it ignored, would leave a rollout that plans and runs.
	for job, bad := range map[string][2]string{"invalid": {"nomad-restart.batch-size", "zero"}, "invalid-wait": {"nomad-restart.batch-wait", "soon"}} {
		registerTemplated(t, e, job, 2, visible, rolloutMeta("1s", bad[0], bad[1]))
	}

	token := e.ShippedToken(t, "agent")
	listable(t, ctx, e, token, visible, true)
	listable(t, ctx, e, token, hidden, false)
	// Past the jobs' deployments (a rollout waits for them), every job that the agent would
	// roll comes due with the valid one.
	for _, job := range []string{"valid", "hidden", "invalid", "invalid-wait"} {
		awaitNoDeployment(t, ctx, e, job)
	}
	a, _, _ := e.runChangeAgent(t, "agent-1", token, nil, "valid", "hidden")

	agenttest.PutVar(t, e.Client, hidden, "v2", hiddenIndex) // first: the valid rollout comes due after it
	visibleIndex := agenttest.PutVar(t, e.Client, visible, "v2", oldVisible)
	rec := e.WaitSucceeded(t, waitRollout(t, ctx, e, "valid", nil))
	if !hasTrigger(rec, "nomad:"+visible, oldVisible, visibleIndex) {
		t.Errorf("the valid job's rollout has triggers %+v, want the change from index %d to %d", rec.Triggers, oldVisible, visibleIndex)
	}
	e.CheckOnce(t, rec)
	for _, job := range []string{"hidden", "invalid", "invalid-wait"} {
		if recs := jobRestarts(t, ctx, e, job); len(recs) != 0 {
			t.Errorf("job %s was rolled: %d restart(s), the first %s", job, len(recs), recs[0].ID)
		}
		counts, err := simtest.CountRestarts(ctx, e.Client, "default", job)
		if err != nil {
			t.Fatal(err)
		}
		if len(counts.InPlace) != 0 || len(counts.Replaced) != 0 {
			t.Errorf("allocations of job %s were restarted: in place %v, replaced %v", job, counts.InPlace, counts.Replaced)
		}
	}
	warnings := a.metrics.changeMetrics().warnings
	for _, kind := range []string{"invalid_meta", "source_missing"} {
		if counterValue(warnings.WithLabelValues(kind)) == 0 {
			t.Errorf("no %s warning counted by the agent", kind)
		}
	}
}

// runChangeAgent runs an agent (newAgent) with config-change rollouts on, a watch of its
// own, and the simulation's clock (rollingOn), and waits until it has decided on the sources
// of each of jobs; it returns the agent, its way to Nomad (all its requests go through it)
// and its stop. A job just registered is still in its deployment (Nomad's default
// min_healthy_time, 10s, in real time here), during which a rollout waits: the agent
// decides again soon after it ends. tweak, when given, runs last.
func (e *env) runChangeAgent(t testing.TB, holder, token string, tweak func(*Config), jobs ...string) (*Agent, *agentNet, func()) {
	t.Helper()
	net := &agentNet{}
	a := e.newAgent(t, holder, token, func(c *Config) {
		net.wire(t, e, c, token)
		rollingOn(e, sourcewatch.New(nomadvars.New(net.client, nomadvars.Options{}), sourcewatch.Options{}))(c)
		if tweak != nil {
			tweak(c)
		}
	})
	stop := agenttest.Run(t, a)
	for _, job := range jobs {
		net.awaitDecided(t, agenttest.Context(t), job)
	}
	return a, net, stop
}

// awaitNoDeployment waits until job has no active deployment.
func awaitNoDeployment(t testing.TB, ctx context.Context, e *env, job string) {
	t.Helper()
	nc := cluster.NewNomad(e.Client)
	simtest.WaitFor(t, ctx, "the end of the deployment of "+job, func() bool {
		d, err := nc.ActiveDeployment(ctx, "default", job)
		return err == nil && d == nil
	})
}

// jobRestarts lists the restart records of job (namespace default).
func jobRestarts(t testing.TB, ctx context.Context, e *env, job string) []*restart.Record {
	t.Helper()
	recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: job})
	if err != nil {
		t.Fatalf("listing the restarts of %s: %v", job, err)
	}
	return recs
}

// waitRollout waits until job has a restart record that satisfies ok (nil: any) and
// returns it.
func waitRollout(t testing.TB, ctx context.Context, e *env, job string, ok func(*restart.Record) bool) *restart.Record {
	t.Helper()
	var found *restart.Record
	simtest.WaitFor(t, ctx, "a rollout of "+job, func() bool {
		for _, r := range jobRestarts(t, ctx, e, job) {
			if ok == nil || ok(r) {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// hasTrigger reports whether r names the change of source from index from to index to.
func hasTrigger(r *restart.Record, source string, from, to uint64) bool {
	for _, tr := range r.Triggers {
		if tr.Source == source && tr.OldIndex == from && tr.NewIndex == to {
			return true
		}
	}
	return false
}

// listable checks the premise of an ACL case: whether token lists the variable at path.
func listable(t *testing.T, ctx context.Context, e *env, token, path string, want bool) {
	t.Helper()
	client := simtest.ClientAs(t, e.Sim, token)
	metas, _, err := client.Variables().PrefixList(path, (&api.QueryOptions{Namespace: "default"}).WithContext(ctx))
	if err != nil {
		t.Fatalf("listing %s with the agent's token: %v", path, err)
	}
	if got := len(metas) == 1; got != want {
		t.Fatalf("the agent's token lists %d variable(s) at %s; the test wants it listable=%v", len(metas), path, want)
	}
}

// createLog wraps an agent's store and remembers each Create's outcome by record ID.
type createLog struct {
	store.Store
	mu    sync.Mutex
	tries map[string][]error
}

// wrap is a Config tweak that puts the log around the agent's store.
func (l *createLog) wrap(c *Config) { l.Store, c.Store = c.Store, l }

func (l *createLog) Create(ctx context.Context, rec *restart.Record) error {
	err := l.Store.Create(ctx, rec)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tries == nil {
		l.tries = map[string][]error{}
	}
	l.tries[rec.ID] = append(l.tries[rec.ID], err)
	return err
}

// ids are the IDs of the records Create was asked to store, sorted.
func (l *createLog) ids() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.tries))
}

func (l *createLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []error
	for _, errs := range l.tries {
		out = append(out, errs...)
	}
	return out
}

// errKilled is what a killed agent's requests meet: they never leave the process.
var errKilled = errors.New("agent killed: no request leaves the process")

// agentNet is an agent's way to Nomad in these tests. It notes the paths the agent asks
// for, and it cuts the agent off at once, as a SIGKILL would: requests already sent may
// still take effect, no later one is sent.
type agentNet struct {
	next   http.RoundTripper
	cut    atomic.Bool
	client *api.Client // the agent's client, with its token, going through the agentNet

	mu    sync.Mutex
	paths map[string]bool
	// denied paths are answered as Nomad answers a token without the capability.
	denied map[string]bool
}

func (n *agentNet) RoundTrip(r *http.Request) (*http.Response, error) {
	if n.cut.Load() {
		return nil, errKilled
	}
	n.mu.Lock()
	if n.paths == nil {
		n.paths = map[string]bool{}
	}
	n.paths[r.URL.Path] = true
	denied := n.denied[r.URL.Path]
	n.mu.Unlock()
	if denied {
		return &http.Response{StatusCode: http.StatusForbidden, Status: "403 Forbidden", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"text/plain"}}, Body: io.NopCloser(strings.NewReader("Permission denied")), Request: r}, nil
	}
	return n.next.RoundTrip(r)
}

// deny answers path with Nomad's 403 (on) or lets it through again (off).
func (n *agentNet) deny(path string, on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.denied == nil {
		n.denied = map[string]bool{}
	}
	n.denied[path] = on
}

func (n *agentNet) asked(path string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.paths[path]
}

// awaitDecided waits until the agent has decided on job's sources as they are: it reads
// the job's allocations only to decide (the job has no restart yet), after it took the
// sources' states. A change made afterwards is seen as one, with its old index.
func (n *agentNet) awaitDecided(t testing.TB, ctx context.Context, job string) {
	t.Helper()
	simtest.WaitFor(t, ctx, "the agent to decide on the sources of "+job, func() bool {
		return n.asked("/v1/job/" + job + "/allocations")
	})
}

// wire is a Config tweak: the agent's client, cluster and store go through n, and its
// leases have Nomad's shortest TTL (10s, which Nomad's leader doubles) and a short lock
// delay, so that a successor does not wait long for a lease left behind.
func (n *agentNet) wire(t testing.TB, e *env, c *Config, token string) {
	t.Helper()
	n.next = c.Metrics.Transport(nil)
	n.client = e.AgentClient(t, token, n)
	nomadParts(c, n.client)
	c.Store = nomadstore.NewRestarts(nomadvars.New(n.client, nomadvars.Options{}), nomadstore.Options{LockTTL: 10 * time.Second, LockDelay: 100 * time.Millisecond})
}
