package cli

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
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

// slowBalancerMode is one way of restarting measured by
// BenchmarkDrainBehindSlowBalancerOnRealNomad: Nomad's own command, or `run` with args,
// where "API" in an arg stands for the balancer's Traefik API URL, "STATS" for HAProxy's
// stats page and "PROM" for a real Prometheus scraping the balancer's Metrics.
type slowBalancerMode struct {
	key   string
	nomad bool // `nomad job restart` itself
	args  []string
}

// BenchmarkDrainBehindSlowBalancerOnRealNomad: a real Nomad agent with a real Consul, a
// service of 3 instances (realServedJob: no shutdown_delay) tagged for Traefik, restarted
// with batch size 1, in place and with -reschedule, behind a balancer that reads Consul
// every 15 s:
//
//   - traefik: the modelled Traefik (nomadsim/traffic at Traefik's defaults: Consul's
//     passing instances every 15 s, reloads 2 s apart at most, Traefik's API served),
//     under `nomad job restart`, -drain 2s, the default (-drain auto: Traefik's 17 s),
//     -drain-until on its API, and -drain-until on a Prometheus query of its requests to
//     the instance (a real Prometheus scraping its per-server counters every second);
//   - haproxy: a real HAProxy on Consul's DNS as HashiCorp's tutorial configures it, its
//     resolution every 15 s (timeout resolve 15s, hold valid 15s), under
//     `nomad job restart` and -drain-until on its statistics.
//
// It needs the agents and Nomad's CLI:
//
//	NOMAD_TRAFFIC_ADDR=http://127.0.0.1:4646 CONSUL_TRAFFIC_ADDR=http://127.0.0.1:8500 \
//	CONSUL_TRAFFIC_DNS=127.0.0.1:8600 NOMAD_TRAFFIC_CLI=$(command -v nomad) \
//	go test -run '^$' -bench BenchmarkDrainBehindSlowBalancerOnRealNomad -benchtime=1x -timeout 60m -v ./internal/cli/
func BenchmarkDrainBehindSlowBalancerOnRealNomad(b *testing.B) {
	nomadAddr, consulAddr, consulDNS, nomadCLI := os.Getenv("NOMAD_TRAFFIC_ADDR"), os.Getenv("CONSUL_TRAFFIC_ADDR"), os.Getenv("CONSUL_TRAFFIC_DNS"), os.Getenv("NOMAD_TRAFFIC_CLI")
	if nomadAddr == "" || consulAddr == "" || consulDNS == "" || nomadCLI == "" {
		b.Skip("no real agent: set NOMAD_TRAFFIC_ADDR, CONSUL_TRAFFIC_ADDR, CONSUL_TRAFFIC_DNS and NOMAD_TRAFFIC_CLI (see the doc comment)")
	}
	client, err := api.NewClient(&api.Config{Address: nomadAddr})
	if err != nil {
		b.Fatal(err)
	}
	nomadRestart := slowBalancerMode{key: "nomad-job-restart", nomad: true}
	balancers := []struct {
		key   string
		modes []slowBalancerMode
	}{
		{"traefik", []slowBalancerMode{nomadRestart, {key: "drain-2s", args: []string{"-drain=2s"}}, {key: "default"},
			{key: "drain-until-traefik", args: []string{"-drain-until=traefik=API"}},
			// A real Prometheus scraping the balancer's per-server counters; the bound is
			// raised past Traefik's 17 s, since the query sees a rate of 0 a few seconds
			// after the balancer's reload.
			{key: "drain-until-prometheus", args: []string{"-prometheus-address=PROM", "-drain-until=prometheus:" + drainQuery, "-drain=30s"}}}},
		{"haproxy", []slowBalancerMode{nomadRestart, {key: "drain-until-haproxy", args: []string{"-drain-until=haproxy=STATS"}}}},
	}
	var table strings.Builder
	table.WriteString("failed/requests, restart time; 3 instances, batch size 1, balancer refresh 15s, real Nomad 2.0 + Consul 1.20:")
	for _, bal := range balancers {
		for _, reschedule := range []bool{false, true} {
			for _, m := range bal.modes {
				how := map[bool]string{false: "in-place", true: "reschedule"}[reschedule]
				b.Run(bal.key+"/"+how+"/"+m.key, func(b *testing.B) {
					for range b.N {
						r, took := slowBalancerRun(b, client, nomadAddr, consulAddr, consulDNS, nomadCLI, bal.key, reschedule, m)
						b.ReportMetric(float64(r.Failed), "failed")
						b.ReportMetric(float64(r.Requests), "requests")
						b.ReportMetric(took.Seconds(), "restart-s")
						fmt.Fprintf(&table, "\n%-8s %-10s %-20s %5d/%-6d %5.1fs", bal.key, how, m.key, r.Failed, r.Requests, took.Seconds())
					}
				})
			}
		}
	}
	b.Log(table.String())
}

