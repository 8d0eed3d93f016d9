// Package simtest is the tests' shared support for running against nomadsim, the simulated
// Nomad: starting a cluster that ends with the test (Start, the one way tests start
// nomadsim, at one TimeScale unless a test says otherwise), registering jobs and waiting
// until they run, API clients for it (with a token, or through a transport that counts
// their requests) and tokens, waiting on a condition, and counting from Nomad's own facts
// how often each allocation was restarted (the exactly-once check, against nomadsim or a
// real agent); a load balancer that reads the catalog and counts the requests that fail
// during a restart (Balancer, nomadsim/traffic's with a wait that fails the test); and the
// small fixtures tests of several packages share (Nomad's error answers, an address
// nothing listens on, a count of a fake's calls in flight). Only tests import it; the
// product never does (internal/archtest checks).
package simtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TimeScale is how fast the simulated clock runs (simulated seconds per real second) in
// every test that does not ask for another speed: fast, so that a 5 s kill timeout takes
// 100 ms and a restart of a few allocations a fraction of a second, yet slow enough that
// the drivers' and the agent's own waits, on real time, keep up on two busy cores. A test
// that needs another speed sets nomadsim.Options.TimeScale and says why.
const TimeScale = 50

// Start is how every test starts nomadsim: it starts a simulated cluster with opts, at
// TimeScale unless opts.TimeScale says otherwise, and closes it when the test ends. Its
// address is the cluster's Addr; Client, ClientAs and ClientVia make API clients for it.
func Start(t testing.TB, opts nomadsim.Options) *nomadsim.Cluster {
	t.Helper()
	if opts.TimeScale == 0 {
		opts.TimeScale = TimeScale
	}
	ctx, cancel := context.WithCancel(context.Background())
	c, err := nomadsim.Start(ctx, opts)
	if err != nil {
		cancel()
		t.Fatalf("starting nomadsim: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		cancel()
	})
	return c
}

// Client returns an official Nomad API client for c, without a token.
func Client(t testing.TB, c *nomadsim.Cluster) *api.Client {
	t.Helper()
	return ClientAs(t, c, "")
}

// ClientAs returns an official Nomad API client for c that sends token ("": none).
func ClientAs(t testing.TB, c *nomadsim.Cluster, token string) *api.Client {
	t.Helper()
	client, err := c.APIClient(token)
	if err != nil {
		t.Fatalf("nomadsim's API client: %v", err)
	}
	return client
}

// ClientVia is ClientAs with the client's requests sent through rt, a test's transport
// that counts, holds or answers them.
func ClientVia(t testing.TB, c *nomadsim.Cluster, token string, rt http.RoundTripper) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = c.Addr()
	cfg.Region, cfg.Namespace, cfg.SecretID = "", "", token
	cfg.HttpClient = &http.Client{Transport: rt}
	client, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("an API client of nomadsim: %v", err)
	}
	return client
}

// Token creates a token of c under one policy, named as the token, of rules.
func Token(t testing.TB, c *nomadsim.Cluster, name, rules string) string {
	t.Helper()
	token, err := c.CreateToken(name, map[string]string{name: rules})
	if err != nil {
		t.Fatalf("creating token %s: %v", name, err)
	}
	return token
}

// pollEvery is how often WaitFor asks its condition again: short, since what tests wait
// for (an allocation's state, a record's write) changes within milliseconds.
const pollEvery = 5 * time.Millisecond

// WaitFor asks cond again and again until it holds, and fails the test, naming what it
// waited for, when ctx ends first.
func WaitFor(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// WaitWithin is WaitFor with a deadline of d from now instead of a context.
func WaitWithin(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	WaitFor(t, ctx, what, cond)
}

// Answer is an error answer of Nomad's HTTP API (its status code and body text) that says
// both the way the api module's UnexpectedResponseError does, without that type: how a
// test's in-memory cluster answers. cluster.IsTransient reads both.
type Answer struct {
	Status int
	Text   string
}

func (e Answer) Error() string {
	return fmt.Sprintf("Unexpected response code: %d (%s)", e.Status, e.Text)
}

// StatusCode is the answer's HTTP status, as UnexpectedResponseError.StatusCode.
func (e Answer) StatusCode() int { return e.Status }

// Body is the answer's text, as UnexpectedResponseError.Body.
func (e Answer) Body() string { return e.Text }

// ClosedAddr returns a local host:port that nothing listens on: a dial to it is refused.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
