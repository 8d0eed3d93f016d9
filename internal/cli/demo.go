package cli

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
	"github.com/nomad-restart/nomad-restart/nomadsim/traffic"
)

// demoJobID is the sample job the demo restarts.
const demoJobID = "demo-web"

// The sample service: instances that answer some seconds after they start, as the design's
// observation of a real service (3 s to answer) had it, behind a Nomad health check.
const (
	demoCount         = 4
	demoStartDelay    = time.Second     // the driver starts the task (nomadsim.start_delay)
	demoWarmUp        = 2 * time.Second // then its check fails until it has warmed up
	demoCheckInterval = time.Second
	demoMinHealthy    = time.Second // the group's update block: min_healthy_time
)

// demoOptions are demo's options: run's, which shape nomad-restart's restart, and its own.
type demoOptions struct {
	run      *runOptions
	scale    float64
	httpAddr string
}

func parseDemoArgs(args []string) (*demoOptions, error) {
	d := &demoOptions{run: &runOptions{}}
	var raw runFlagValues
	fs := newFlagSet("demo")
	addRunFlags(fs, &raw, d.run)
	fs.Float64Var(&d.scale, "time-scale", 1, "")
	fs.StringVar(&d.httpAddr, "http-addr", "", "")
	if err := parseFlags(fs, "demo", args); err != nil {
		return nil, err
	}
	o := d.run
	switch {
	case fs.NArg() > 0:
		return nil, usageErrorf("demo takes no arguments (it restarts its own sample job %q); see `nomad-restart demo -help`", demoJobID)
	case d.scale <= 0:
		return nil, usageErrorf("Invalid -time-scale value %v: give a positive number of simulated seconds per real second, like 1 or 10", d.scale)
	case o.detach:
		return nil, usageErrorf("the demo cannot be detached: its simulated cluster lives in this process; drop -detach")
	case o.dryRun:
		return nil, usageErrorf("the demo restarts its sample job on its simulated cluster, it has no dry run; drop -dry-run (on your cluster: nomad-restart run -dry-run <job>)")
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !given["on-error"] {
		raw.onError, given["on-error"] = string(restart.OnErrorFail), true
	}
	if strings.EqualFold(raw.onError, string(restart.OnErrorAsk)) || strings.EqualFold(raw.batchWait, "ask") {
		return nil, usageErrorf(`the demo asks nothing: drop -on-error ask and -batch-wait ask (they are for nomad-restart run)`)
	}
	if err := raw.validate(o, given, false); err != nil {
		return nil, err
	}
	o.job = demoJobID
	return d, nil
}

// cmdDemo starts an embedded nomadsim with a sample service whose instances take seconds
// to serve, restarts it as `nomad job restart` does and as nomad-restart does while probing
// every instance, and prints what each restart did to the service. With -http-addr it then
// serves the agent's page of the demo's cluster until Ctrl-C.
func (a *app) cmdDemo(ctx context.Context, args []string) error {
	d, err := parseDemoArgs(args)
	if err != nil {
		return err
	}
	var ln net.Listener
	if d.httpAddr != "" {
		if ln, err = listenDemoPage(d.httpAddr); err != nil {
			return err
		}
		defer ln.Close()
	}
	o := d.run
	p := a.printer(o.verbose, o.json)
	if !o.json {
		p.plain("This is a simulated Nomad cluster (nomadsim); nothing real is restarted.")
	}
	simCtx, stopSim := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSim()
	sim, err := startDemoCluster(simCtx, ctx, d.scale)
	if err != nil {
		return err
	}
	defer sim.Close()
	if !o.json {
		p.header(a.now(), fmt.Sprintf("Simulated Nomad at %s; job %q runs %d instances that serve %s after they start (%s to start, %s to warm up), checked every %s",
			sim.Addr(), demoJobID, demoCount, demoStartDelay+demoWarmUp, demoStartDelay, demoWarmUp, demoCheckInterval))
	}
	res, err := a.runDemo(ctx, p, sim, o)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(a.stderr, "The demo's simulated cluster ends with this process, so this restart cannot be resumed; run `nomad-restart demo` again.")
		}
		return err
	}
	return a.endDemo(ctx, res, sim.Addr(), ln, o)
}

