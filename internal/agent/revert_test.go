package agent

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// End to end on nomadsim, the revert of a failed config change (nomad-restart.on-failure =
// "revert"): a 4-instance service whose instances load `mode` from a variable as they
// start; `mode=bad` makes an instance answer 30% of requests with 500 and fail its health
// check, so the rollout's first batch fails its health gate.

// goodItems and badItems are the variable's values; "port" holds a value that must never
// appear in a record.
var (
	goodItems = map[string]string{"mode": "good", "port": "kept-8080"}
	badItems  = map[string]string{"mode": "bad", "port": "kept-8080"}
)

// revertJob is a service job of count instances whose task renders `mode` of the variable
// at path (change_mode noop), serves port http behind a Nomad service with a health check,
// loads a bad configuration when mode is bad, and asks rollouts to revert on failure.
func revertJob(id string, count int, path string) *api.Job {
	return revertJobReading(id, count, `{{ with nomadVar "`+path+`" }}{{ .mode }}{{ end }}`, "nomad:"+path+":mode=bad")
}

// revertJobReading is revertJob with the template tmpl, bad when badWhen (nomadsim's
// nomadsim.bad_when).
func revertJobReading(id string, count int, tmpl, badWhen string) *api.Job {
	meta := rolloutMeta("1s", onchange.KeyOnFailure, "revert", onchange.KeyBatchSize, "1", onchange.KeyHealth, "checks",
		onchange.KeyHealthyDeadline, "6s", onchange.KeyMinHealthyTime, "1s")
	job := templatedJob(id, count, tmpl, meta)
	tg := job.TaskGroups[0]
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	tg.Tasks[0].Services = []*api.Service{{Name: id, PortLabel: "http", Provider: "nomad",
		Checks: []api.ServiceCheck{{Name: "health", Type: "http", Path: "/health", Interval: time.Second, Timeout: time.Second}}}}
	tg.Meta = map[string]string{"nomadsim.bad_when": badWhen}
	tg.Update = &api.UpdateStrategy{MinHealthyTime: new(time.Second), HealthyDeadline: new(10 * time.Second)}
	return job
}

// countFailedRequests starts a balancer in front of the 4 instances of service (Nomad's
// service table, a census every 100ms), waits until all answer, and counts from then: what
// a service's clients see while a rollout and its revert run.
func countFailedRequests(t testing.TB, ctx context.Context, e *env, service string) *simtest.Balancer {
	t.Helper()
	bal := simtest.NomadBalancer(e.Sim, service)
	bal.Census = 100 * time.Millisecond
	if err := bal.Start(ctx); err != nil {
		t.Fatal(err)
	}
	bal.WaitAnswering(t, 4, 10*time.Second)
	bal.Reset()
	return bal
}

// revertEnv starts a cluster whose instances answer, creates the variable with goodItems,
// runs the job (4 instances) and waits for its deployment to end.
func revertEnv(t testing.TB, job string) (e *env, path string, index uint64) {
	t.Helper()
	e = startEnv(t, nomadsim.Options{TimeScale: realTime, ServeInstances: true})
	path = "nomad/jobs/" + job + "/config"
	index = agenttest.PutItems(t, e.Client, path, goodItems, 0)
	submitTemplated(t, e, revertJob(job, 4, path), 4)
	awaitNoDeployment(t, agenttest.Context(t), e, job)
	return e, path, index
}

// awaitRecord waits until the restart id exists, and returns it.
func awaitRecord(t testing.TB, ctx context.Context, e *env, id string) *restart.Record {
	t.Helper()
	var rec *restart.Record
	simtest.WaitFor(t, ctx, "restart "+id, func() bool {
		r, err := e.Store.Get(ctx, "default", id)
		rec = r
		return err == nil
	})
	return rec
}

// failedRollout waits for the job's rollout (not a revert) to fail, and returns it.
func failedRollout(t testing.TB, ctx context.Context, e *env, job string) *restart.Record {
	t.Helper()
	rec := waitRollout(t, ctx, e, job, func(r *restart.Record) bool { return r.Revert == nil })
	if rec = e.WaitEnd(t, rec); rec.Status != restart.StatusFailed {
		t.Fatalf("the rollout of the bad value ended %s (%s), want failed", rec.Status, rec.Reason)
	}
	return rec
}

