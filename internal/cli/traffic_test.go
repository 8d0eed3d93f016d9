package cli

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// trafficScale runs the clusters of TestRestartUnderTraffic 3 times faster than real time.
// The balancer runs at the same scale (simtest.ConsulBalancer, NomadBalancer): it refreshes
// every simulated second and sends every 10 simulated milliseconds, so its race against the
// catalog keeps the proportions it has in front of real agents, and the cases' simulated
// waits (2s shutdown delays, a 3s warm-up, 1s check intervals and refreshes) keep 333ms or
// more of real time. What does not scale is the command's own work between two restart
// calls, in real time: the scale magnifies it in Nomad's time. At 5, under load, it could
// let the first instance come back before the last left, the one moment -health none
// loses requests with Consul and a shutdown delay (issue 21 measured 29% lost there); at 3
// the six cases take some 25 s of real time together, with -race, on two CPUs.
const trafficScale = 3

// trafficCase is a service of 3 instances behind a balancer that reads provider's catalog,
// whose group waits delay before its tasks are killed.
type trafficCase struct {
	name     string
	provider string
	delay    time.Duration
}

// trafficRun is one way of restarting: Nomad's own (`nomad job restart` does not wait for
// health: -health none) or nomad-restart's default health gate.
type trafficRun struct {
	name string
	args []string
}

// TestRestartUnderTraffic counts requests, not instances (issue 21): a balancer that reads
// the catalog as Traefik or consul-template do sends steady traffic to a 3-instance service
// while it is restarted in place, one allocation at a time, and counts the requests that
// fail. Each instance answers once its check's script passes, 3s after its task starts.
//
// What must hold: with Consul and a shutdown_delay longer than the balancer's refresh, the
// health gate loses no request (the instance leaves the balancer before its process stops,
// and the next one is restarted only once it is back); without a delay, the default drain
// (-drain auto: 2s out of Consul's passing answers before each restart) loses none either,
// where -drain 0 does; without the gate (-health none,
// what `nomad job restart` does) the instances restart faster than they warm up and
// requests fail; and the gate fails a smaller share of requests in every case. Nomad's
// provider has no health in its catalog: the balancer sends to an instance from its
// registration anew, before its process stopped and while it warms up, so requests fail
// even with the gate.
func TestRestartUnderTraffic(t *testing.T) {
	cases := []trafficCase{
		{"Consul, no shutdown_delay", "consul", 0},
		{"Consul, shutdown_delay 2s", "consul", 2 * time.Second},
		{"Nomad provider, shutdown_delay 2s", "nomad", 2 * time.Second},
	}
	runs := []trafficRun{
		{"nomad job restart (-health none)", []string{"-health=none"}},
		{"nomad-restart, gate, -drain 0", []string{"-drain=0"}},
		{"nomad-restart (gate, -drain auto)", nil},
	}
	results := make([][]simtest.Result, len(cases))
	took := make([][]time.Duration, len(cases))
	t.Run("cases", func(t *testing.T) {
		for i, tc := range cases {
			results[i] = make([]simtest.Result, len(runs))
			took[i] = make([]time.Duration, len(runs))
			for j, run := range runs {
				t.Run(tc.name+"/"+run.name, func(t *testing.T) {
					t.Parallel()
					start := time.Now()
					results[i][j] = restartUnderTraffic(t, tc, run)
					took[i][j] = time.Since(start)
				})
			}
		}
	})
	if t.Failed() {
		return
	}
	t.Log(trafficTable(fmt.Sprintf("failed/requests (failed share; real time of the case), 3 instances, batch size 1, time scale %d:", trafficScale),
		36, 36, names(runs, func(r trafficRun) string { return r.name }), names(cases, func(c trafficCase) string { return c.name }),
		func(i, j int) string {
			r := results[i][j]
			return fmt.Sprintf("%d/%d (%.0f%%; %.1fs)", r.Failed, r.Requests, 100*r.FailedRatio(), took[i][j].Seconds())
		}))
	for i, tc := range cases {
		none := results[i][0]
		if none.Failed == 0 {
			t.Errorf("%s: no request failed under -health none (%s): the instances should restart faster than they warm up", tc.name, none)
		}
		for j := 1; j < len(runs); j++ {
			if gate := results[i][j]; gate.FailedRatio() >= none.FailedRatio() {
				t.Errorf("%s: %s failed %.1f%% of the requests, -health none %.1f%%: the gate should lose fewer", tc.name, runs[j].name, 100*gate.FailedRatio(), 100*none.FailedRatio())
			}
		}
	}
	// Consul: with a shutdown_delay, or without one under the default drain, none fails.
	for _, at := range [][2]int{{1, 1}, {1, 2}, {0, 2}} {
		if r := results[at[0]][at[1]]; r.Failed != 0 {
			t.Errorf("%s, %s: %s, want none failed; failed per second %v", cases[at[0]].name, runs[at[1]].name, r, r.FailedPerSecond)
		}
	}
	// Without a delay and without the drain, the balancer sends to a stopping instance.
	if r := results[0][1]; r.Failed == 0 {
		t.Errorf("%s, %s: no request failed: the balancer should keep sending to a stopping instance until it refreshes", cases[0].name, runs[1].name)
	}
}