// startDemoCluster starts nomadsim on simCtx and registers the sample job, waiting (on
// ctx) until its allocations run. Its instances answer HTTP on their service ports, as
// their checks say (ServeInstances), for the demo's load balancer.
func startDemoCluster(simCtx, ctx context.Context, scale float64) (*nomadsim.Cluster, error) {
	sim, err := nomadsim.Start(simCtx, nomadsim.Options{TimeScale: scale, ServeInstances: true})
	if err != nil {
		return nil, fmt.Errorf("starting the simulated cluster: %w", err)
	}
	if _, err := sim.RegisterJob(demoJob()); err != nil {
		sim.Close()
		return nil, fmt.Errorf("registering the sample job: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sim.WaitJobRunning(waitCtx, "default", demoJobID); err != nil {
		sim.Close()
		return nil, fmt.Errorf("waiting for the sample job to run: %w", err)
	}
	return sim, nil
}

// runDemo opens a session on the simulated cluster as `run` does and compares the restarts.
func (a *app) runDemo(ctx context.Context, p *printer, sim *nomadsim.Cluster, o *runOptions) (*demoResult, error) {
	dir, err := os.MkdirTemp("", "nomad-restart-demo-")
	if err != nil {
		return nil, fmt.Errorf("creating the demo's state directory: %w", err)
	}
	defer os.RemoveAll(dir)
	o.client = clientFlags{address: sim.Addr(), consulConfig: health.ConsulConfig{Address: sim.ConsulAddr()}}
	logger, err := a.logger(o.client.logLevel)
	if err != nil {
		return nil, err
	}
	// The simulation's clock runs scale times faster than this one: the health gate reads it.
	ses, err := nomadBackend{localDir: dir, clock: sim.Now, timeScale: sim.TimeScale()}.open(o.client, logger, a.holder())
	if err != nil {
		return nil, err
	}
	client, err := cluster.NewClient(cluster.ClientConfig{Address: sim.Addr()})
	if err != nil {
		return nil, fmt.Errorf("connecting to the simulated cluster: %w", err)
	}
	dc := demoCluster{ses: ses, probe: servingProbe{cluster: cluster.NewNomad(client), namespace: "default", jobID: demoJobID},
		clock: sim.Now, scale: sim.TimeScale(), count: demoCount,
		balancer: func() loadBalancer { return newDemoBalancer(sim) }}
	return a.compareRestarts(ctx, p, dc, o)
}

// demoBalancer is nomadsim/traffic's load balancer in front of the sample service, as the
// comparison uses it (demo.go alone may import the simulator's packages). The sample
// service is of Nomad's provider, so the balancer reads Nomad's service table, as
// Traefik's Nomad provider does: every registered instance, no health.
type demoBalancer struct{ *traffic.Balancer }

func newDemoBalancer(sim *nomadsim.Cluster) demoBalancer {
	b := traffic.NomadBalancer(sim, demoJobID)
	b.Every = demoRequestEvery(sim.TimeScale())
	return demoBalancer{b}
}

func (b demoBalancer) stop() requestCounts {
	r := b.Stop()
	return requestCounts{requests: r.Requests, failed: r.Failed}
}

// endDemo prints the figures and how to look at the restarts, then with -http-addr serves
// the agent's page until Ctrl-C.
func (a *app) endDemo(ctx context.Context, res *demoResult, nomadAddr string, ln net.Listener, o *runOptions) error {
	pageURL := ""
	if ln != nil {
		pageURL = "http://" + ln.Addr().String() + "/"
	}
	if o.json {
		if err := writeJSON(a.stdout, res); err != nil {
			return err
		}
	} else {
		printComparison(a.stdout, res)
		fmt.Fprint(a.stdout, demoLookHint(res, nomadAddr, pageURL, o.verbose))
	}
	if ln == nil {
		if !o.json {
			fmt.Fprintln(a.stdout, "\nTry it on a real cluster: NOMAD_ADDR=https://nomad.example:4646 nomad-restart run <job>")
		}
		return nil
	}
	logger, err := a.logger(o.client.logLevel)
	if err != nil {
		return err
	}
	return a.serveDemoPage(ctx, ln, nomadAddr, logger)
}
