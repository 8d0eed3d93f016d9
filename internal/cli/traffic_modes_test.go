package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// trafficMode is one way a restart runs (issue 21): in place, -reschedule (Nomad stops the
// allocation and its scheduler places a replacement), with a -surge allocation first, or
// as a fleet's child restart, which is the same engine filed and followed by the fleet
// driver.
type trafficMode struct {
	key  string // the sub-benchmark's name
	name string // the table's column
	args []string
	// fleet runs `run -jobs 'Name == "web"'`, a fleet of the one job, instead of
	// `run web`; a fleet keeps its records in Nomad (it refuses -state local).
	fleet bool
	// replaces says the restart ends with 3 new allocations (-reschedule), not the 3 it
	// began with: checked, so that a mode that silently ran another way is not measured
	// under its name. A surge's allocation is the one stopped at the end in either case.
	replaces bool
}

// trafficModes are the ways measured. Every mode but the first waits on the health gate
// (-health auto, the default); -health none is `nomad job restart`'s way, the baseline.
// All but "-drain 0" drain as by default (-drain auto: 2s for the Consul service without a
// delay).
var trafficModes = []trafficMode{
	{key: "in-place-health-none", name: "in place, -health none", args: []string{"-health=none"}},
	{key: "in-place-drain-0", name: "in place, -drain 0", args: []string{"-drain=0"}},
	{key: "in-place", name: "in place", args: nil},
	{key: "reschedule", name: "-reschedule", args: []string{"-reschedule"}, replaces: true},
	{key: "surge-1", name: "-surge 1", args: []string{"-surge=1"}},
	{key: "reschedule-surge-1", name: "-reschedule -surge 1", args: []string{"-reschedule", "-surge=1"}, replaces: true},
	{key: "fleet-child", name: "fleet child", fleet: true},
}

// trafficModeCase is one of TestRestartUnderTraffic's services, keyed for sub-benchmark
// names.
type trafficModeCase struct {
	key string
	trafficCase
}

// trafficModeCases are TestRestartUnderTraffic's services.
var trafficModeCases = []trafficModeCase{
	{"consul-no-delay", trafficCase{"Consul, no shutdown_delay", "consul", 0}},
	{"consul-delay-2s", trafficCase{"Consul, shutdown_delay 2s", "consul", 2 * time.Second}},
	{"nomad-delay-2s", trafficCase{"Nomad provider, shutdown_delay 2s", "nomad", 2 * time.Second}},
}

// modeOutcome is what one restart did to the service's clients.
type modeOutcome struct {
	simtest.Result
	// minAnswering is the fewest instances that answered GET / with a 2xx at once, however
	// the catalog listed them (sampled every answeringEvery of Nomad's time).
	minAnswering int
	// took is the real time from the restart's start until every instance answered again.
	took time.Duration
}