// restartUnderTraffic runs one case: a cluster serving instances, the service's 3
// allocations answering behind a balancer, the restart, and the balancer's counts from
// just before the restart until every instance answers again.
func restartUnderTraffic(t *testing.T, tc trafficCase, run trafficRun) simtest.Result {
	ctx := testCtx(t)
	e, b := servedWeb(t, ctx, tc, 0)
	r, _ := restartCounted(t, ctx, e, b, 3, run.args)
	return r
}

// restartCounted runs `run -on-error=fail -state=local <args> web` with the balancer's
// counts started over just before, and returns them, from then until the balancer lists
// listed instances (1 for a Balancer through a real one: its frontend) and each answers
// again, with what the command printed.
func restartCounted(t *testing.T, ctx context.Context, e cliEnv, b *simtest.Balancer, listed int, args []string) (simtest.Result, string) {
	t.Helper()
	b.Reset()
	all := append([]string{"run", "-on-error=fail", "-state=local"}, args...)
	code, out, errOut := e.run(ctx, append(all, "web")...)
	if code != 0 {
		b.Stop()
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	b.WaitAnswering(t, listed, 60*time.Second)
	r := b.Stop()
	t.Logf("%s over %.1fs of Nomad's time; failed per second %v", r, r.Elapsed.Seconds(), r.FailedPerSecond)
	return r, out
}

// servedWeb starts the case's cluster, at trafficScale and serving instances, with its
// service web of 3 allocations running, and a balancer (started on ctx, counting the
// instances that answer every census of Nomad's time; 0: never) that reads the case's
// catalog. It returns, once the 3 instances answer, the environment to run commands on the
// cluster (given Consul's address in a Consul case) and the balancer.
func servedWeb(tb testing.TB, ctx context.Context, tc trafficCase, census time.Duration) (cliEnv, *simtest.Balancer) {
	tb.Helper()
	c := simtest.Start(tb, nomadsim.Options{TimeScale: trafficScale, ServeInstances: true})
	job := simtest.ServedJob("web", 3, tc.provider, 3*time.Second, tc.delay)
	minHealthy, deadline := 2*time.Second, time.Minute
	job.TaskGroups[0].Update.MinHealthyTime, job.TaskGroups[0].Update.HealthyDeadline = &minHealthy, &deadline
	register(tb, c, job)
	e := newCLIEnv(tb, c)
	b := simtest.NomadBalancer(c, "web")
	if tc.provider == "consul" {
		e.consul = c.ConsulAddr()
		b = simtest.ConsulBalancer(c, "web")
	}
	b.Census = census
	if err := b.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	b.WaitAnswering(tb, 3, 30*time.Second)
	return e, b
}

// trafficTable lays out the figures of the traffic cases for the test's log: the title, a
// header of the columns' names, then a row a case, its name then cell(row, column) of each
// column, names padded to nameWidth and cells to cellWidth.
func trafficTable(title string, nameWidth, cellWidth int, columns, rows []string, cell func(row, column int) string) string {
	var table strings.Builder
	fmt.Fprintf(&table, "%s\n%-*s", title, nameWidth, "")
	for _, c := range columns {
		fmt.Fprintf(&table, " | %-*s", cellWidth, c)
	}
	for i, r := range rows {
		fmt.Fprintf(&table, "\n%-*s", nameWidth, r)
		for j := range columns {
			fmt.Fprintf(&table, " | %-*s", cellWidth, cell(i, j))
		}
	}
	return table.String()
}

// names are the names of items, in order.
func names[T any](items []T, name func(T) string) []string {
	out := make([]string, len(items))
	for i, item := range items {
		out[i] = name(item)
	}
	return out
}
