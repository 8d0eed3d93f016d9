// Package demo is `nomad-restart demo`'s simulated cluster and its measure: a sample
// service on an embedded nomadsim, restarted as `nomad job restart` does and as
// nomad-restart does while its instances are probed and a load balancer sends it traffic,
// and the figures of what each restart did to the service. It is the only product code
// that imports nomadsim (and nomadsim/traffic); the restarts themselves are the command
// line's, handed in (Comparison.Restart).
package demo

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/nomadsim"
	"github.com/nomad-restart/nomad-restart/nomadsim/traffic"
)

// JobID is the sample job the demo restarts.
const JobID = "demo-web"

// The sample service: instances that answer some seconds after they start, as the design's
// observation of a real service (3 s to answer) had it, behind a Nomad health check.
const (
	Count         = 4
	StartDelay    = time.Second     // the driver starts the task (nomadsim.start_delay)
	WarmUp        = 2 * time.Second // then its check fails until it has warmed up
	CheckInterval = time.Second
	MinHealthy    = time.Second // the group's update block: min_healthy_time
)

// sampleJob is the sample service, JobID, of Count instances: each task takes StartDelay to
// start, then fails its Nomad check "ready" until it has warmed up for WarmUp. Its update
// block creates no deployment (max_parallel 0) but gives the health gate its times.
func sampleJob() *api.Job {
	tg := api.NewTaskGroup("web", Count)
	tg.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	minHealthy, deadline := MinHealthy, time.Minute
	tg.Update = &api.UpdateStrategy{MaxParallel: new(int), MinHealthyTime: &minHealthy, HealthyDeadline: &deadline}
	task := api.NewTask("server", "docker")
	task.Config = map[string]any{"image": "example/web:1.0", "ports": []string{"http"}}
	// A Consul service behind Traefik (its tags), as most Nomad shops run one.
	task.Services = []*api.Service{{Name: JobID, PortLabel: "http", Provider: "consul",
		Tags:   []string{"traefik.enable=true", "traefik.http.routers." + JobID + ".rule=PathPrefix(`/`)"},
		Checks: []api.ServiceCheck{{Name: "ready", Type: "http", Path: "/ready", Interval: CheckInterval, Timeout: time.Second}}}}
	task.Meta = map[string]string{
		"nomadsim.start_delay": StartDelay.String(),
		"nomadsim.check.ready": "pass_after=" + WarmUp.String(),
	}
	tg.AddTask(task)
	job := api.NewServiceJob(JobID, JobID, "global", 50)
	job.Datacenters = []string{"dc1", "dc2"}
	job.AddTaskGroup(tg)
	return job
}

// Cluster is the demo's simulated Nomad (and Consul) with the sample job running, and the
// API (Traefik's, /api/http/services) of the load balancer in front of it.
type Cluster struct {
	sim *nomadsim.Cluster
	api *httptest.Server
	// current is the balancer of the phase under way, whose list the API serves.
	current atomic.Pointer[traffic.Balancer]
}

// The demo's load balancer reads Consul's passing instances as Traefik's Consul Catalog
// provider does, configured to refresh every BalancerRefresh (Traefik's default is 15s),
// with Traefik's default reload throttle.
const (
	BalancerRefresh  = 5 * time.Second
	BalancerThrottle = 2 * time.Second
)

// Start starts nomadsim on simCtx and registers the sample job, waiting (on ctx) until its
// allocations run. Its instances answer HTTP on their service ports, as their checks say
// (ServeInstances), for the demo's load balancer.
func Start(simCtx, ctx context.Context, scale float64) (*Cluster, error) {
	sim, err := nomadsim.Start(simCtx, nomadsim.Options{TimeScale: scale, ServeInstances: true})
	if err != nil {
		return nil, fmt.Errorf("starting the simulated cluster: %w", err)
	}
	if _, err := sim.RegisterJob(sampleJob()); err != nil {
		sim.Close()
		return nil, fmt.Errorf("registering the sample job: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := sim.WaitJobRunning(waitCtx, "default", JobID); err != nil {
		sim.Close()
		return nil, fmt.Errorf("waiting for the sample job to run: %w", err)
	}
	c := &Cluster{sim: sim}
	c.api = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := c.current.Load()
		if b == nil {
			http.Error(w, "no load balancer runs yet", http.StatusServiceUnavailable)
			return
		}
		b.TraefikAPI().ServeHTTP(w, r)
	}))
	return c, nil
}

// BalancerAPI is the URL of the load balancer's API, Traefik's: what -drain-until
// traefik= reads.
func (c *Cluster) BalancerAPI() string { return c.api.URL }

// Addr is the simulated Nomad's address.
func (c *Cluster) Addr() string { return c.sim.Addr() }

// ConsulAddr is the simulated Consul's address.
func (c *Cluster) ConsulAddr() string { return c.sim.ConsulAddr() }

// Now is the simulation's clock, which runs TimeScale times faster than this one.
func (c *Cluster) Now() time.Time { return c.sim.Now() }

// TimeScale is how many simulated seconds pass in a real second.
func (c *Cluster) TimeScale() float64 { return c.sim.TimeScale() }

// Close stops the simulated cluster.
func (c *Cluster) Close() error {
	c.api.Close()
	return c.sim.Close()
}

// Compare waits until every instance of the sample job serves, then restarts it as Nomad's
// command does and as nomad-restart does (cmp), probing every instance throughout.
func (c *Cluster) Compare(ctx context.Context, cmp Comparison) (*Result, error) {
	client, err := cluster.NewClient(cluster.ClientConfig{Address: c.sim.Addr()})
	if err != nil {
		return nil, fmt.Errorf("connecting to the simulated cluster: %w", err)
	}
	dc := measuredCluster{probe: servingProbe{cluster: cluster.NewNomad(client), namespace: "default", jobID: JobID, consul: c.sim.ConsulAddr(), service: JobID},
		clock: c.sim.Now, scale: c.sim.TimeScale(), count: Count,
		balancer: func() loadBalancer {
			b := newBalancer(c.sim)
			c.current.Store(b.Balancer)
			return b
		}}
	return compareRestarts(ctx, dc, cmp)
}

// balancer is nomadsim/traffic's load balancer in front of the sample service, as the
// comparison uses it: it reads Consul's passing instances every BalancerRefresh and holds
// a new list back BalancerThrottle after a reload, as Traefik's Consul Catalog provider
// does.
type balancer struct{ *traffic.Balancer }

func newBalancer(sim *nomadsim.Cluster) balancer {
	b := traffic.ConsulBalancer(sim, JobID)
	b.Refresh, b.Throttle = BalancerRefresh, BalancerThrottle
	b.Every = requestEvery(sim.TimeScale())
	return balancer{b}
}

func (b balancer) stop() requestCounts {
	r := b.Stop()
	return requestCounts{requests: r.Requests, failed: r.Failed}
}
