package store_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// counter is an http.RoundTripper that counts the requests an api client sends and the
// bytes of their bodies, by method and whether the URL holds a marker such as "lock-renew".
type counter struct {
	next http.RoundTripper
	mu   sync.Mutex
	reqs map[string]int
	sent int64
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	key := r.Method
	if strings.Contains(r.URL.RawQuery, "lock-renew") {
		key += " lock-renew"
	}
	c.reqs[key]++
	if r.ContentLength > 0 {
		c.sent += r.ContentLength
	}
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *counter) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reqs[key]
}

func (c *counter) bytesSent() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// countingClient is an api client on the cluster whose traffic is counted.
func countingClient(t testing.TB, c *nomadsim.Cluster) (*api.Client, *counter) {
	t.Helper()
	cnt := &counter{next: http.DefaultTransport, reqs: map[string]int{}}
	cfg := api.DefaultConfig()
	cfg.Address = c.Addr()
	cfg.Region, cfg.Namespace, cfg.SecretID = "", "", ""
	cfg.HttpClient = &http.Client{Transport: cnt}
	cl, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl, cnt
}

// startNomadStore starts a simulated Nomad and opens a store with opts on it.
func startNomadStore(t testing.TB, opts store.NomadOptions) (*api.Client, *store.Nomad) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{})
	cl := simClient(t, c, "")
	return cl, store.NewNomad(cl, opts)
}

// startCountedStore is startNomadStore with a client whose requests are counted.
func startCountedStore(t testing.TB, opts store.NomadOptions) (*api.Client, *counter, *store.Nomad) {
	t.Helper()
	c := simtest.Start(t, nomadsim.Options{})
	cl, cnt := countingClient(t, c)
	return cl, cnt, store.NewNomad(cl, opts)
}
