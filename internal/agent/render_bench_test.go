package agent

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/agent/agenttest"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// The scale of BenchmarkRolloutsOnReRenders.
const (
	renderBenchJobs     = 20 // opted-in jobs, each with a template the agent follows by its file
	renderBenchAllocs   = 5  // allocations per job: 100 followed allocations
	renderBenchRendered = 5  // jobs whose template Nomad re-renders
	// renderBenchInterval is the jobs' render-interval: the shortest allowed, so that a
	// run stays short; the cost at the default scales with the interval.
	renderBenchInterval = onchange.MinRenderInterval
	renderBenchDebounce = time.Second
	renderBenchTicks    = 3 // render-intervals of quiet whose requests are counted
)

// BenchmarkRolloutsOnReRenders has one agent follow, by their files, the templates of
// renderBenchJobs jobs of renderBenchAllocs allocations (a template reading a path computed
// at render time, change_mode noop, as a Vault secret would be), on a simulated cluster
// whose time is real time. It reports:
//
//   - the requests sent while nothing changes, per render-interval and per minute at the
//     default interval (30s), for the 100 allocations: one listing of the template's
//     directory per allocation, and one listing of each job's allocations;
//   - from Nomad's re-render of renderBenchRendered jobs' templates (all allocations at
//     once) to the first restart request of each job's rollout, the median and the
//     largest (at most a render-interval plus the debounce);
//   - the most connections the agent held open to Nomad at once.
//
// Every rollout must succeed, or the benchmark fails.
//
//	go test -run '^$' -bench BenchmarkRolloutsOnReRenders -benchtime=1x ./internal/agent/
func BenchmarkRolloutsOnReRenders(b *testing.B) {
	for range b.N {
		renderBenchOnce(b)
	}
}

func renderBenchOnce(b *testing.B) {
	e, ctx := startBenchEnv(b, realTime)
	jobs := make([]string, renderBenchJobs)
	for i := range jobs {
		jobs[i] = fmt.Sprintf("secret-%02d", i)
	}
	simtest.Concurrently(b, len(jobs), func(i int) error {
		_, err := e.Sim.RegisterJob(renderBenchJob(jobs[i]))
		return err
	})
	simtest.WaitFor(b, ctx, "every job's allocations running", func() bool {
		return runningPerJob(ctx, e.Client) == renderBenchJobs*renderBenchAllocs
	})

	wire := &wireLog{}
	follows := &followCount{}
	a := e.newAgent(b, "render-bench", e.Sim.BootstrapToken(), func(c *Config) {
		c.Now = e.Sim.Now
		c.MinListGap = time.Second
		c.Logger = slog.New(follows)
		// As `nomad-restart agent` wires it: the files are read on the cluster's client.
		c.Changes.Files = cluster.NewNomad(changeBenchWiring(b, e, c, wire))
	})
	b.StartTimer()
	stop := agenttest.Run(b, a)
	simtest.WaitFor(b, ctx, "the agent following every job", func() bool { return follows.n() == renderBenchJobs })
	time.Sleep(renderBenchInterval + time.Second) // every job's first reading done

	idleFrom := time.Now()
	time.Sleep(renderBenchTicks * renderBenchInterval) // a measurement window
	idle := wire.since(idleFrom)

	rendered := jobs[:renderBenchRendered]
	renderedAt := map[string]time.Time{}
	for _, job := range rendered {
		if n := e.Sim.RerenderTemplates("default", job, "local/config.txt", 0); n != renderBenchAllocs {
			b.Fatalf("%d templates of %s re-rendered, want %d", n, job, renderBenchAllocs)
		}
		renderedAt[job] = e.Sim.Now()
	}
	signaled := restartSignals(b, ctx, e, rendered)
	b.StopTimer()
	waitRollouts(b, ctx, e, rendered)
	stop()

	var lat []time.Duration
	for _, job := range rendered {
		lat = append(lat, signaled[job].Sub(renderedAt[job]))
	}
	slices.Sort(lat)
	lists, allocLists := 0, 0
	for _, r := range idle {
		switch {
		case strings.HasPrefix(r.path, "/v1/client/fs/ls/"):
			lists++
		case strings.HasPrefix(r.path, "/v1/job/") && strings.HasSuffix(r.path, "/allocations"):
			allocLists++
		}
	}
	perTick := float64(len(idle)) / renderBenchTicks
	perMinuteAtDefault := perTick * float64(time.Minute/onchange.DefaultRenderInterval)
	b.ReportMetric(perTick, "idle-req/interval")
	b.ReportMetric(perMinuteAtDefault, "idle-req/min@30s")
	b.ReportMetric(medianOf(lat).Seconds(), "render-to-restart-s")
	b.ReportMetric(lat[len(lat)-1].Seconds(), "max-render-to-restart-s")
	b.ReportMetric(float64(wire.counts().peakConns), "peak-conns")
	b.Logf("idle for %d render-intervals of %v, %d followed allocations: %d requests (%d directory listings, %d allocation listings): %s",
		renderBenchTicks, renderBenchInterval, renderBenchJobs*renderBenchAllocs, len(idle), lists, allocLists, byEndpoint(idle))
	b.Logf("re-render to first restart request: %v (render-interval %v, debounce %v)", lat, renderBenchInterval, renderBenchDebounce)
}

// renderBenchJob is a job of renderBenchAllocs allocations following the re-renders of a
// template read through a computed path, without deployments.
func renderBenchJob(id string) *api.Job {
	meta := map[string]string{"nomad-restart.on-change": "auto", "nomad-restart.debounce": renderBenchDebounce.String(),
		"nomad-restart.health": "running", "nomad-restart.render-interval": renderBenchInterval.String(),
		"nomad-restart.batch-size": "100%"}
	job := templatedJob(id, renderBenchAllocs, computedTemplate, meta)
	job.Update = &api.UpdateStrategy{MaxParallel: new(0)}
	return job
}