// slowBalancerRun registers a fresh job, puts the balancer in front of it, restarts it in
// mode m, and returns what the balancer's clients saw from just before the restart until
// the 3 instances answer through it again, and how long the restart command took.
func slowBalancerRun(b *testing.B, client *api.Client, nomadAddr, consulAddr, consulDNS, nomadCLI, balancer string, reschedule bool, m slowBalancerMode) (simtest.Result, time.Duration) {
	b.StopTimer()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	id := fmt.Sprintf("balancers-%s-%d", balancer, time.Now().UnixNano()%100000)
	job := realServedJob(id, "consul", 0)
	job.TaskGroups[0].Services[0].Tags = []string{"traefik.enable=true"}
	if _, _, err := client.Jobs().Register(job, nil); err != nil {
		b.Fatalf("registering %s: %v", id, err)
	}
	defer func() { _, _, _ = client.Jobs().Deregister(id, true, nil) }()
	var bal *simtest.Balancer
	listed, api, stats, prom := 3, "", "", ""
	settled := func() bool { return true } // the balancer routes to the 3 instances again
	if balancer == "traefik" {
		bal = &simtest.Balancer{Balancer: &traffic.Balancer{Service: id, ConsulAddr: consulAddr, Scale: 1, Refresh: 15 * time.Second, Throttle: 2 * time.Second, Timeout: clientTimeout}}
		srv := httptest.NewServer(bal.TraefikAPI())
		defer srv.Close()
		api = srv.URL
		if slices.ContainsFunc(m.args, func(a string) bool { return strings.Contains(a, "PROM") }) {
			metrics := httptest.NewServer(bal.Metrics())
			defer metrics.Close()
			prom = simtest.StartPrometheus(b, strings.TrimPrefix(metrics.URL, "http://")).URL()
		}
	} else {
		h := simtest.StartHAProxy(b,
			"  balance roundrobin\n  server-template web 3 _"+id+"._tcp.service.consul resolvers consul resolve-opts allow-dup-ip resolve-prefer ipv4 check",
			"resolvers consul\n  nameserver consul "+consulDNS+"\n  accepted_payload_size 8192\n  timeout resolve 15s\n  hold valid 15s")
		bal = &simtest.Balancer{Balancer: &traffic.Balancer{Service: id, Via: h.Frontend, Scale: 1, Timeout: clientTimeout}}
		stats, listed = h.Stats, 1
		up := haproxyServersUp(h)
		settled = func() bool { return up() == 3 }
		simtest.WaitWithin(b, 2*time.Minute, "HAProxy routing to the 3 instances", settled)
	}
	if err := bal.Start(ctx); err != nil {
		b.Fatal(err)
	}
	bal.WaitAnswering(b, listed, 2*time.Minute)
	time.Sleep(3 * time.Second) // past min_healthy_time: the job's deployment has ended
	if balancer == "traefik" {
		simtest.WaitWithin(b, time.Minute, "the balancer listing the 3 instances", func() bool { return len(bal.Instances()) == 3 })
	}

	e := cliEnv{addr: nomadAddr, localDir: b.TempDir(), clock: time.Now, scale: 1, consul: consulAddr}
	args := []string{"run", "-on-error=fail", "-batch-size=1", "-state=local"}
	nomadArgs := []string{"job", "restart", "-yes", "-batch-size", "1"}
	if reschedule {
		args, nomadArgs = append(args, "-reschedule"), append(nomadArgs, "-reschedule")
	}
	for _, a := range m.args {
		args = append(args, strings.NewReplacer("API", api, "STATS", stats, "PROM", prom).Replace(a))
	}
	b.StartTimer()
	bal.Reset()
	start := time.Now()
	var code int
	var out, errOut string
	if m.nomad {
		cmd := exec.CommandContext(ctx, nomadCLI, append(nomadArgs, id)...)
		cmd.Env = append(os.Environ(), "NOMAD_ADDR="+nomadAddr)
		raw, err := cmd.CombinedOutput()
		if out = string(raw); err != nil {
			code, errOut = 1, err.Error()
		}
	} else {
		code, out, errOut = e.run(ctx, append(args, id)...)
	}
	took := time.Since(start)
	if code != 0 {
		bal.Stop()
		b.Fatalf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	bal.WaitAnswering(b, listed, 3*time.Minute)
	simtest.WaitWithin(b, 3*time.Minute, "the balancer routing to the 3 instances again", settled)
	r := bal.Stop()
	b.StopTimer()
	b.Logf("%s/%s: %s over %.1fs, restart %.1fs; failed per second %v\n%s", balancer, m.key, r, r.Elapsed.Seconds(), took.Seconds(), r.FailedPerSecond, lastLines(out, 8))
	return r, took
}

// clientTimeout is how long the balancer's clients wait for an answer: a real client's
// patience, beyond the stalls of a shared, loaded machine (its python instances starved of
// CPU for a second or more). A stopped instance refuses at once, whatever the timeout.
const clientTimeout = 5 * time.Second

// lastLines is the end of a command's output, for the benchmark's log.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
