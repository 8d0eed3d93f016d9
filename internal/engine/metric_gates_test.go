package engine

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// scriptedQuerier answers every query with value(query, n) (n counts the queries from 1)
// and keeps the queries asked.
type scriptedQuerier struct {
	mu      sync.Mutex
	value   func(query string, n int) (float64, error)
	queries []string
}

func (q *scriptedQuerier) Query(ctx context.Context, promql string, _ time.Time) (gate.Sample, error) {
	q.mu.Lock()
	q.queries = append(q.queries, promql)
	n := len(q.queries)
	q.mu.Unlock()
	v, err := q.value(promql, n)
	if ctx.Err() != nil {
		return gate.Sample{}, ctx.Err() // a query cut short, as the Prometheus client's
	}
	return gate.Sample{Value: v}, err
}

func (q *scriptedQuerier) asked() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]string(nil), q.queries...)
}

// gatedEnv is a simulated cluster with a 4-allocation job and an engine whose gates ask q.
func gatedEnv(t *testing.T, q gate.Querier) *simEnv {
	t.Helper()
	env := startSim(t, false)
	env.e = New(Config{Cluster: cluster.NewNomad(env.client), Store: env.store, Holder: "e2e:1",
		Health: HealthConfig{TimeScale: env.sim.TimeScale()}, Gates: GatesConfig{Querier: q}})
	env.register(t, "web", "service", map[string]int{"web": 4})
	return env
}

// fastGates are gates measured twice, 20 ms apart (real time: Prometheus's clock).
func fastGates(specs ...string) *restart.Gates {
	p := gate.DefaultPolicy()
	p.Interval, p.Count = 20*time.Millisecond, 2
	return &restart.Gates{Specs: specs, Policy: p}
}

func restartedAllocs(rec *restart.Record) int {
	n := 0
	for _, a := range rec.Allocs {
		if a.State != restart.AllocPending {
			n++
		}
	}
	return n
}

// TestE2EGatesHoldEveryBatch: gates that hold let every batch go on, each batch measured
// Count times with its own allocations in the query, the last batch too.
func TestE2EGatesHoldEveryBatch(t *testing.T) {
	q := &scriptedQuerier{value: func(string, int) (float64, error) { return 0.01, nil }}
	env := gatedEnv(t, q)
	spec := restart.Spec{Yes: true, Gates: fastGates(`errors: sum(rate(http_requests_total{alloc_id=~"{{allocs}}",code=~"5.."}[30s])) < 0.02`)}
	var l eventLog
	final := drive(t, env.e, env.plan(t, "web", spec), &l)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, l.messages())
	}
	if len(final.GateRuns) != 4 {
		t.Fatalf("%d gate runs, want one per batch (4):\n%s", len(final.GateRuns), l.messages())
	}
	for _, g := range final.GateRuns {
		id := final.Allocs[final.BatchAllocs(g.Batch)[0]].ID
		if g.Outcome != restart.GatePassed || len(g.Measurements) != 2 || !strings.Contains(g.Queries["errors"], id) {
			t.Errorf("batch %d: outcome %s, %d measurements, query %q (want passed, 2, naming %s)", g.Batch, g.Outcome, len(g.Measurements), g.Queries["errors"], id)
		}
	}
	if got := len(q.asked()); got != 8 {
		t.Errorf("%d queries asked, want 8 (2 per batch)", got)
	}
	env.checkOnce(t, final)
	if !strings.Contains(l.messages(), "Gate errors: 0.01 < 0.02: pass") {
		t.Errorf("no measurement in the log:\n%s", l.messages())
	}
}