// checkReverted checks the end of a revert: the variable holds its previous items exactly
// at the index the revert recorded; the one allocation restarted onto the bad value was
// restarted once more and answers again, the others never restarted; the kept value is
// gone and no record shows it.
func checkReverted(t testing.TB, ctx context.Context, e *env, path string, rollout *restart.Record, bad uint64) *restart.Record {
	t.Helper()
	return checkRevertedTo(t, ctx, e, rollout, func(w restart.RevertWrite) {
		v, _, err := e.Client.Variables().Read(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(v.Items, goodItems) || v.ModifyIndex != w.WrittenIndex || w.BadIndex != bad || w.Source != "nomad:"+path {
			t.Errorf("the variable holds %v at index %d; the revert wrote %+v; want %v written over index %d", v.Items, v.ModifyIndex, w, goodItems, bad)
		}
	})
}

// checkRevertedTo is checkReverted for any source; sourceBack checks the source after the
// write-back w.
func checkRevertedTo(t testing.TB, ctx context.Context, e *env, rollout *restart.Record, sourceBack func(w restart.RevertWrite)) *restart.Record {
	t.Helper()
	back := e.WaitEnd(t, awaitRecord(t, ctx, e, onchange.RevertID(rollout.ID)))
	if back.Status != restart.StatusSucceeded {
		t.Fatalf("the revert's restart ended %s (%s):\n%s", back.Status, back.Reason, agenttest.EventLines(back))
	}
	onto := onchange.RestartedOnto(rollout)
	if len(onto) != 1 {
		t.Fatalf("the rollout restarted %v onto the bad value, want its first batch's one allocation", onto)
	}
	if back.Revert == nil || back.Revert.Rollout != rollout.ID || len(back.Revert.Writes) != 1 {
		t.Fatalf("the revert's record says %+v, want one write-back of rollout %s", back.Revert, rollout.ID)
	}
	w := back.Revert.Writes[0]
	sourceBack(w)
	if len(back.Allocs) != 1 || back.Allocs[0].ID != onto[0] {
		t.Errorf("the revert restarted %+v, want only %s", back.Allocs, onto[0])
	}
	counts, err := simtest.CountRestarts(ctx, e.Client, "default", rollout.JobID)
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range counts.InPlace {
		want := 0
		if id == onto[0] {
			want = 2 // onto the bad value, and back
		}
		if n != want {
			t.Errorf("allocation %s was restarted %d times, want %d", id, n, want)
		}
	}
	if len(counts.Replaced) != 0 {
		t.Errorf("allocations replaced: %v", counts.Replaced)
	}
	running := 0
	for _, a := range counts.Allocs {
		if a.ClientStatus == api.AllocClientStatusRunning {
			running++
		}
	}
	if running != 4 || len(counts.Allocs) != 4 {
		t.Errorf("%d of %d allocations run, want the same 4 throughout", running, len(counts.Allocs))
	}
	// Once the revert's restart succeeded, the agent forgets the value; the variable stays
	// as the mark of the write-back.
	simtest.WaitFor(t, ctx, "the kept value forgotten", func() bool {
		kept, _, err := e.Client.Variables().Read(w.KeptPath, nil)
		return err == nil && !strings.Contains(kept.Items["kept"], "kept-8080") && strings.Contains(kept.Items["kept"], `"State":"reverted"`)
	})
	for _, r := range []*restart.Record{rollout, back} {
		b, _ := json.Marshal(r)
		if strings.Contains(string(b), "kept-8080") {
			t.Errorf("record %s shows the variable's value", r.ID)
		}
	}
	answersGood(t, ctx, e, onto[0])
	return back
}

// answersGood checks that the allocation's instance answers 200 to 50 requests in a row
// (a bad one answers 30% of them 500).
func answersGood(t testing.TB, ctx context.Context, e *env, allocID string) {
	t.Helper()
	regs, _, err := e.Client.Allocations().Services(allocID, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil || len(regs) != 1 {
		t.Fatalf("services of %s: %v %v", allocID, regs, err)
	}
	url := "http://" + net.JoinHostPort(regs[0].Address, strconv.Itoa(regs[0].Port)) + "/"
	for i := range 50 {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("request %d to the reverted allocation: %v", i, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d to the reverted allocation answered %d", i, resp.StatusCode)
		}
	}
}

// The variable is changed to a bad value: the rollout's first batch fails its health gate,
// the agent writes the previous items back with check-and-set, and brings back the one
// allocation that restarted onto the bad value; the other three never restart, and never
// fewer than 3 of 4 instances answer. The requests failed through a balancer are counted
// (docs/benchmarks.md).
func TestConfigChangeRevertsAFailedChange(t *testing.T) {
	t.Parallel()
	e, path, old := revertEnv(t, "svc")
	ctx := agenttest.Context(t)
	_, _, stop := e.runChangeAgent(t, "agent-a", e.Sim.BootstrapToken(), nil, "svc")
	defer stop()

	bal := countFailedRequests(t, ctx, e, "svc")

	bad := agenttest.PutItems(t, e.Client, path, badItems, old)
	rollout := failedRollout(t, ctx, e, "svc")
	checkReverted(t, ctx, e, path, rollout, bad)
	res := bal.Stop()
	t.Logf("through a balancer reading Nomad's service table: %s; fewest instances answering %d of 4", res, res.MinAnswering)
	// Never fewer than 3 of 4 serving is Nomad's fact that checkReverted holds (three never
	// restarted, the fourth restarted one at a time); the census measures it through the
	// balancer, where a request that times out on a loaded machine counts as not answering.
	if res.MinAnswering < 3 && res.TimedOut == 0 {
		t.Errorf("only %d of 4 instances answered at one moment, want at least 3", res.MinAnswering)
	}
	if res.Status == 0 {
		t.Errorf("no request met the bad allocation's 500s (%s): the bad value did not reach it", res)
	}
}

// hookedValues runs hook after each successful call of the agent's kept-value writes and
// write-backs, with what was written: a test's way to act, or kill the agent, at the points
// of a revert.
type hookedValues struct {
	SourceValues
	writeBacks atomic.Int32
	// beforeKept runs before a kept value's write; an error stops it.
	beforeKept func(onchange.Kept) error
	// afterReadKept runs after a kept value's read; an error fails the read.
	afterReadKept func(onchange.Kept) error
	onKept        func(onchange.Kept) error
	onWritten     func() error
	// beforeWriteBack runs before a write-back; an error stops it, as a failed request.
	beforeWriteBack func() error
	// dead cuts the agent off its sources and kept values, as a killed process.
	dead atomic.Bool
}

func (h *hookedValues) ReadValue(ctx context.Context, src onchange.Source) (onchange.SourceValue, error) {
	if h.dead.Load() {
		return onchange.SourceValue{}, errKilled
	}
	return h.SourceValues.ReadValue(ctx, src)
}

func (h *hookedValues) ReadKept(ctx context.Context, ns string, src onchange.Source) (onchange.Kept, uint64, error) {
	if h.dead.Load() {
		return onchange.Kept{}, 0, errKilled
	}
	k, idx, err := h.SourceValues.ReadKept(ctx, ns, src)
	if err == nil && h.afterReadKept != nil {
		if herr := h.afterReadKept(k); herr != nil {
			return onchange.Kept{}, 0, herr
		}
	}
	return k, idx, err
}

func (h *hookedValues) DeleteKept(ctx context.Context, ns string, src onchange.Source, index uint64) error {
	if h.dead.Load() {
		return errKilled
	}
	return h.SourceValues.DeleteKept(ctx, ns, src, index)
}

func (h *hookedValues) WriteKept(ctx context.Context, ns string, src onchange.Source, k onchange.Kept, index uint64) (uint64, error) {
	if h.dead.Load() {
		return 0, errKilled
	}
	if h.beforeKept != nil {
		if err := h.beforeKept(k); err != nil {
			return 0, err
		}
	}
	out, err := h.SourceValues.WriteKept(ctx, ns, src, k, index)
	if err == nil && h.onKept != nil {
		if herr := h.onKept(k); herr != nil {
			return 0, herr
		}
	}
	return out, err
}

func (h *hookedValues) WriteBack(ctx context.Context, src onchange.Source, v onchange.SourceValue, index uint64) (uint64, error) {
	if h.dead.Load() {
		return 0, errKilled
	}
	if h.beforeWriteBack != nil {
		if err := h.beforeWriteBack(); err != nil {
			return 0, err
		}
	}
	out, err := h.SourceValues.WriteBack(ctx, src, v, index)
	if err == nil {
		h.writeBacks.Add(1)
		if h.onWritten != nil {
			if herr := h.onWritten(); herr != nil {
				return 0, herr
			}
		}
	}
	return out, err
}

// hook is a Config tweak that puts h between the agent and its source values.
func (h *hookedValues) hook(c *Config) {
	h.SourceValues = c.Changes.Values
	c.Changes.Values = h
}

// A change made by hand between the failure and the write-back is left alone: the agent
// finds the variable changed since the bad value, writes nothing and files no revert.
func TestConfigChangeRevertLeavesAChangeByHandAlone(t *testing.T) {
	t.Parallel()
	e, path, old := revertEnv(t, "hand")
	ctx := agenttest.Context(t)
	hand := map[string]string{"mode": "hand"}
	var bad atomic.Uint64
	h := &hookedValues{}
	h.onKept = func(k onchange.Kept) error {
		if k.State == onchange.KeptReverting {
			agenttest.PutItems(t, e.Client, path, hand, bad.Load()) // the operator, at 3 a.m.
		}
		return nil
	}
	a, _, stop := e.runChangeAgent(t, "agent-a", e.Sim.BootstrapToken(), h.hook, "hand")
	defer stop()

	bad.Store(agenttest.PutItems(t, e.Client, path, badItems, old))
	rollout := failedRollout(t, ctx, e, "hand")
	simtest.WaitFor(t, ctx, "the agent to find the change by hand", func() bool {
		return counterValue(a.metrics.changeMetrics().reverts.WithLabelValues("changed_since")) == 1
	})
	if n := h.writeBacks.Load(); n != 0 {
		t.Errorf("%d write-backs, want none", n)
	}
	v, _, err := e.Client.Variables().Read(path, nil)
	if err != nil || !maps.Equal(v.Items, hand) {
		t.Errorf("the variable holds %v (%v), want the change by hand %v", v, err, hand)
	}
	if _, err := e.Store.Get(ctx, "default", onchange.RevertID(rollout.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a revert was filed (%v)", err)
	}
}

// The revert is durable: an agent killed after the rollout failed (before it began the
// revert), after it wrote the kept value back (before it said so), or mid-way through the
// restart that brings the allocation back, leaves it to another agent, which finishes it
// exactly once: one write-back in all, the allocation restarted once more, never twice.
func TestConfigChangeRevertSurvivesAKilledAgent(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"after the failure", "after the write-back", "mid-way back"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			revertAfterKill(t, point)
		})
	}
}

