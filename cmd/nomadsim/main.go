// Command nomadsim serves a simulated Nomad cluster (and Consul's health API) until
// interrupted, so that any Nomad client, including Nomad's own CLI, can be pointed at it:
//
//	nomadsim -addr 127.0.0.1:4646
//	NOMAD_ADDR=http://127.0.0.1:4646 nomad job status
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "nomadsim:", err)
		os.Exit(1)
	}
}

// run serves a cluster until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nomadsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:4646", "address of the Nomad HTTP API")
	consulAddr := fs.String("consul-addr", "127.0.0.1:8500", "address of the Consul HTTP API")
	scale := fs.Float64("time-scale", 1, "simulated seconds per real second")
	acls := fs.Bool("acl", false, "enforce ACLs (the bootstrap token is printed)")
	dcs := fs.String("dcs", "dc1,dc2", "comma-separated datacenters")
	nodes := fs.Int("nodes", 2, "nodes per datacenter")
	seed := fs.Int64("seed", 1, "seed of every random choice")
	region := fs.String("region", "global", "region name")
	verbose := fs.Bool("v", false, "log simulation events")
	syncEvery := fs.Duration("alloc-sync", 0, "simulated interval of the clients' updates to the servers (0: Nomad's 200ms; negative: at once)")
	maxConns := fs.Int("http-max-conns-per-client", 100, "concurrent HTTP connections one client IP may hold, like Nomad's limits.http_max_conns_per_client (0: no limit)")
	scaleLocks := fs.Bool("scale-lock-ttl", false, "run variable lock TTLs on the simulated clock instead of real time")
	serve := fs.Bool("serve-instances", false, "back allocations' service ports with HTTP listeners on 127.0.0.1, registered in the catalogs")
	// The flag package prints the usage on -help and on a bad flag alike, to one output:
	// -help asks for it (stdout, exit 0), a bad flag is an error (stderr, exit 1).
	fs.SetOutput(io.Discard)
	usage := func(w io.Writer) {
		fmt.Fprintln(w, "Usage of nomadsim:")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return nil
		}
		usage(stderr)
		return err // main prints it, after the usage
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	if *nodes < 1 || *scale <= 0 || *dcs == "" || *maxConns < 0 {
		return fmt.Errorf("-nodes must be at least 1, -time-scale positive, -dcs not empty and -http-max-conns-per-client at least 0")
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	c, err := nomadsim.Start(ctx, nomadsim.Options{
		Region: *region, Datacenters: strings.Split(*dcs, ","), NodesPerDatacenter: *nodes,
		TimeScale: *scale, Seed: *seed, ACLs: *acls, Addr: *addr, ConsulAddr: *consulAddr, Logger: logger,
		AllocSyncInterval: *syncEvery, ScaleLockTTL: *scaleLocks, MaxConnsPerClient: *maxConns,
		ServeInstances: *serve,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "nomadsim: Nomad API at %s\n", c.Addr())
	fmt.Fprintf(stdout, "nomadsim: Consul API at %s\n", c.ConsulAddr())
	if *acls {
		fmt.Fprintf(stdout, "nomadsim: bootstrap token %s\n", c.BootstrapToken())
	}
	fmt.Fprintf(stdout, "export NOMAD_ADDR=%s\n", c.Addr())
	<-ctx.Done()
	return c.Close()
}
