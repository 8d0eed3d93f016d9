package conformance

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// envConsulAddr names a real Consul agent (without ACLs, datacenter dc1) to check the Consul
// cases against, like http://127.0.0.1:8500. `consul agent -dev` is one.
const envConsulAddr = "CONSUL_CONFORMANCE_ADDR"

// consulTarget is one Consul to run a case against: the sim's or a real agent.
type consulTarget struct {
	name   string // "sim" or "real"
	addr   string // base URL
	api    *consulapi.Client
	http   *http.Client
	prefix string // unique per run, so cases can run against a long-lived agent again
}

// forEachConsul runs fn against a fresh simulated cluster's Consul, and against the real
// agent named by CONSUL_CONFORMANCE_ADDR when there is one (otherwise that subtest skips,
// saying why).
func forEachConsul(t *testing.T, fn func(t *testing.T, tg *consulTarget)) {
	t.Helper()
	t.Run("sim", func(t *testing.T) {
		t.Parallel()
		c := simtest.Start(t, nomadsim.Options{Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
		fn(t, newConsulTarget(t, "sim", c.ConsulAddr(), "conf"))
	})
	t.Run("real", func(t *testing.T) {
		t.Parallel()
		addr := os.Getenv(envConsulAddr)
		if addr == "" {
			t.Skip(envConsulAddr + " not set: no real Consul agent to check this case against")
		}
		fn(t, newConsulTarget(t, "real", addr, "conf-"+randomHex(t, 4)))
	})
}

func newConsulTarget(t *testing.T, name, addr, prefix string) *consulTarget {
	t.Helper()
	addr = strings.TrimRight(addr, "/")
	cfg := consulapi.DefaultConfig()
	cfg.Address = addr
	cl, err := consulapi.NewClient(cfg)
	if err != nil {
		t.Fatalf("consul api client for %s: %v", addr, err)
	}
	raw := rawClient(t)
	// Redirects are answers to check, not to follow.
	raw.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &consulTarget{name: name, addr: addr, api: cl, http: raw, prefix: prefix}
}

// key returns a key unique to this run and case.
func (tg *consulTarget) key(t *testing.T, name string) string {
	return tg.prefix + "/" + strings.ReplaceAll(t.Name(), "/", "-") + "/" + name
}

// request sends a raw request and reads the whole answer; it reports failures instead of
// ending the test, so that goroutines may use it.
func (tg *consulTarget) request(ctx context.Context, method, path, body string) (rawResponse, error) {
	return sendRaw(ctx, tg.http, method, tg.addr+path, strings.NewReader(body), nil)
}

// do is request for the test's goroutine: a failure ends the test.
func (tg *consulTarget) do(t *testing.T, method, path, body string) rawResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := tg.request(ctx, method, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// put writes a key through the api client and returns its entry as read back.
func (tg *consulTarget) put(t *testing.T, key, value string, flags uint64) *consulapi.KVPair {
	t.Helper()
	if _, err := tg.api.KV().Put(&consulapi.KVPair{Key: key, Value: []byte(value), Flags: flags}, nil); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	p, _, err := tg.api.KV().Get(key, nil)
	if err != nil || p == nil {
		t.Fatalf("get %s after put: %+v %v", key, p, err)
	}
	return p
}

// consulIndex reads X-Consul-Index, which every KV read carries and is never 0.
func consulIndex(t *testing.T, r rawResponse) uint64 {
	t.Helper()
	return positiveIndex(t, r, "X-Consul-Index")
}

// kvFields is the field set of a KV entry as Consul's structs.DirEntry encodes it without a
// session (Session is omitted when empty), in sorted order.
func kvFields() []string {
	return []string{"CreateIndex", "Flags", "Key", "LockIndex", "ModifyIndex", "Value"}
}

// entries decodes a JSON array of KV entries, checking each entry's field set.
func entries(t *testing.T, r rawResponse) []map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("body %.200q: want a JSON array of entries: %v", r.body, err)
	}
	for _, e := range out {
		var keys []string
		for k := range e {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if want := kvFields(); !slices.Equal(keys, want) {
			t.Errorf("entry fields %v, want %v", keys, want)
		}
	}
	return out
}