func revertAfterKill(t *testing.T, point string) {
	job := strings.ReplaceAll(point, " ", "-")
	e, path, old := revertEnv(t, job)
	ctx := agenttest.Context(t)
	first, second := &hookedValues{}, &hookedValues{}
	var cut func()
	kill := func() error { cut(); return errKilled }
	switch point {
	case "after the failure":
		first.beforeKept = func(k onchange.Kept) error {
			if k.State == onchange.KeptReverting {
				return kill()
			}
			return nil
		}
	case "after the write-back":
		first.onWritten = kill
	}
	_, net, stopFirst := e.runChangeAgent(t, "agent-a", e.Sim.BootstrapToken(), first.hook, job)
	cut = func() { net.cut.Store(true); first.dead.Store(true) }

	bad := agenttest.PutItems(t, e.Client, path, badItems, old)
	rollout := failedRollout(t, ctx, e, job)
	if point == "mid-way back" {
		back := awaitRecord(t, ctx, e, onchange.RevertID(rollout.ID))
		simtest.WaitFor(t, ctx, "the revert's restart asked of Nomad", func() bool {
			r, err := e.Store.Get(ctx, back.Namespace, back.ID)
			return err == nil && len(r.Allocs) == 1 && r.Allocs[0].State == restart.AllocWaiting
		})
		cut()
	} else {
		simtest.WaitFor(t, ctx, "the first agent's death", net.cut.Load)
	}
	// Nothing of the first agent reaches Nomad any more; its process ends at the test's end
	// (a killed agent's goroutines give up at their own pace, which the second does not wait).
	defer stopFirst()

	e.runChangeAgent(t, "agent-b", e.Sim.BootstrapToken(), second.hook)
	back := checkReverted(t, ctx, e, path, rollout, bad)
	if n := first.writeBacks.Load() + second.writeBacks.Load(); n != 1 {
		t.Errorf("the kept value was written back %d times, want once", n)
	}
	// A killed driver records no detach: the lease kept the drivers apart, and the events
	// show one start and, when the first agent died driving it, one takeover.
	wantTakeovers := 0
	if point == "mid-way back" {
		wantTakeovers = 1
	}
	if started, tookOver, _ := agenttest.DriverEvents(back); started != 1 || tookOver != wantTakeovers {
		t.Errorf("the revert's restart was started %d times and taken over %d, want once and %d; events:\n%s", started, tookOver, wantTakeovers, agenttest.EventLines(back))
	}
}

