package cli

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// demoJobID is the sample job the demo restarts.
const demoJobID = "demo-web"

// cmdDemo starts an embedded nomadsim, registers a sample service job, and restarts it
// through the same code path as `run`.
func (a *app) cmdDemo(ctx context.Context, args []string) error {
	o := &runOptions{}
	var raw runFlagValues
	var scale float64
	fs := newFlagSet("demo")
	addRunFlags(fs, &raw, o)
	fs.Float64Var(&scale, "time-scale", 1, "")
	if err := parseFlags(fs, "demo", args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("demo takes no arguments (it restarts its own sample job %q); see `nomad-restart demo -help`", demoJobID)
	}
	if !isSet(fs, "batch-size") {
		raw.batchSize = "2"
	}
	if !isSet(fs, "on-error") && !a.interactive {
		raw.onError = string(restart.OnErrorFail)
	}
	if scale <= 0 {
		return usageErrorf("Invalid -time-scale value %v: give a positive number of simulated seconds per real second, like 1 or 10", scale)
	}
	if o.detach {
		return usageErrorf("the demo cannot be detached: its simulated cluster lives in this process; drop -detach")
	}
	if err := raw.validate(o, a.interactive); err != nil {
		return err
	}
	o.job = demoJobID

	p := a.printer(o.verbose, o.json)
	if !o.json {
		p.plain("This is a simulated Nomad cluster (nomadsim); nothing real is restarted.")
	}
	simCtx, stopSim := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSim()
	sim, err := nomadsim.Start(simCtx, nomadsim.Options{TimeScale: scale})
	if err != nil {
		return fmt.Errorf("starting the simulated cluster: %w", err)
	}
	defer sim.Close()
	if _, err := sim.RegisterJob(demoJob()); err != nil {
		return fmt.Errorf("registering the sample job: %w", err)
	}
	if !o.json {
		p.header(a.now(), fmt.Sprintf("Simulated Nomad at %s; job %q registered with 8 allocations in 3 groups, waiting for them to run", sim.Addr(), demoJobID))
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sim.WaitJobRunning(waitCtx, "default", demoJobID); err != nil {
		return fmt.Errorf("waiting for the sample job to run: %w", err)
	}

	dir, err := os.MkdirTemp("", "nomad-restart-demo-")
	if err != nil {
		return fmt.Errorf("creating the demo's state directory: %w", err)
	}
	defer os.RemoveAll(dir)
	o.client = clientFlags{address: sim.Addr(), consulConfig: health.ConsulConfig{Address: sim.ConsulAddr()}}
	logger, err := a.logger(o.client.logLevel)
	if err != nil {
		return err
	}
	// The simulation's clock runs scale times faster than this one: the health gate reads it.
	ses, err := nomadBackend{localDir: dir, clock: sim.Now, timeScale: sim.TimeScale()}.open(o.client, logger, a.holder())
	if err != nil {
		return err
	}
	err = a.runRestart(ctx, o, ses)
	if ctx.Err() != nil {
		fmt.Fprintln(a.stderr, "The demo's simulated cluster ends with this process, so this restart cannot be resumed; run `nomad-restart demo` again.")
	}
	if err == nil && !o.json {
		p.plain("\nTry it on a real cluster: NOMAD_ADDR=https://nomad.example:4646 nomad-restart run -batch-size 25% <job>")
	}
	return err
}

// isSet reports whether the flag was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

// demoJob is a service job of 3 groups and 8 allocations whose tasks take 2 simulated
// seconds to start.
func demoJob() *api.Job {
	group := func(name string, count int, tasks ...string) *api.TaskGroup {
		tg := api.NewTaskGroup(name, count)
		// No rolling update strategy: the registration creates no deployment, which would
		// (rightly) make the restart wait for it.
		tg.Update = &api.UpdateStrategy{MaxParallel: new(int)}
		for _, t := range tasks {
			task := api.NewTask(t, "docker")
			task.Config = map[string]any{"image": "example/" + t + ":1.0"}
			task.Meta = map[string]string{"nomadsim.start_delay": "2s"}
			tg.AddTask(task)
		}
		return tg
	}
	job := api.NewServiceJob(demoJobID, demoJobID, "global", 50)
	job.Datacenters = []string{"dc1", "dc2"}
	job.AddTaskGroup(group("web", 4, "server"))
	job.AddTaskGroup(group("api", 3, "api", "log-shipper"))
	job.AddTaskGroup(group("cache", 1, "redis"))
	return job
}
