package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/agent"
	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/demo"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
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
		return nil, usageErrorf("demo takes no arguments (it restarts its own sample job %q); see `nomad-restart demo -help`", demo.JobID)
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
	o.job = demo.JobID
	return d, nil
}

// demoCommand is `nomad-restart demo`.
type demoCommand struct{}

// Run starts an embedded nomadsim with a sample service whose instances take seconds
// to serve, restarts it as `nomad job restart` does and as nomad-restart does while probing
// every instance, and prints what each restart did to the service. With -http-addr it then
// serves the agent's page of the demo's cluster until Ctrl-C.
func (demoCommand) Run(ctx context.Context, a *app, args []string) error {
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
		p.Plain("This is a simulated Nomad cluster (nomadsim); nothing real is restarted.")
	}
	simCtx, stopSim := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSim()
	sim, err := demo.Start(simCtx, ctx, d.scale)
	if err != nil {
		return err
	}
	defer sim.Close()
	if !o.json {
		p.Header(a.now(), fmt.Sprintf("Simulated Nomad at %s; job %q runs %d instances that serve %s after they start (%s to start, %s to warm up), checked every %s",
			sim.Addr(), demo.JobID, demo.Count, demo.StartDelay+demo.WarmUp, demo.StartDelay, demo.WarmUp, demo.CheckInterval))
	}
	if !o.json {
		p.Header(a.now(), fmt.Sprintf("A load balancer reads its passing instances from Consul as Traefik does, every %s (refreshInterval) with a %s reload throttle, and serves Traefik's API at %s",
			demo.BalancerRefresh, demo.BalancerThrottle, sim.BalancerAPI()))
	}
	o.spec = demoDrain(o.spec, sim.BalancerAPI())
	res, err := a.runDemo(ctx, p, sim, o)
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(a.stderr, "The demo's simulated cluster ends with this process, so this restart cannot be resumed; run `nomad-restart demo` again.")
		}
		return err
	}
	return a.endDemo(ctx, res, sim.Addr(), ln, o)
}

// demoDrain tells nomad-restart's restart about the demo's balancer, as an operator tells
// the agent (-balancer-refresh, -drain-until): its refresh, and its API, whose word ends
// each drain. Options the user gave are kept.
func demoDrain(spec restart.Spec, api string) restart.Spec {
	if _, ok := spec.BalancerRefresh[restart.BalancerTraefik]; !ok {
		spec.BalancerRefresh = maps.Clone(spec.BalancerRefresh)
		if spec.BalancerRefresh == nil {
			spec.BalancerRefresh = map[string]time.Duration{}
		}
		spec.BalancerRefresh[restart.BalancerTraefik] = demo.BalancerRefresh
	}
	if len(spec.DrainUntil) == 0 {
		spec.DrainUntil = []restart.DrainEvidence{{Kind: restart.EvidenceTraefik, Address: api}}
	}
	return spec
}

// Help is `nomad-restart demo -help`.
func (demoCommand) Help() string {
	return `Usage: nomad-restart demo [options]

  Start a simulated Nomad cluster (nomadsim) in this process with a sample
  service whose 4 instances need 3s to serve after they start, behind a health
  check. Restart it as "nomad job restart" does (-health none), then as
  nomad-restart does, probing every instance while a load balancer reading
  Consul's passing instances as Traefik does (every 5s, a 2s reload
  throttle) sends steady traffic; nomad-restart drains each instance until
  the balancer's API no longer lists it (as -drain-until traefik=...).
  Print side by side the fewest instances serving, the share of time with none serving, the requests that
  failed through the balancer and the total time. Nothing real is restarted
  and nothing is asked.

  -json
    Print the figures as one JSON object: {"count": N, "nomad": {...},
    "nomad_restart": {...}}, each with min_serving, none_serving_share (0 to 1),
    seconds (until every instance serves again), restart_seconds,
    requests and failed_requests (sent through the balancer, and failed), and
    restart_id.

  -http-addr=<host:port>
    After the figures, keep the simulated cluster up and serve the agent's page
    of its restarts on this address until Ctrl-C.

  -time-scale=<n>
    Simulated seconds per real second (default 1); the figures are simulated
    seconds.

  -batch-size, -batch-wait, -health, -min-healthy-time, -max-unavailable,
  -surge, -reschedule, -drain, -drain-until, -group, -task, -all-tasks and
  -verbose shape
  nomad-restart's restart as in "run"; the first restart takes the same
  batches with Nomad's gate.
`
}

func (demoCommand) Synopsis() string { return "Restart a sample job on a simulated Nomad cluster" }

// runDemo opens a session on the simulated cluster as `run` does and compares the restarts.
func (a *app) runDemo(ctx context.Context, p *output.Printer, sim *demo.Cluster, o *runOptions) (*demo.Result, error) {
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
	cmp := demo.Comparison{Spec: o.spec, Restart: func(ctx context.Context, spec restart.Spec) (*restart.Record, error) {
		withSpec := *o
		withSpec.spec = spec
		return a.quietRestart(ctx, ses, &withSpec)
	}}
	if !o.json {
		cmp.Out = demoPrinter{p: p, now: a.now}
	}
	return sim.Compare(ctx, cmp)
}

// demoPrinter is the comparison's demo.Printer: the command's printer.
type demoPrinter struct {
	p   *output.Printer
	now func() time.Time
}