// The same with a Consul key: its bytes and flags are kept and written back with Consul's
// check-and-set (?cas=<ModifyIndex>).
func TestConfigChangeRevertsAFailedConsulKey(t *testing.T) {
	t.Parallel()
	e, kv, withConsul := consulRevertEnv(t, "kvsvc")
	ctx := agenttest.Context(t)
	const key = "kvsvc/mode"
	_, _, stop := e.runChangeAgent(t, "agent-a", e.Sim.BootstrapToken(), withConsul, "kvsvc")
	defer stop()
	bal := countFailedRequests(t, ctx, e, "kvsvc")

	if _, err := kv.Put(&consulapi.KVPair{Key: key, Value: []byte("bad")}, nil); err != nil {
		t.Fatal(err)
	}
	rollout := failedRollout(t, ctx, e, "kvsvc")
	checkRevertedTo(t, ctx, e, rollout, func(w restart.RevertWrite) {
		pair, _, err := kv.Get(key, nil)
		if err != nil || pair == nil {
			t.Fatalf("reading %s: %v %v", key, pair, err)
		}
		if string(pair.Value) != "good" || pair.Flags != 42 || pair.ModifyIndex != w.WrittenIndex || w.Source != "consul:"+key || w.BadIndex == 0 {
			t.Errorf("the key holds %q (flags %d) at index %d; the revert wrote %+v; want \"good\" with flags 42", pair.Value, pair.Flags, pair.ModifyIndex, w)
		}
	})
	res := bal.Stop()
	t.Logf("through a balancer reading Nomad's service table: %s; fewest instances answering %d of 4", res, res.MinAnswering)
	// Never fewer than 3 of 4 serving is Nomad's fact that checkReverted holds (three never
	// restarted, the fourth restarted one at a time); the census measures it through the
	// balancer, where a request that times out on a loaded machine counts as not answering.
	if res.MinAnswering < 3 && res.TimedOut == 0 {
		t.Errorf("only %d of 4 instances answered at one moment, want at least 3", res.MinAnswering)
	}
}

