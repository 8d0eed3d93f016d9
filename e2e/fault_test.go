package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// faultRun is one restart driven under an injected fault.
type faultRun struct {
	pre map[string]before
	// first is the record when the first process ended, under the fault.
	first     *restart.Record
	firstCode int
	firstOut  string
	// final is the terminal record, after resuming without the fault if needed.
	final *restart.Record
}

// runUnderFault registers a job, starts `run` on it, calls inject (in its own goroutine:
// it may wait for a moment of the restart before acting) and waits for the process to end.
// The fault is then removed; a restart the process left unfinished is resumed without it,
// so that the record can be checked for exactly-once either way.
func runUnderFault(t *testing.T, c *nomadsim.Cluster, sc scenario, jobID string, inject func(ctx context.Context, st store.Store) (remove func())) *faultRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := apiClient(t, c)
	env := driverEnv{addr: c.Addr(), stateHome: t.TempDir()}
	if err := register(ctx, c, newJob(jobID, sc.jobType, sc.count)); err != nil {
		t.Fatal(err)
	}
	pre, err := snapshot(client, jobID)
	if err != nil {
		t.Fatal(err)
	}
	var st store.Store
	if sc.state == "nomad" {
		st = nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
	} else if st, err = localstore.New(env.localDir()); err != nil {
		t.Fatal(err)
	}
	run := &faultRun{pre: pre}
	removed := make(chan func(), 1)
	ch, err := env.start(sc.runArgs(jobID)...)
	if err != nil {
		t.Fatal(err)
	}
	go func() { removed <- inject(ctx, st) }()
	code, err := ch.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	(<-removed)()
	run.firstCode, run.firstOut = code, ch.out.String()
	run.first = readRecord(ctx, t, st, jobID)
	rec := run.first
	for i := 0; rec == nil || !rec.Status.Terminal(); i++ {
		if i == 3 {
			t.Fatalf("restart of %s not ended after %d resumes; last output:\n%s", jobID, i, ch.out.String())
		}
		if rec == nil {
			t.Fatalf("`run` under the fault exited %d and left no record:\n%s", code, run.firstOut)
		}
		if ch, err = env.start("resume", "-state", sc.state, rec.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.wait(ctx); err != nil {
			t.Fatal(err)
		}
		rec = readRecord(ctx, t, st, jobID)
	}
	run.final = rec
	return run
}

// faultCase starts a cluster (driverScale, seed), drives the scenario's restart of jobID
// under the fault that inject injects on it (runUnderFault), and says how the first process
// ended (reportFirst); it returns the cluster and the run for the case's checks.
func faultCase(t *testing.T, seed int64, sc scenario, jobID string, inject func(ctx context.Context, c *nomadsim.Cluster, st store.Store) (remove func())) (*nomadsim.Cluster, *faultRun) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{TimeScale: driverScale, Seed: seed})
	run := runUnderFault(t, c, sc, jobID, func(ctx context.Context, st store.Store) func() { return inject(ctx, c, st) })
	reportFirst(t, run)
	return c, run
}