// TestE2EGateFailureStops: a gate that fails after the first batch stops the restart there
// with -on-error fail, and with -yes too (a gate is not waved through); the other
// allocations are never touched, and the record names the failing values.
func TestE2EGateFailureStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec restart.Spec
	}{
		{"on-error fail", restart.Spec{OnError: restart.OnErrorFail}},
		{"yes", restart.Spec{Yes: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &scriptedQuerier{value: func(string, int) (float64, error) { return 0.31, nil }}
			env := gatedEnv(t, q)
			spec := tc.spec
			spec.Gates = fastGates(`errors: errors_ratio{job="{{job}}"} < 0.02`)
			var l eventLog
			final := drive(t, env.e, env.plan(t, "web", spec), &l)
			if final.Status != restart.StatusFailed || !strings.Contains(final.Reason, "0.31") {
				t.Fatalf("status %s (%s), want failed naming the value\n%s", final.Status, final.Reason, l.messages())
			}
			if n := restartedAllocs(final); n != 1 {
				t.Errorf("%d allocations touched, want 1", n)
			}
			if !strings.Contains(l.messages(), "Gate errors: 0.31 not < 0.02: fail") {
				t.Errorf("no failed measurement in the log:\n%s", l.messages())
			}
			if len(final.GateRuns) != 1 || final.GateRuns[0].Outcome != restart.GateFailed || len(final.GateRuns[0].Measurements) != 1 {
				t.Errorf("gate runs %+v, want the 1st batch's, failed at its first measurement", final.GateRuns)
			}
			if got := q.asked(); len(got) != 1 || got[0] != `errors_ratio{job="web"}` {
				t.Errorf("queries %q, want one with the job filled in", got)
			}
		})
	}
}

// TestE2EGateDryRunGoesOn: a failing gate under -gate-dry-run is recorded as would-fail and
// the restart goes on.
func TestE2EGateDryRunGoesOn(t *testing.T) {
	q := &scriptedQuerier{value: func(string, int) (float64, error) { return 5, nil }}
	env := gatedEnv(t, q)
	g := fastGates(`latency: p99 < 1`)
	g.Policy.DryRun = true
	final := drive(t, env.e, env.plan(t, "web", restart.Spec{Yes: true, Gates: g}), nil)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	for _, r := range final.GateRuns {
		if r.Outcome != restart.GateWouldFail || !strings.Contains(r.Reason, "5") {
			t.Errorf("batch %d: %s %q, want would-fail naming the value", r.Batch, r.Outcome, r.Reason)
		}
	}
}