// The kept values are the agent's alone: with the shipped policies, an operator's token
// may neither read nor list nomad-restart/~kept/*, though it may everything else under
// nomad-restart/; the agent's token reads, writes and deletes it.
func TestKeptValuesAreReadableByTheAgentAlone(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{ACLs: true})
	hub := sourcewatch.New(e.Vars, sourcewatch.Options{})
	src := onchange.Source{Kind: onchange.NomadVariable, Path: "nomad/jobs/web/config", Namespace: "default", Region: "global"}
	path := hub.KeptPath(src)
	if !strings.HasPrefix(path, "nomad-restart/~kept/") {
		t.Fatalf("kept at %s", path)
	}
	agent := sourcewatch.New(nomadvarsFor(t, e, e.ShippedToken(t, "agent")), sourcewatch.Options{})
	ctx := agenttest.Context(t)
	idx, err := agent.WriteKept(ctx, "default", src, onchange.Kept{Source: src.String(), State: onchange.KeptHeld, OldIndex: 1, BadIndex: 2,
		Value: onchange.SourceValue{Index: 1, Items: goodItems}}, 0)
	if err != nil {
		t.Fatalf("the agent's policy may not keep a value: %v", err)
	}
	if k, got, err := agent.ReadKept(ctx, "default", src); err != nil || got != idx || !maps.Equal(k.Value.Items, goodItems) {
		t.Fatalf("the agent reads back %+v at %d (%v), want the kept items at %d", k, got, err, idx)
	}
	op := e.shippedClient(t, "operator")
	if _, _, err := op.Variables().Read(path, nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("the operator's policy reads the kept value: %v", err)
	}
	// Nomad filters a listing by the token's policy: the kept variable is left out of the
	// operator's, not refused.
	if metas, _, err := op.Variables().PrefixList("nomad-restart/~kept/", nil); err != nil || len(metas) != 0 {
		t.Errorf("the operator's policy lists the kept values: %v (%v)", metas, err)
	}
	if err := agent.DeleteKept(ctx, "default", src, idx); err != nil {
		t.Errorf("the agent's policy may not delete its kept value: %v", err)
	}
}