func (d demoPrinter) Header(msg string) { d.p.Header(d.now(), msg) }
func (d demoPrinter) Plain(text string) { d.p.Plain(text) }
func (d demoPrinter) Options(spec restart.Spec) {
	d.p.Plain(strings.Repeat(" ", output.TimestampPrefixLen) + "Options: " + describeSpec(spec))
}

// quietRestart plans, records and drives a restart with run's own steps, printing nothing
// on stdout: the demo shows what the instances did instead. Errors still reach stderr. It
// returns the restart's final record; a restart that did not succeed is an error.
func (a *app) quietRestart(ctx context.Context, ses session, o *runOptions) (*restart.Record, error) {
	quiet := &app{stdin: a.stdin, stdout: io.Discard, stderr: a.stderr, env: a.env, backend: a.backend, now: a.now}
	p := quiet.printer(false, false)
	plan, err := quiet.planRestart(ctx, p, ses, o)
	if err != nil {
		return nil, err
	}
	rec := plan.Record
	if len(rec.Allocs) == 0 {
		return nil, fmt.Errorf("no allocations of job %q to restart with these options", o.job)
	}
	eng, st, h, err := quiet.recordRestart(ctx, p, ses, rec, o)
	if err != nil {
		return nil, err
	}
	if err := quiet.drive(ctx, p, eng, st, rec, false, h.Drive); err != nil {
		return nil, err
	}
	final, err := st.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("reading restart %s back: %w", output.ShortID(rec.ID, false), err)
	}
	return final, nil
}

// endDemo prints the figures and how to look at the restarts, then with -http-addr serves
// the agent's page until Ctrl-C.
func (a *app) endDemo(ctx context.Context, res *demo.Result, nomadAddr string, ln net.Listener, o *runOptions) error {
	pageURL := ""
	if ln != nil {
		pageURL = "http://" + ln.Addr().String() + "/"
	}
	if o.json {
		if err := output.WriteJSON(a.stdout, res); err != nil {
			return err
		}
	} else {
		demo.PrintComparison(a.stdout, res)
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

// demoLookHint says how to look at the restarts: where the demo keeps its cluster up (with
// -http-addr), the command and the page; otherwise how to keep it up.
func demoLookHint(r *demo.Result, nomadAddr, pageURL string, verbose bool) string {
	id, nid := output.ShortID(r.NomadRestart.RestartID, verbose), output.ShortID(r.Nomad.RestartID, verbose)
	var b strings.Builder
	fmt.Fprintf(&b, "\nRestart %s is nomad-restart's (%s is the one done as Nomad does); both are recorded in the\n", id, nid)
	b.WriteString("simulated cluster's Nomad Variables, as on a real cluster.\n")
	if pageURL == "" {
		fmt.Fprintf(&b, "The simulated cluster ends with the demo: keep it up with `nomad-restart demo -http-addr 127.0.0.1:9646`\n")
		fmt.Fprintf(&b, "to look at them with `nomad-restart status %s` and on the agent's page.\n", id)
		return b.String()
	}
	fmt.Fprintf(&b, "The simulated cluster stays up until Ctrl-C. Look at them:\n")
	fmt.Fprintf(&b, "    NOMAD_ADDR=%s nomad-restart status %s\n", nomadAddr, id)
	fmt.Fprintf(&b, "    %s    (the agent's page)\n", pageURL)
	return b.String()
}

// listenDemoPage opens -http-addr before the demo starts, so that an address in use is
// refused before anything runs.
func listenDemoPage(addr string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, usageErrorf("Invalid -http-addr value %q: want host:port, like 127.0.0.1:9646", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on -http-addr %s: %w; choose a free address", addr, err)
	}
	return ln, nil
}

// serveDemoPage serves the agent's page (the restarts recorded in the demo's cluster) on ln
// until ctx ends (Ctrl-C), running an agent on the demo's cluster as `nomad-restart agent`
// would: its page follows the records as the agent's does.
func (a *app) serveDemoPage(ctx context.Context, ln net.Listener, nomadAddr string, logger *slog.Logger) error {
	cc := cluster.ClientConfig{Address: nomadAddr}
	client, err := cluster.NewClient(cc)
	if err != nil {
		return fmt.Errorf("connecting the page to the simulated cluster: %w", err)
	}
	// The page steers as the agent's does; the demo's cluster has no ACLs, so no token is
	// needed.
	holder := "agent@" + a.holder()
	consul := agentConsul(a.env, 0)
	partsFor, err := tokenParts(cc, nil, logger, holder, consul, engine.GatesConfig{}, engine.BalancersConfig{})
	if err != nil {
		return fmt.Errorf("preparing the page's actions: %w", err)
	}
	cfg := buildParts(partsConfig{client: client, logger: logger, holder: holder, sharedWatch: true, health: engine.HealthConfig{Consul: consul}}).agentConfig(
		agent.Config{Namespace: "*", Holder: holder, Logger: logger})
	cfg.Actions = pageActions(partsFor, false)
	ag, err := agent.New(cfg)
	if err != nil {
		return fmt.Errorf("starting the agent's page: %w", err)
	}
	srv := &http.Server{Handler: ag.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	runErr := ag.Run(ctx)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the agent's page on %s: %w", ln.Addr(), err)
	}
	return runErr
}
