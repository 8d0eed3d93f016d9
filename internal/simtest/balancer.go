package simtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim"
	"github.com/nomad-restart/nomad-restart/nomadsim/traffic"
)

// Balancer is nomadsim/traffic's load balancer with the tests' wait on it: the balancer
// itself lives there so that the demo, which is not a test, counts requests with it too.
type Balancer struct{ *traffic.Balancer }

// Result is what a Balancer counted (traffic.Result).
type Result = traffic.Result

// ConsulBalancer is a Balancer of service that reads c's Consul (instances passing their
// checks), at c's time scale.
func ConsulBalancer(c *nomadsim.Cluster, service string) *Balancer {
	return &Balancer{traffic.ConsulBalancer(c, service)}
}

// NomadBalancer is a Balancer of service that reads c's own service table (Nomad's
// provider: every registered instance), at c's time scale.
func NomadBalancer(c *nomadsim.Cluster, service string) *Balancer {
	return &Balancer{traffic.NomadBalancer(c, service)}
}

// WaitAnswering waits, up to d of real time, until the balancer lists n instances and each
// answers GET / with a 2xx, and fails the test if they do not.
func (b *Balancer) WaitAnswering(t testing.TB, n int, d time.Duration) {
	t.Helper()
	WaitWithin(t, d, fmt.Sprintf("%d instances of %s listed and answering", n, b.Service), func() bool {
		return b.Answering(n)
	})
}