// nomadvarsFor is a Variables layer on the cluster with token.
func nomadvarsFor(t *testing.T, e *env, token string) *nomadvars.Client {
	t.Helper()
	return nomadvars.New(simtest.ClientAs(t, e.Sim, token), nomadvars.Options{})
}

// Two agents follow the job when its rollout fails: both go for the revert, and the
// check-and-sets leave one write-back, one revert filed, the allocation restarted once more.
func TestConfigChangeRevertByTwoAgentsWritesOnce(t *testing.T) {
	t.Parallel()
	e, path, old := revertEnv(t, "twice")
	ctx := agenttest.Context(t)
	hooks := []*hookedValues{{}, {}}
	filers := []*createLog{{}, {}}
	var reverting [2]atomic.Int32 // each agent's tries to mark the kept value as reverting
	for i, holder := range []string{"agent-a", "agent-b"} {
		hooks[i].beforeKept = func(k onchange.Kept) error {
			if k.State == onchange.KeptReverting {
				reverting[i].Add(1)
			}
			return nil
		}
		_, _, stop := e.runChangeAgent(t, holder, e.Sim.BootstrapToken(), func(c *Config) {
			hooks[i].hook(c)
			filers[i].wrap(c)
		}, "twice")
		defer stop()
	}
	bad := agenttest.PutItems(t, e.Client, path, badItems, old)
	rollout := failedRollout(t, ctx, e, "twice")
	checkReverted(t, ctx, e, path, rollout, bad)
	if n := hooks[0].writeBacks.Load() + hooks[1].writeBacks.Load(); n != 1 {
		t.Errorf("the kept value was written back %d times, want once", n)
	}
	t.Logf("tries to begin the revert: agent-a %d, agent-b %d", reverting[0].Load(), reverting[1].Load())
	filed := 0
	for _, f := range filers {
		f.mu.Lock()
		for _, err := range f.tries[onchange.RevertID(rollout.ID)] {
			if err == nil {
				filed++
			}
		}
		f.mu.Unlock()
	}
	if filed != 1 {
		t.Errorf("the revert was filed %d times, want once", filed)
	}
}