// BenchmarkRestartUnderTraffic extends TestRestartUnderTraffic to every way a restart runs:
// the same service of 3 instances behind a balancer that reads the catalog (Consul without
// and with a 2s shutdown_delay, Nomad's provider with 2s), restarted with batch size 1 in
// place under -health none and under the health gate, and under the gate with
// -reschedule, -surge 1, both, and as a fleet's child. It reports per case:
//
//	failed          requests that failed, from just before the restart until every
//	                instance answered again
//	requests        requests sent meanwhile
//	failed-%        failed over requests
//	min-answering   the fewest instances answering at once (a surge adds one)
//	min-listed      the fewest instances the balancer listed after a refresh
//
// and logs the table of failed/requests (-v shows a parent benchmark's log). These are
// counts, not timings: ns/op is the real time of the restart and its recovery, which the
// machine's load moves. Run it with -benchtime=1x: one iteration is a whole restart on a
// cluster of its own.
func BenchmarkRestartUnderTraffic(b *testing.B) {
	results := make([][]*modeOutcome, len(trafficModeCases))
	for i, tc := range trafficModeCases {
		results[i] = make([]*modeOutcome, len(trafficModes))
		for j, m := range trafficModes {
			b.Run(tc.key+"/"+m.key, func(b *testing.B) {
				var sum modeOutcome
				for k := range b.N {
					r := restartModeUnderTraffic(b, tc.trafficCase, m)
					sum.Requests += r.Requests
					sum.Failed += r.Failed
					sum.took += r.took
					if k == 0 || r.minAnswering < sum.minAnswering {
						sum.minAnswering = r.minAnswering
					}
					if k == 0 || r.MinInstances < sum.MinInstances {
						sum.MinInstances = r.MinInstances
					}
				}
				n := float64(b.N)
				b.ReportMetric(float64(sum.Failed)/n, "failed")
				b.ReportMetric(float64(sum.Requests)/n, "requests")
				b.ReportMetric(100*sum.FailedRatio(), "failed-%")
				b.ReportMetric(float64(sum.minAnswering), "min-answering")
				b.ReportMetric(float64(sum.MinInstances), "min-listed")
				results[i][j] = &sum
			})
		}
	}
	b.Log(trafficTable(fmt.Sprintf("failed/requests (failed share; fewest answering), 3 instances, batch size 1, time scale %d; all but the first column under the health gate:", trafficScale),
		34, 23, names(trafficModes, func(m trafficMode) string { return m.name }), names(trafficModeCases, func(c trafficModeCase) string { return c.name }),
		func(i, j int) string {
			r := results[i][j]
			if r == nil {
				return "-" // not run (-bench chose other cases)
			}
			return fmt.Sprintf("%d/%d (%.1f%%; %d)", r.Failed, r.Requests, 100*r.FailedRatio(), r.minAnswering)
		}))
}

// restartModeUnderTraffic runs one case as restartUnderTraffic does (a cluster serving
// instances, the service's 3 allocations answering behind a balancer, the restart, the
// balancer's counts from just before the restart until every instance answers again), in
// mode m, with the fewest instances answering beside. Setup is not timed.
func restartModeUnderTraffic(b *testing.B, tc trafficCase, m trafficMode) modeOutcome {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The cluster ends with the sub-benchmark (simtest.Start): run it with -benchtime=1x, so
	// that one cluster runs at a time.
	e, bal := servedWeb(b, ctx, tc, answeringEvery)
	before := bal.Instances()

	args := []string{"run", "-on-error=fail"}
	if m.fleet {
		args = append(append(args, m.args...), "-jobs", `Name == "web"`)
	} else {
		args = append(append(append(args, "-state=local"), m.args...), "web")
	}
	b.StartTimer()
	start := time.Now()
	bal.Reset()
	code, out, errOut := e.run(ctx, args...)
	if code != 0 {
		bal.Stop()
		b.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	bal.WaitAnswering(b, 3, 30*time.Second)
	r := bal.Stop()
	took := time.Since(start)
	b.StopTimer()
	minAnswering := r.MinAnswering
	// An allocation keeps its port for its life: the addresses say which allocations serve.
	kept := 0
	for _, addr := range bal.Instances() {
		if slices.Contains(before, addr) {
			kept++
		}
	}
	want := 3
	if m.replaces {
		want = 0
	}
	if kept != want {
		b.Fatalf("%s: %d of the 3 instances serving at the end served before, want %d\nstdout:\n%s", strings.Join(args, " "), kept, want, out)
	}
	b.Logf("%s over %.1fs of Nomad's time (%.1fs real); fewest answering %d, listed %d; failed per second %v",
		r, r.Elapsed.Seconds(), took.Seconds(), minAnswering, r.MinInstances, r.FailedPerSecond)
	return modeOutcome{Result: r, minAnswering: minAnswering, took: took}
}

// answeringEvery is how often, in Nomad's time, the balancer counts the instances that
// answer (Balancer.Census): well under the 3s an instance takes to warm up, so no outage of
// one is missed, and slow enough to add little load beside its 100 requests a second.
const answeringEvery = 250 * time.Millisecond