// readRecord reads the job's record, riding out the store's own transient failures.
func readRecord(ctx context.Context, t *testing.T, st store.Store, jobID string) *restart.Record {
	t.Helper()
	var err error
	for range 20 {
		var rec *restart.Record
		if rec, err = latestRecord(ctx, st, jobID); err == nil {
			return rec
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("reading the record of %s: %v", jobID, err)
	return nil
}

// waitForRecord polls the store until cond holds for the job's record (errors of the store under
// the fault are ignored); it reports whether it did before the restart ended.
func waitForRecord(ctx context.Context, st store.Store, jobID string, cond func(*restart.Record) bool) (*restart.Record, bool) {
	for ctx.Err() == nil {
		rec, err := latestRecord(ctx, st, jobID)
		if err == nil && rec != nil {
			if cond(rec) {
				return rec, true
			}
			if rec.Status.Terminal() {
				return rec, false
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil, false
}

// inFlight reports whether a batch is being restarted.
func inFlight(rec *restart.Record) bool {
	for _, a := range rec.Allocs {
		if a.State == restart.AllocRestarting || a.State == restart.AllocWaiting {
			return true
		}
	}
	return false
}

// assertExactlyOnce checks the final record and Nomad's facts.
func assertExactlyOnce(t *testing.T, c *nomadsim.Cluster, sc scenario, jobID string, run *faultRun) {
	t.Helper()
	client := apiClient(t, c)
	bad := checkRecord(run.final, run.pre)
	var more []string
	var err error
	if sc.reschedule {
		more, err = checkRescheduled(client, jobID, run.pre)
	} else {
		more, err = checkInPlace(client, jobID, run.pre, []string{"main"})
	}
	if err != nil {
		t.Fatal(err)
	}
	if bad = append(bad, more...); len(bad) > 0 {
		t.Errorf("%s: exactly-once broken:\n%s\nfirst process exited %d:\n%s", sc, joinLines(bad), run.firstCode, run.firstOut)
	}
}

// reportFirst says how the process under the fault ended: on its own, or stopped with the
// record intact and a reason stated, which the test then requires.
func reportFirst(t *testing.T, run *faultRun) {
	t.Helper()
	rec := run.first
	switch {
	case rec.Status == restart.StatusSucceeded && run.firstCode == 0:
		t.Logf("ended correctly under the fault (exit 0)")
	case rec.Status.Terminal():
		if strings.TrimSpace(rec.Reason) == "" {
			t.Errorf("restart ended %s under the fault with no reason stated", rec.Status)
		}
		t.Logf("stopped under the fault: %s: %s (exit %d)", rec.Status, rec.Reason, run.firstCode)
	default:
		if run.firstCode == 0 {
			t.Errorf("process exited 0 leaving the restart %s", rec.Status)
		}
		if !strings.Contains(run.firstOut, "resume") {
			t.Errorf("process left the restart %s without saying how to resume:\n%s", rec.Status, run.firstOut)
		}
		t.Logf("detached under the fault, record %s (exit %d); resumed after it", rec.Status, run.firstCode)
	}
}

func TestFaultErrorRate(t *testing.T) {
	for _, sc := range []scenario{
		{jobType: "service", count: 6, state: "nomad", batchSize: 2},
		{jobType: "service", count: 6, reschedule: true, state: "nomad", batchSize: 2},
		{jobType: "batch", count: 6, state: "local", batchSize: 2},
		{jobType: "system", reschedule: true, state: "local", batchSize: 2},
	} {
		t.Run(strings.ReplaceAll(sc.String(), "/", "-"), func(t *testing.T) {
			c, run := faultCase(t, 11, sc, "flaky", func(_ context.Context, c *nomadsim.Cluster, _ store.Store) func() {
				// Every endpoint, every method: a tenth of requests answer 500.
				return c.SetFault(nomadsim.Fault{Path: "/", ErrorRate: 0.1, Status: 500})
			})
			t.Logf("%d requests to the cluster", c.Stats().Requests)
			assertExactlyOnce(t, c, sc, "flaky", run)
		})
	}
}

func TestFaultLatency(t *testing.T) {
	sc := scenario{jobType: "service", count: 6, reschedule: true, state: "nomad", batchSize: 2}
	c, run := faultCase(t, 12, sc, "slow", func(_ context.Context, c *nomadsim.Cluster, _ store.Store) func() {
		return c.SetFault(nomadsim.Fault{Path: "/", Latency: 25 * time.Millisecond})
	})
	assertExactlyOnce(t, c, sc, "slow", run)
}

func TestFaultLeaderLost(t *testing.T) {
	for _, sc := range []scenario{
		{jobType: "service", count: 6, state: "nomad", batchSize: 2},
		{jobType: "service", count: 6, reschedule: true, state: "local", batchSize: 2},
	} {
		t.Run(strings.ReplaceAll(sc.String(), "/", "-"), func(t *testing.T) {
			lost := false
			c, run := faultCase(t, 13, sc, "leaderless", func(ctx context.Context, c *nomadsim.Cluster, st store.Store) func() {
				// Mid-batch, the servers lose their leader for 10 s of simulated time.
				if _, ok := waitForRecord(ctx, st, "leaderless", inFlight); ok {
					c.LoseLeader(10 * time.Second)
					lost = true
				}
				return func() {}
			})
			if !lost {
				t.Fatal("the restart ended before a batch was seen in flight; the leader was never lost")
			}
			assertExactlyOnce(t, c, sc, "leaderless", run)
		})
	}
}

func TestFaultNodeLost(t *testing.T) {
	for _, sc := range []scenario{
		{jobType: "service", count: 8, state: "nomad", batchSize: 2},
		{jobType: "service", count: 8, reschedule: true, state: "local", batchSize: 2},
	} {
		for _, inFlightNode := range []bool{true, false} {
			which := "node-of-later-batch"
			if inFlightNode {
				which = "node-of-batch-in-flight"
			}
			t.Run(strings.ReplaceAll(sc.String(), "/", "-")+"/"+which, func(t *testing.T) {
				var down string
				c, run := faultCase(t, 14, sc, "nodeloss", func(ctx context.Context, c *nomadsim.Cluster, st store.Store) func() {
					// Mid-batch, a node goes down: its allocations are lost (and replaced by
					// Nomad). Either the node of an allocation the driver waits on, or one
					// whose allocations all wait for a later batch.
					rec, ok := waitForRecord(ctx, st, "nodeloss", inFlight)
					if !ok {
						return func() {}
					}
					down = pickNode(rec, inFlightNode)
					if down != "" {
						c.DownNode(down)
					}
					return func() {}
				})
				if down == "" {
					t.Fatal("no node fit: the restart ended before a batch was seen in flight, or every node had an allocation in flight")
				}
				checkNodeLoss(t, c, sc, "nodeloss", run, down)
			})
		}
	}
}

// pickNode chooses the node to lose: one with an allocation in flight, or one whose planned
// allocations are all still pending.
func pickNode(rec *restart.Record, inFlightNode bool) string {
	busy := map[string]bool{}
	for _, a := range rec.Allocs {
		if a.State != restart.AllocPending {
			busy[a.NodeID] = true
		}
	}
	for _, a := range rec.Allocs {
		if inFlightNode && (a.State == restart.AllocRestarting || a.State == restart.AllocWaiting) {
			return a.NodeID
		}
		if !inFlightNode && !busy[a.NodeID] {
			return a.NodeID
		}
	}
	return ""
}

// checkNodeLoss checks a restart during which a node went down. The record must be
// terminal, with a reason unless it succeeded, and agree with Nomad's facts for every
// allocation: done means restarted exactly once (in place: one restart signal; with
// -reschedule: one running replacement); pending means untouched; a lost allocation may
// end skipped or failed with its error stated, and is never restarted twice. A restart that
// succeeded must have restarted every allocation of the other nodes.
func checkNodeLoss(t *testing.T, c *nomadsim.Cluster, sc scenario, jobID string, run *faultRun, down string) {
	t.Helper()
	client := apiClient(t, c)
	allocs, err := jobAllocs(client, jobID)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string][]*api.Allocation{}
	for _, a := range allocs {
		if a.PreviousAllocation != "" {
			next[a.PreviousAllocation] = append(next[a.PreviousAllocation], a)
		}
	}
	// times is how often Nomad's facts say the allocation was restarted by the driver.
	times := func(id string) int {
		if sc.reschedule {
			// A lost allocation is replaced by Nomad itself, stopped by the driver or not:
			// one replacement either way, and never two.
			return len(next[id])
		}
		return restartsSince(allocByID(allocs, id), run.pre[id], "main")
	}
	rec := run.final
	var bad []string
	lost := 0
	for _, p := range rec.Allocs {
		a := allocByID(allocs, p.ID)
		onDown := a != nil && a.NodeID == down
		n := times(p.ID)
		switch {
		case n > 1:
			bad = append(bad, fmt.Sprintf("alloc %s restarted %d times", p.ID[:8], n))
		case p.State == restart.AllocDone && n != 1:
			bad = append(bad, fmt.Sprintf("alloc %s is done in the record, restarted %d times", p.ID[:8], n))
		case p.State == restart.AllocPending && n != 0 && !(onDown && sc.reschedule):
			bad = append(bad, fmt.Sprintf("alloc %s is pending in the record, restarted %d times", p.ID[:8], n))
		case p.State == restart.AllocFailed && p.Error == "":
			bad = append(bad, fmt.Sprintf("alloc %s failed with no error stated", p.ID[:8]))
		}
		if onDown {
			lost++
			continue
		}
		if rec.Status == restart.StatusSucceeded && p.State != restart.AllocDone {
			bad = append(bad, fmt.Sprintf("alloc %s (not on the lost node) is %s in a succeeded restart: %s", p.ID[:8], p.State, p.Error))
		}
	}
	if lost == 0 {
		t.Fatal("no planned allocation was on the lost node")
	}
	if !rec.Status.Terminal() || (rec.Status != restart.StatusSucceeded && rec.Reason == "") {
		bad = append(bad, fmt.Sprintf("record %s %s with reason %q", rec.ID[:8], rec.Status, rec.Reason))
	}
	states := map[restart.AllocState]int{}
	for _, p := range rec.Allocs {
		states[p.State]++
	}
	t.Logf("final record %s (%s); %d planned allocations lost with the node; allocation states %v", rec.Status, rec.Reason, lost, states)
	if len(bad) > 0 {
		t.Errorf("%s:\n%s\nfirst process exited %d:\n%s", sc, joinLines(bad), run.firstCode, run.firstOut)
	}
}

func allocByID(allocs []*api.Allocation, id string) *api.Allocation {
	for _, a := range allocs {
		if a.ID == id {
			return a
		}
	}
	return nil
}

// restartsSince counts the task's "Restart Signaled" events after the snapshot.
func restartsSince(a *api.Allocation, b before, task string) int {
	if a == nil || a.TaskStates[task] == nil {
		return 0
	}
	n := 0
	for _, e := range a.TaskStates[task].Events {
		if e.Type == api.TaskRestartSignal && e.Time > b.LastEvent[task] {
			n++
		}
	}
	return n
}