// BenchmarkConfigChangeRevert measures what a revert costs a service's clients: the
// scenario of TestConfigChangeRevertsAFailedChange (4 instances, batch size 1, a 6 s healthy
// deadline, nomadsim at time scale 1), with a balancer reading Nomad's service table from the
// bad value's write to the end of the revert. It reports the requests that failed and the
// seconds from the write to the revert's end (docs/benchmarks.md):
//
//	go test -run '^$' -bench BenchmarkConfigChangeRevert -benchtime=3x ./internal/agent/
func BenchmarkConfigChangeRevert(b *testing.B) {
	var failed, requests, minAnswering, took float64
	for i := range b.N {
		b.StopTimer()
		job := "bench" + strconv.Itoa(i)
		e, path, old := revertEnv(b, job)
		ctx := agenttest.Context(b)
		_, _, stop := e.runChangeAgent(b, "agent-a", e.Sim.BootstrapToken(), nil, job)
		bal := countFailedRequests(b, ctx, e, job)
		b.StartTimer()
		start := time.Now()
		agenttest.PutItems(b, e.Client, path, badItems, old)
		rollout := failedRollout(b, ctx, e, job)
		back := e.WaitEnd(b, awaitRecord(b, ctx, e, onchange.RevertID(rollout.ID)))
		took += time.Since(start).Seconds()
		b.StopTimer()
		res := bal.Stop()
		stop()
		if back.Status != restart.StatusSucceeded {
			b.Fatalf("the revert ended %s (%s)", back.Status, back.Reason)
		}
		failed += float64(res.Failed)
		requests += float64(res.Requests)
		minAnswering += float64(res.MinAnswering)
		b.Logf("%s; fewest answering %d of 4", res, res.MinAnswering)
	}
	n := float64(b.N)
	b.ReportMetric(failed/n, "failed/op")
	b.ReportMetric(requests/n, "requests/op")
	b.ReportMetric(100*failed/requests, "failed-%")
	b.ReportMetric(minAnswering/n, "min-answering")
	b.ReportMetric(took/n, "s-to-reverted")
}

// A write-back whose request fails (Nomad answers 500) is tried again: the revert ends as
// it would have, with one write-back.
func TestConfigChangeRevertRetriesAFailedWriteBack(t *testing.T) {
	t.Parallel()
	e, path, old := revertEnv(t, "retry")
	ctx := agenttest.Context(t)
	var failures atomic.Int32
	h := &hookedValues{beforeWriteBack: func() error {
		if failures.Add(1) == 1 {
			return errLeaderUnavailable
		}
		return nil
	}}
	revertThrough(t, ctx, e, h, "retry", path, old)
	if n, tries := h.writeBacks.Load(), failures.Load(); n != 1 || tries != 2 {
		t.Errorf("%d write-backs in %d tries, want one in two", n, tries)
	}
}

// A kept value that cannot be read (Nomad answers 500) after the write-back, until a while
// after the revert's restart ended, neither makes the agent roll the write-back as a change
// of its own (which would restart the three allocations that never loaded the bad value):
// it decides again, and the value is forgotten once a read works.
func TestConfigChangeRevertOutlastsAFailedReadOfTheKeptValue(t *testing.T) {
	t.Parallel()
	e, path, old := revertEnv(t, "readfail")
	ctx := agenttest.Context(t)
	const failuresAfter = 5 // reads failed once the revert's restart ended
	var ended, reads atomic.Int32
	h := &hookedValues{afterReadKept: func(k onchange.Kept) error {
		if k.State != onchange.KeptReverted {
			return nil
		}
		if ended.Load() == 0 {
			recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: "readfail"})
			for _, r := range recs {
				if err == nil && r.Revert != nil && r.Status.Terminal() {
					ended.Store(1)
				}
			}
		}
		if ended.Load() == 0 || reads.Add(1) <= failuresAfter {
			return errLeaderUnavailable
		}
		return nil
	}}
	rollout := revertThrough(t, ctx, e, h, "readfail", path, old)
	simtest.WaitFor(t, ctx, "the failed reads of the kept value", func() bool { return reads.Load() > failuresAfter })
	recs, err := e.Store.List(ctx, store.Filter{Namespace: "default", JobID: "readfail"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID != rollout.ID && r.ID != onchange.RevertID(rollout.ID) {
			t.Errorf("restart %s filed besides the rollout and its revert: %s", r.ID, agenttest.EventLines(r))
		}
	}
}

// errLeaderUnavailable is a request's failure as Nomad answers it when it has no leader.
var errLeaderUnavailable = errors.New("unexpected response code: 500 (rpc error: leader unavailable)")