// TestE2EGateAsksAndQueryErrors: with -on-error ask a failed gate asks; an answer of yes goes
// on. Query errors are retried and counted: here the first query fails, the next ones pass.
func TestE2EGateAsksAndQueryErrors(t *testing.T) {
	q := &scriptedQuerier{value: func(_ string, n int) (float64, error) {
		switch {
		case n == 1:
			return 0, errors.New("connection refused")
		case n == 2:
			return 1, nil // fails the 1st batch's gate at its first measurement
		}
		return 0, nil
	}}
	env := gatedEnv(t, q)
	spec := restart.Spec{OnError: restart.OnErrorAsk, BatchSizes: []restart.BatchSize{{N: 2}}, Gates: fastGates(`errors: x < 0.5`)}
	rec := env.plan(t, "web", spec)
	wait, cancel := driveAsync(env.e, rec)
	defer cancel()
	ctx, stop := context.WithTimeout(context.Background(), testTimeout)
	defer stop()
	var asked *restart.Record
	for asked == nil {
		r, err := env.store.Get(ctx, rec.Namespace, rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status == restart.StatusWaiting {
			asked = r
			break
		}
		if r.Status.Terminal() {
			t.Fatalf("ended %s (%s) without asking", r.Status, r.Reason)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if asked.Question.Kind != restart.QuestionIgnoreError {
		t.Fatalf("asked %q, want whether to ignore the errors", asked.Question.Prompt())
	}
	gr := asked.GateRunOf(1)
	if gr == nil || gr.Outcome != restart.GateFailed || len(gr.Measurements) != 2 || gr.Measurements[0].Verdict != gate.VerdictError {
		t.Fatalf("gate run %+v, want an error then a failed measurement", gr)
	}
	if _, err := env.e.Answer(ctx, rec.Namespace, rec.ID, "y", "test"); err != nil {
		t.Fatal(err)
	}
	final, err := wait()
	if err != nil {
		t.Fatal(err)
	}
	if final.Status != restart.StatusSucceeded || restartedAllocs(final) != 4 {
		t.Fatalf("status %s (%s), %d restarted", final.Status, final.Reason, restartedAllocs(final))
	}
	if g := final.GateRunOf(2); g == nil || g.Outcome != restart.GatePassed {
		t.Errorf("2nd batch's gates %+v, want passed", g)
	}
}

// TestE2EGateResumesMeasurements: a driver that dies while a batch's gates measure leaves
// the measurements taken in the record; the next driver counts them and takes only the
// rest, and restarts nothing twice.
func TestE2EGateResumesMeasurements(t *testing.T) {
	var kill context.CancelFunc
	var killOnce sync.Once
	q := &scriptedQuerier{value: func(_ string, n int) (float64, error) {
		if n == 2 {
			killOnce.Do(func() { kill() }) // the driver dies during the 2nd measurement
		}
		return 0, nil
	}}
	env := gatedEnv(t, q)
	g := fastGates(`errors: x < 1`)
	g.Policy.Count = 3
	rec := env.plan(t, "web", restart.Spec{Yes: true, BatchSizes: []restart.BatchSize{{N: 4}}, Gates: g})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	dctx, dcancel := context.WithCancel(ctx)
	kill = dcancel
	if _, err := env.e.Drive(dctx, rec.Namespace, rec.ID, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("first driver: %v, want canceled", err)
	}
	mid, err := env.store.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if gr := mid.GateRunOf(1); gr == nil || len(gr.Measurements) != 1 {
		t.Fatalf("after the crash: gate run %+v, want 1 measurement kept", gr)
	}
	next := New(Config{Cluster: cluster.NewNomad(env.client), Store: env.store, Holder: "e2e:2",
		Health: HealthConfig{TimeScale: env.sim.TimeScale()}, Gates: GatesConfig{Querier: q}})
	final := drive(t, next, rec, nil)
	if final.Status != restart.StatusSucceeded {
		t.Fatalf("status %s (%s)", final.Status, final.Reason)
	}
	if gr := final.GateRunOf(1); gr == nil || len(gr.Measurements) != 3 {
		t.Errorf("gate run %+v, want 3 measurements in all", gr)
	}
	env.checkOnce(t, final)
}

// TestPlanRefusesGatesWithoutPrometheus: gates without a Prometheus address, or invalid
// ones, are refused at planning, before anything is recorded.
func TestPlanRefusesGatesWithoutPrometheus(t *testing.T) {
	env := startSim(t, false)
	env.register(t, "web", "service", map[string]int{"web": 2})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for _, tc := range []struct {
		gates *restart.Gates
		want  string
	}{
		{fastGates(`errors: x < 1`), "-prometheus-address"},
		{fastGates(`errors: x {{jobb}} < 1`), "unknown template variable"},
		{&restart.Gates{Specs: []string{"e: x < 1"}, Policy: gate.Policy{Count: 0}}, "count"},
	} {
		_, err := env.e.Plan(ctx, Request{Job: "web", Spec: restart.Spec{Gates: tc.gates}})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gates %v: error %v, want one naming %q", tc.gates.Specs, err, tc.want)
		}
	}
}

// TestPlansLeaveTheCallersGates: a fleet plans its jobs' restarts at once, and measures its
// upstreams' evidence, from one set of gates (its -gate); planning keeps what it fills in
// (the parsed gates, Prometheus's address) in its own copy, so the plans neither race on
// the caller's nor change it.
func TestPlansLeaveTheCallersGates(t *testing.T) {
	env := gatedEnv(t, &scriptedQuerier{value: func(string, int) (float64, error) { return 0.01, nil }})
	env.register(t, "api", "service", map[string]int{"api": 2})
	shared := fastGates(`errors: rate{job="{{job}}"} < 0.02`)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, job := range []string{"web", "api", "web", "api"} {
		wg.Go(func() {
			p, err := env.e.Plan(ctx, Request{Job: job, Spec: restart.Spec{Health: restart.HealthRunning, Gates: shared}})
			if err != nil {
				t.Errorf("Plan %s: %v", job, err)
				return
			}
			if p.Record.Spec.Gates == shared || len(p.Record.Spec.Gates.Typed) != 1 {
				t.Errorf("plan %s: gates %+v, want its own copy, parsed", job, p.Record.Spec.Gates)
			}
		})
	}
	wg.Wait()
	if shared.Typed != nil {
		t.Errorf("the caller's gates were changed by planning: %+v", shared)
	}
}

func TestWallClock(t *testing.T) {
	var c wallClock
	if d := time.Since(c.Now()); d < 0 || d > time.Minute {
		t.Fatalf("Now is %s off", d)
	}
	if !c.Sleep(context.Background(), time.Millisecond) || !c.Sleep(context.Background(), 0) {
		t.Fatal("a sleep was cut short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if c.Sleep(ctx, time.Hour) || c.Sleep(ctx, 0) || time.Since(start) > time.Second {
		t.Fatal("a sleep outlived its context")
	}
}

// TestEvidence measures a job's evidence as a fleet in waves does for an upstream: its
// allocations healthy, then its gates held across the wave's wait (measured more than
// once, spread over it), or the gate that failed named.
func TestEvidence(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   func(n int) float64
		wait    time.Duration
		wantErr string
		minAsks int
	}{
		{name: "gates hold across the wait", value: func(int) float64 { return 0.01 }, wait: 300 * time.Millisecond, minAsks: 2},
		{name: "no wait: measured once", value: func(int) float64 { return 0.01 }, minAsks: 1},
		{name: "a gate fails during the wait", value: func(n int) float64 {
			if n >= 2 {
				return 0.5
			}
			return 0.01
		}, wait: 300 * time.Millisecond, wantErr: "a gate failed during -wave-wait 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := &scriptedQuerier{value: func(_ string, n int) (float64, error) { return tc.value(n), nil }}
			env := gatedEnv(t, q)
			spec := restart.Spec{Health: restart.HealthRunning, OnError: restart.OnErrorFail, Gates: fastGates(`errors: rate{job="{{job}}"} < 0.02`)}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var mu sync.Mutex
			var last EvidenceProgress
			err := env.e.Evidence(ctx, "default", "web", spec, tc.wait, func(p EvidenceProgress) {
				mu.Lock()
				defer mu.Unlock()
				last = p
			})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Evidence: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Evidence = %v, want an error containing %q", err, tc.wantErr)
			}
			if asks := q.asked(); len(asks) < tc.minAsks || (len(asks) > 0 && !strings.Contains(asks[0], `job="web"`)) {
				t.Errorf("queries asked: %q, want at least %d naming the job", asks, tc.minAsks)
			}
			if last.Healthy != 4 || last.Total != 4 {
				t.Errorf("last progress %+v, want 4 of 4 allocations healthy", last)
			}
		})
	}
}

