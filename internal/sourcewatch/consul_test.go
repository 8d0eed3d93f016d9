package sourcewatch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// consulClients returns an Options.Consul on addr that records the datacenters asked for
// and the dc parameter of every KV request.
type consulClients struct {
	addr string

	mu  sync.Mutex
	dcs []string // the datacenters the hub asked a client for
	dcq []string // the ?dc= of each KV request
}

func (c *consulClients) client(dc string) (*consulapi.Client, error) {
	c.mu.Lock()
	c.dcs = append(c.dcs, dc)
	c.mu.Unlock()
	cfg := consulapi.DefaultNonPooledConfig()
	cfg.Address = c.addr
	cfg.HttpClient = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.dcq = append(c.dcq, r.URL.Query().Get("dc"))
		c.mu.Unlock()
		return http.DefaultTransport.RoundTrip(r)
	})}
	return consulapi.NewClient(cfg)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func consulKey(path string) onchange.Source {
	return onchange.Source{Kind: onchange.ConsulKey, Path: path, Datacenter: "dc1"}
}

func consulPrefix(path string) onchange.Source {
	return onchange.Source{Kind: onchange.ConsulPrefix, Path: path, Datacenter: "dc1"}
}

// A Consul key and a prefix are followed with blocking queries in the source's
// datacenter: a missing key shows Count 0, a write its ModifyIndex, a deletion a lower
// Count, and a write to another key sends nothing.
func TestConsulKeysAndPrefixes(t *testing.T) {
	t.Parallel()
	c := simtest.Start(t, nomadsim.Options{TimeScale: realTime})
	ctx := testContext(t)
	clients := &consulClients{addr: c.ConsulAddr()}
	writer, err := consulapi.NewClient(&consulapi.Config{Address: c.ConsulAddr()})
	if err != nil {
		t.Fatal(err)
	}
	kv := writer.KV()
	modifyIndex := func(key string) uint64 {
		t.Helper()
		p, _, err := kv.Get(key, nil)
		if err != nil || p == nil {
			t.Fatalf("reading %s back: %v", key, err)
		}
		return p.ModifyIndex
	}
	h := New(nil, Options{MinGap: testGap, Consul: clients.client})
	key := h.Watch(ctx, consulKey("app/config"))
	tree := h.Watch(ctx, consulPrefix("app/"))

	if st := next(t, ctx, "a missing key's State", key); st.Count != 0 || st.Index != 0 || !st.ChangedAt.IsZero() || st.Err != nil {
		t.Fatalf("a missing key shows %+v, want the zero State", st)
	}
	c.ConsulKVPut("app/config", "1")
	st := until(t, ctx, "the key's value", key, func(st State) bool { return st.Count == 1 })
	if want := modifyIndex("app/config"); st.Index != want || st.ChangedAt.IsZero() {
		t.Errorf("after a write: %+v, want Index %d and a ChangedAt", st, want)
	}

	c.ConsulKVPut("app/other", "x")   // under the prefix, not the key
	c.ConsulKVPut("application", "x") // neither: a prefix of Consul is a string prefix, and "app/" ends in a slash
	until(t, ctx, "the prefix's second key", tree, func(st State) bool { return st.Count == 2 })
	c.ConsulKVPut("app/config", "2")
	want := modifyIndex("app/config")
	if st := next(t, ctx, "the key's change", key); st.Index != want || st.Count != 1 {
		t.Errorf("the key's next State is %+v, want Index %d (a write to another key was sent?)", st, want)
	}
	if _, err := kv.Delete("app/other", nil); err != nil {
		t.Fatal(err)
	}
	st = until(t, ctx, "the deletion", tree, func(st State) bool { return st.Count == 1 })
	if st.Index != want {
		t.Errorf("after the deletion the prefix shows %+v, want Index %d", st, want)
	}

	clients.mu.Lock()
	defer clients.mu.Unlock()
	for _, dc := range append(clients.dcs, clients.dcq...) {
		if dc != "dc1" {
			t.Errorf("a request went to datacenter %q, want dc1 (asked: %v, sent: %v)", dc, clients.dcs, clients.dcq)
			break
		}
	}
}

// Consul's 403 on a key becomes State.Err naming the rule to grant. (The simulated Consul
// has no ACLs: this server answers as Consul's KV endpoint does for a token without
// key read, "Permission denied" with status 403.)
func TestConsulDenial(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "Permission denied", http.StatusForbidden)
	}))
	t.Cleanup(srv.Close)
	clients := &consulClients{addr: srv.URL}
	h := New(nil, Options{MinGap: testGap, Consul: clients.client})
	for _, tc := range []struct {
		src  onchange.Source
		rule string
	}{
		{consulKey("app/config"), `key "app/config" { policy = "read" }`},
		{consulPrefix("app/"), `key_prefix "app/" { policy = "read" }`},
	} {
		st := next(t, ctx, tc.src.String(), h.Watch(ctx, tc.src))
		if !contains(st.Err, "denied key read") || !contains(st.Err, tc.rule) {
			t.Errorf("%s: %v, want a denial naming %s", tc.src, st.Err, tc.rule)
		}
	}
}

// A hub without Consul says so for a Consul source, and keeps watching Nomad.
func TestNoConsul(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(testContext(t))
	h := New(nil, Options{})
	ch := h.Watch(ctx, consulKey("app/config"))
	if st := next(t, ctx, "the State", ch); !contains(st.Err, "no Consul is configured") {
		t.Errorf("without Consul: %+v", st)
	}
	cancel()
	if _, open := <-ch; open {
		t.Error("the channel stayed open after ctx ended")
	}
}

// A source of no known kind is an error, not a Consul query.
func TestUnknownKind(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	h := New(nil, Options{Consul: (&consulClients{addr: simtest.ClosedAddr(t)}).client})
	st := next(t, ctx, "the State", h.Watch(ctx, onchange.Source{Kind: "vault-secret", Path: "x"}))
	if !contains(st.Err, `unknown kind of source "vault-secret"`) {
		t.Errorf("an unknown kind gave %+v", st)
	}
}
