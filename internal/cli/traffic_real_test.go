package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim/traffic"
)

// BenchmarkRestartUnderTrafficOnRealNomad is BenchmarkRestartUnderTraffic in front of a
// real Nomad agent with a real Consul (issue 21, item 5): the same balancer (simtest.Balancer
// at time scale 1), a service of 3 instances of `python3 -m http.server` that listens 3s
// after its task starts (its warm-up), behind an HTTP check every second, restarted with
// batch size 1 in each way a restart runs. It needs an agent that may run raw_exec tasks
// and registers services in Consul:
//
//	NOMAD_TRAFFIC_ADDR=http://127.0.0.1:4646 CONSUL_TRAFFIC_ADDR=http://127.0.0.1:8500 \
//	NOMAD_TRAFFIC_CLI=$(command -v nomad) \
//	go test -run '^$' -bench BenchmarkRestartUnderTrafficOnRealNomad -benchtime=1x -timeout 60m -v ./internal/cli/
//
// NOMAD_TRAFFIC_CLI, when set, is Nomad's own CLI: the baseline is then `nomad job restart
// -yes -batch-size 1` itself, else nomad-restart's -health none (the same calls). Without
// NOMAD_TRAFFIC_ADDR there is no agent to measure, and the benchmark says so and stops.
func BenchmarkRestartUnderTrafficOnRealNomad(b *testing.B) {
	nomadAddr, consulAddr := os.Getenv("NOMAD_TRAFFIC_ADDR"), os.Getenv("CONSUL_TRAFFIC_ADDR")
	if nomadAddr == "" || consulAddr == "" {
		b.Skip("no real agent: set NOMAD_TRAFFIC_ADDR and CONSUL_TRAFFIC_ADDR (see the doc comment)")
	}
	nomadCLI := os.Getenv("NOMAD_TRAFFIC_CLI")
	client, err := api.NewClient(&api.Config{Address: nomadAddr})
	if err != nil {
		b.Fatal(err)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "failed/requests (share), 3 instances, batch size 1, real agent:")
	for _, tc := range trafficModeCases {
		fmt.Fprintf(&table, "\n%-36s", tc.name)
		for _, m := range trafficModes {
			b.Run(tc.key+"/"+m.key, func(b *testing.B) {
				for range b.N {
					r := realRestartUnderTraffic(b, client, nomadAddr, consulAddr, nomadCLI, tc.trafficCase, m)
					b.ReportMetric(float64(r.Failed), "failed")
					b.ReportMetric(float64(r.Requests), "requests")
					b.ReportMetric(100*r.FailedRatio(), "failed-%")
					fmt.Fprintf(&table, " | %s: %d/%d (%.1f%%)", m.key, r.Failed, r.Requests, 100*r.FailedRatio())
				}
			})
		}
	}
	b.Log(table.String())
}

// realServedJob is a service of 3 instances that listen warmUp after their task starts,
// behind an HTTP check every second.
func realServedJob(id, provider string, delay time.Duration) *api.Job {
	job := api.NewServiceJob(id, id, "global", 50)
	job.Datacenters = []string{"dc1"}
	tg := api.NewTaskGroup("web", 3)
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	tg.Services = []*api.Service{{Name: id, PortLabel: "http", Provider: provider,
		Checks: []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}}}}
	if delay > 0 {
		tg.ShutdownDelay = &delay
	}
	minHealthy, deadline, maxParallel := 2*time.Second, time.Minute, 0
	tg.Update = &api.UpdateStrategy{MinHealthyTime: &minHealthy, HealthyDeadline: &deadline, MaxParallel: &maxParallel}
	task := api.NewTask("web", "raw_exec")
	task.Config = map[string]any{"command": "/bin/sh", "args": []string{"-c",
		"sleep 3; exec python3 -m http.server ${NOMAD_PORT_http} --bind 127.0.0.1 --directory ${NOMAD_TASK_DIR}"}}
	task.Require(&api.Resources{CPU: new(50), MemoryMB: new(64)})
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	return job
}

// realRestartUnderTraffic registers a fresh job for the case, waits until its 3 instances
// answer through the balancer, restarts it in mode m and counts, then purges the job.
func realRestartUnderTraffic(b *testing.B, client *api.Client, nomadAddr, consulAddr, nomadCLI string, tc trafficCase, m trafficMode) simtest.Result {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	id := fmt.Sprintf("traffic-%s-%d", tc.provider, time.Now().UnixNano()%100000)
	if _, _, err := client.Jobs().Register(realServedJob(id, tc.provider, tc.delay), nil); err != nil {
		b.Fatalf("registering %s: %v", id, err)
	}
	defer func() { _, _, _ = client.Jobs().Deregister(id, true, nil) }()
	bal := &simtest.Balancer{Balancer: &traffic.Balancer{Service: id, NomadAddr: nomadAddr, Scale: 1}}
	e := cliEnv{addr: nomadAddr, localDir: b.TempDir(), clock: time.Now, scale: 1}
	if tc.provider == "consul" {
		bal = &simtest.Balancer{Balancer: &traffic.Balancer{Service: id, ConsulAddr: consulAddr, Scale: 1}}
		e.consul = consulAddr
	}
	if err := bal.Start(ctx); err != nil {
		b.Fatal(err)
	}
	bal.WaitAnswering(b, 3, 2*time.Minute)
	time.Sleep(3 * time.Second) // past min_healthy_time: the job's deployment has ended

	args := []string{"run", "-on-error=fail", "-batch-size=1"}
	if m.fleet {
		args = append(append(args, m.args...), "-jobs", fmt.Sprintf("Name == %q", id))
	} else {
		args = append(append(append(args, "-state=local"), m.args...), id)
	}
	b.StartTimer()
	bal.Reset()
	var code int
	var out, errOut string
	if m.key == "in-place-health-none" && nomadCLI != "" {
		cmd := exec.CommandContext(ctx, nomadCLI, "job", "restart", "-yes", "-batch-size", "1", id)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+nomadAddr)
		raw, err := cmd.CombinedOutput()
		out = string(raw)
		if err != nil {
			code = 1
			errOut = err.Error()
		}
	} else {
		code, out, errOut = e.run(ctx, args...)
	}
	if code != 0 {
		bal.Stop()
		b.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	bal.WaitAnswering(b, 3, 2*time.Minute)
	r := bal.Stop()
	b.StopTimer()
	b.Logf("%s/%s: %s over %.1fs; failed per second %v", tc.name, m.name, r, r.Elapsed.Seconds(), r.FailedPerSecond)
	return r
}