// TestEvidenceOfAMissingJob: a job gone from Nomad gives no evidence, with Nomad's reason.
func TestEvidenceOfAMissingJob(t *testing.T) {
	env := gatedEnv(t, &scriptedQuerier{value: func(string, int) (float64, error) { return 0, errors.New("unused") }})
	err := env.e.Evidence(context.Background(), "default", "nosuch", restart.Spec{Health: restart.HealthRunning}, 0, func(EvidenceProgress) {})
	if err == nil {
		t.Fatal("the evidence of a job that does not exist was given")
	}
}

// TestEvidenceHealthyAgainAtTheEndOfTheWait: an upstream whose checks start failing during
// -wave-wait gives no evidence, though it was healthy when the wait began and has no gate.
func TestEvidenceHealthyAgainAtTheEndOfTheWait(t *testing.T) {
	env := gatedEnv(t, &scriptedQuerier{value: func(string, int) (float64, error) { return 0, errors.New("unused") }})
	env.registerJob(t, checkedJob("upstream", 2, "pass", "", time.Second, 3*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var failing sync.Once
	spec := restart.Spec{Health: restart.HealthChecks, OnError: restart.OnErrorFail}
	err := env.e.Evidence(ctx, "default", "upstream", spec, 2*time.Second, func(p EvidenceProgress) {
		if p.Total > 0 && p.Healthy == p.Total {
			failing.Do(func() { env.sim.ScriptCheck("default", "upstream", "ready-nomad", "fail") })
		}
	})
	if err == nil || !strings.Contains(err.Error(), "allocation") {
		t.Fatalf("Evidence = %v, want the allocation that failed its checks during the wait named", err)
	}
}