// revertThrough runs an agent whose kept values and write-backs go through h, puts the bad
// items in job's variable at path (at index old), and checks that the failed rollout it
// returns is reverted as without faults.
func revertThrough(t *testing.T, ctx context.Context, e *env, h *hookedValues, job, path string, old uint64) *restart.Record {
	t.Helper()
	_, _, stop := e.runChangeAgent(t, "agent-a", e.Sim.BootstrapToken(), h.hook, job)
	t.Cleanup(stop)
	bad := agenttest.PutItems(t, e.Client, path, badItems, old)
	rollout := failedRollout(t, ctx, e, job)
	checkReverted(t, ctx, e, path, rollout, bad)
	return rollout
}

// consulRevertEnv starts a cluster whose instances answer, sets the Consul key <job>/mode to
// "good" with flags 42, runs the job (4 instances reading it) and waits for its deployment
// to end; it returns the env, Consul's KV and a Config tweak that watches Consul.
func consulRevertEnv(t testing.TB, job string) (*env, *consulapi.KV, func(*Config)) {
	t.Helper()
	e := startEnv(t, nomadsim.Options{TimeScale: realTime, ServeInstances: true})
	consul, err := consulapi.NewClient(&consulapi.Config{Address: e.Sim.ConsulAddr()})
	if err != nil {
		t.Fatal(err)
	}
	key := job + "/mode"
	if _, err := consul.KV().Put(&consulapi.KVPair{Key: key, Value: []byte("good"), Flags: 42}, nil); err != nil {
		t.Fatal(err)
	}
	submitTemplated(t, e, revertJobReading(job, 4, `{{ key "`+key+`" }}`, "consul:"+key+"=bad"), 4)
	awaitNoDeployment(t, agenttest.Context(t), e, job)
	withConsul := func(c *Config) {
		hub := sourcewatch.New(e.Vars, sourcewatch.Options{Consul: func(string) (*consulapi.Client, error) { return consul, nil }})
		c.Changes.Sources, c.Changes.Values = hub, hub
	}
	return e, consul.KV(), withConsul
}

// A revert of a Consul key survives an agent killed after the failure: the next agent's
// watch sees the key first at the bad value (Consul keeps no time: no change to decide on),
// and finds the failed rollout through the value kept for the change.
func TestConfigChangeRevertOfAConsulKeySurvivesAKilledAgent(t *testing.T) {
	t.Parallel()
	e, kv, withConsul := consulRevertEnv(t, "kvkill")
	ctx := agenttest.Context(t)
	first, second := &hookedValues{}, &hookedValues{}
	first.beforeKept = func(k onchange.Kept) error {
		if k.State == onchange.KeptReverting {
			first.dead.Store(true)
			return errKilled
		}
		return nil
	}
	_, net, stopFirst := e.runChangeAgent(t, "agent-a", e.Sim.BootstrapToken(), func(c *Config) { withConsul(c); first.hook(c) }, "kvkill")
	defer stopFirst()
	if _, err := kv.Put(&consulapi.KVPair{Key: "kvkill/mode", Value: []byte("bad")}, nil); err != nil {
		t.Fatal(err)
	}
	rollout := failedRollout(t, ctx, e, "kvkill")
	simtest.WaitFor(t, ctx, "the first agent's death", first.dead.Load)
	net.cut.Store(true)

	e.runChangeAgent(t, "agent-b", e.Sim.BootstrapToken(), func(c *Config) { withConsul(c); second.hook(c) })
	checkRevertedTo(t, ctx, e, rollout, func(w restart.RevertWrite) {
		pair, _, err := kv.Get("kvkill/mode", nil)
		if err != nil || pair == nil || string(pair.Value) != "good" || pair.Flags != 42 || pair.ModifyIndex != w.WrittenIndex {
			t.Errorf("the key after the revert: %+v (%v), want \"good\" with flags 42 at %d", pair, err, w.WrittenIndex)
		}
	})
	if n := first.writeBacks.Load() + second.writeBacks.Load(); n != 1 {
		t.Errorf("the kept value was written back %d times, want once", n)
	}
}
