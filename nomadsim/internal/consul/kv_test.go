package consul

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func TestKVPutGetDelete(t *testing.T) {
	_, cl := newConsul(t)
	kv := cl.KV()
	if _, err := kv.Put(&api.KVPair{Key: "app/config", Value: []byte("v1"), Flags: 42}, nil); err != nil {
		t.Fatal(err)
	}
	p, qm, err := kv.Get("app/config", nil)
	if err != nil || p == nil {
		t.Fatalf("get: %+v %v", p, err)
	}
	if string(p.Value) != "v1" || p.Flags != 42 || p.CreateIndex != p.ModifyIndex || qm.LastIndex != p.ModifyIndex || !qm.KnownLeader {
		t.Fatalf("entry %+v meta %+v: want v1, flags 42, created at its modify index, reported as the index", p, qm)
	}

	// Writing the same value and flags again is no change: Consul keeps the ModifyIndex.
	if _, err := kv.Put(&api.KVPair{Key: "app/config", Value: []byte("v1"), Flags: 42}, nil); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := kv.Get("app/config", nil); again.ModifyIndex != p.ModifyIndex {
		t.Fatalf("unchanged put moved ModifyIndex %d -> %d", p.ModifyIndex, again.ModifyIndex)
	}
	if _, err := kv.Put(&api.KVPair{Key: "app/config", Value: []byte("v2")}, nil); err != nil {
		t.Fatal(err)
	}
	changed, _, _ := kv.Get("app/config", nil)
	if changed.ModifyIndex <= p.ModifyIndex || changed.CreateIndex != p.CreateIndex || changed.Flags != 0 {
		t.Fatalf("after a change %+v, before %+v: want a higher ModifyIndex, the same CreateIndex, flags reset", changed, p)
	}

	if _, err := kv.Delete("app/config", nil); err != nil {
		t.Fatal(err)
	}
	gone, qm, err := kv.Get("app/config", nil)
	if err != nil || gone != nil || qm.LastIndex <= changed.ModifyIndex {
		t.Fatalf("after delete: %+v meta %+v err %v; want not found at the delete's index", gone, qm, err)
	}
}

func TestKVCheckAndSet(t *testing.T) {
	_, cl := newConsul(t)
	kv := cl.KV()
	put := func(value string, cas uint64) bool {
		t.Helper()
		ok, _, err := kv.CAS(&api.KVPair{Key: "k", Value: []byte(value), ModifyIndex: cas}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !put("a", 0) {
		t.Fatal("cas 0 on a missing key (create only) failed")
	}
	if put("b", 0) {
		t.Fatal("cas 0 on an existing key succeeded")
	}
	p, _, _ := kv.Get("k", nil)
	if put("b", p.ModifyIndex+100) {
		t.Fatal("cas with a wrong index succeeded")
	}
	if !put("b", p.ModifyIndex) {
		t.Fatal("cas with the current index failed")
	}
	del := func(cas uint64) bool {
		t.Helper()
		ok, _, err := kv.DeleteCAS(&api.KVPair{Key: "k", ModifyIndex: cas}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if del(p.ModifyIndex) {
		t.Fatal("delete-cas with a stale index succeeded")
	}
	cur, _, _ := kv.Get("k", nil)
	if !del(cur.ModifyIndex) {
		t.Fatal("delete-cas with the current index failed")
	}
	if !del(12345) {
		t.Fatal("delete-cas of a missing key: Consul answers true")
	}
}

func TestKVListIndexes(t *testing.T) {
	c, cl := newConsul(t)
	kv := cl.KV()
	for _, k := range []string{"p/a", "p/b/c", "p/b/d", "pq", "other"} {
		c.KVPut(k, []byte(k))
	}
	pairs, qm, err := kv.List("p/", nil)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	var highest uint64
	for _, p := range pairs {
		keys = append(keys, p.Key)
		highest = max(highest, p.ModifyIndex)
	}
	if !slices.Equal(keys, []string{"p/a", "p/b/c", "p/b/d"}) || qm.LastIndex != highest {
		t.Fatalf("list p/: %v at %d; want the three keys at their highest ModifyIndex %d", keys, qm.LastIndex, highest)
	}

	// A delete under the prefix leaves a tombstone: the prefix reports the delete's index,
	// and writes elsewhere do not move it.
	if _, err := kv.DeleteTree("p/b/", nil); err != nil {
		t.Fatal(err)
	}
	_, afterDelete, _ := kv.List("p/", nil)
	c.KVPut("other", []byte("changed"))
	_, afterOther, _ := kv.List("p/", nil)
	if afterDelete.LastIndex <= highest || afterOther.LastIndex != afterDelete.LastIndex {
		t.Fatalf("prefix index %d after the delete, %d after a write elsewhere; want above %d, then unchanged", afterDelete.LastIndex, afterOther.LastIndex, highest)
	}
	// A prefix with neither keys nor tombstones reports the table's index.
	_, none, _ := kv.List("nothing/", nil)
	_, root, _ := kv.List("", nil)
	if none.LastIndex != root.LastIndex {
		t.Fatalf("empty prefix index %d, table index %d: want equal", none.LastIndex, root.LastIndex)
	}
}

func TestKeyList(t *testing.T) {
	entries := []*kvEntry{{Key: "p/a"}, {Key: "p/b/c"}, {Key: "p/b/d"}, {Key: "p/e/"}, {Key: "pq"}}
	tests := []struct {
		name, prefix, sep string
		want              []string
	}{
		{"no separator", "p", "", []string{"p/a", "p/b/c", "p/b/d", "p/e/", "pq"}},
		{"cut after the prefix", "p/", "/", []string{"p/a", "p/b/", "p/e/"}},
		{"separator in the prefix does not count", "p", "/", []string{"p/", "pq"}},
		{"longer separator", "p/", "b/", []string{"p/a", "p/b/", "p/e/"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in []*kvEntry
			for _, e := range entries {
				if strings.HasPrefix(e.Key, tc.prefix) {
					in = append(in, e)
				}
			}
			if got := keyList(in, tc.prefix, tc.sep); !slices.Equal(got, tc.want) {
				t.Fatalf("keyList(%q, %q) = %q, want %q", tc.prefix, tc.sep, got, tc.want)
			}
		})
	}
}

func TestKVBlockingGetWakesOnChange(t *testing.T) {
	c, cl := newConsul(t)
	c.KVPut("k", []byte("old"))
	p, _, _ := cl.KV().Get("k", nil)
	got := make(chan *api.KVPair, 1)
	go func() {
		q := (&api.QueryOptions{WaitIndex: p.ModifyIndex, WaitTime: time.Minute}).WithContext(t.Context())
		np, _, err := cl.KV().Get("k", q)
		if err != nil {
			t.Error(err)
		}
		got <- np
	}()
	c.KVPut("k", []byte("new"))
	np := <-got
	if np == nil || string(np.Value) != "new" || np.ModifyIndex <= p.ModifyIndex {
		t.Fatalf("blocking get answered %+v; want the new value above index %d", np, p.ModifyIndex)
	}
}

func TestKVBlockingWithoutChangeAnswersItsIndex(t *testing.T) {
	c, cl := newConsul(t)
	c.KVPut("k", []byte("v"))
	p, _, _ := cl.KV().Get("k", nil)
	const wait = 50 * time.Millisecond
	start := time.Now()
	// An index above the current one waits too, and answers the key's own index.
	for _, from := range []uint64{p.ModifyIndex, p.ModifyIndex + 1000} {
		_, qm, err := cl.KV().Get("k", &api.QueryOptions{WaitIndex: from, WaitTime: wait})
		if err != nil || qm.LastIndex != p.ModifyIndex {
			t.Fatalf("quiet blocking get from %d: index %d err %v; want %d", from, qm.LastIndex, err, p.ModifyIndex)
		}
	}
	if elapsed := time.Since(start); elapsed < 2*wait {
		t.Fatalf("two quiet blocking gets answered within %v, before their waits of %v", elapsed, wait)
	}
}

// TestKVBlockMissingKeyWaitsForTheKey follows Consul's rule for a missing key: once a run
// has seen it missing twice, only the key's appearance (or the wait's end) answers, not
// other writes. The read function drives the store's index by hand.
func TestKVBlockMissingKeyWaitsForTheKey(t *testing.T) {
	c := NewCatalog("node-1")
	s := c.kv
	reads := make(chan kvRead)
	next := make(chan kvRead)
	read := func() kvRead {
		r := <-next
		reads <- r
		return r
	}
	done := make(chan kvRead, 1)
	go func() {
		r, err := s.block(t.Context(), simhttp.Query{MinIndex: 5, Wait: time.Minute}, read)
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	// The first run finds the key missing at the query's index: it waits. Each later run
	// follows a write; an answer before the key appears leaves a run without a reader.
	for i, r := range []kvRead{
		{index: 5, notFound: true},
		{index: 6, notFound: true},                                  // another key changed: the bar moves to 6
		{index: 7, notFound: true},                                  // and to 7
		{index: 8, entries: []*kvEntry{{Key: "k", ModifyIndex: 8}}}, // the key appears
	} {
		if i > 0 {
			s.idx.Next()
		}
		select {
		case next <- r:
		case got := <-done:
			t.Fatalf("missing key answered %+v before run %d; want no answer until the key appears", got, i)
		}
		<-reads
	}
	if r := <-done; r.notFound || r.index != 8 {
		t.Fatalf("answer %+v; want the key at index 8", r)
	}
}

func TestKVHTTPErrors(t *testing.T) {
	c := NewCatalog("node-1")
	tests := []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/v1/kv/", 400, "Missing key name"},
		{"PUT", "/v1/kv/", 400, "Missing key name"},
		{"DELETE", "/v1/kv/", 400, "Missing key name"},
		{"GET", "/v1/kv/k?dc=nowhere", 500, "No path to datacenter"},
		{"PUT", "/v1/kv/k?dc=nowhere", 500, "No path to datacenter"},
		{"GET", "/v1/kv/k?wait=soon", 400, "Invalid wait time"},
		{"GET", "/v1/kv/k?index=x", 400, "Invalid index"},
		{"PUT", "/v1/kv/k?flags=x", 500, `strconv.ParseUint: parsing "x": invalid syntax`},
		{"PUT", "/v1/kv/k?cas=1&acquire=s", 400, "Conflicting flags: acquire=s&cas=1\n"},
		{"DELETE", "/v1/kv/k?cas=1&recurse", 400, "Conflicting flags: cas=1&recurse=\n"},
		{"PUT", "/v1/kv/k?acquire=s1", 500, `raft apply failed: invalid session "s1"`},
		{"POST", "/v1/kv/k", 405, "method POST not allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			w := serve(c, tc.method, tc.path, "")
			if w.StatusCode != tc.code || w.Header.Get("Content-Type") != "text/plain; charset=utf-8" || body(t, w) != tc.body {
				t.Fatalf("%d %q %q; want %d %q", w.StatusCode, w.Header.Get("Content-Type"), body(t, w), tc.code, tc.body)
			}
		})
	}
}

func TestKVHTTPShapes(t *testing.T) {
	c := NewCatalog("node-1")
	c.KVPut("k", []byte("hello"))
	if w := serve(c, "GET", "/v1/kv/k?raw", ""); body(t, w) != "hello" || w.Header.Get("Content-Type") != "text/plain" ||
		w.Header.Get("X-Content-Type-Options") != "nosniff" || w.Header.Get("X-Consul-Index") == "" {
		t.Fatalf("raw: %q %v", body(t, w), w.Header)
	}
	w := serve(c, "GET", "/v1/kv/missing", "")
	if w.StatusCode != 404 || body(t, w) != "" || w.Header.Get("X-Consul-Index") == "" || w.Header.Get("Content-Type") != "" {
		t.Fatalf("missing key: %d %q %v; want a bare 404 with query headers", w.StatusCode, body(t, w), w.Header)
	}
	if w := serve(c, "GET", "/v1/kv/?keys", ""); w.StatusCode != 200 || body(t, w) != `["k"]` {
		t.Fatalf("keys: %d %q", w.StatusCode, body(t, w))
	}
	if w := serve(c, "GET", "/v1/kv/nope/?keys", ""); w.StatusCode != 404 {
		t.Fatalf("keys of an empty prefix: %d, want 404", w.StatusCode)
	}
	if w := serve(c, "PUT", "/v1/kv/empty", ""); body(t, w) != "true" {
		t.Fatalf("put: %q", body(t, w))
	}
	if w := serve(c, "GET", "/v1/kv/empty", ""); !strings.Contains(body(t, w), `"Value":null`) {
		t.Fatalf("empty value: %s; want null, as Consul stores an empty body", body(t, w))
	}
	if w := serve(c, "OPTIONS", "/v1/kv/k", ""); w.StatusCode != 200 || w.Header.Get("Allow") != kvAllow {
		t.Fatalf("options: %d %v", w.StatusCode, w.Header)
	}
}

func serve(c *Catalog, method, path, reqBody string) *http.Response {
	r, _ := http.NewRequestWithContext(context.Background(), method, "http://consul"+path, strings.NewReader(reqBody))
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, r)
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	r.Body = io.NopCloser(strings.NewReader(string(b)))
	return string(b)
}

// TestKVWritesDoNotMoveHealthIndexes: KV writes take Raft indexes, as in Consul, but the
// health endpoints report their own tables' indexes, which KV writes leave alone.
func TestKVWritesDoNotMoveHealthIndexes(t *testing.T) {
	c, cl := newConsul(t)
	register(c)
	_, state, err := cl.Health().State("any", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, checks, err := cl.Health().Checks("web", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.KVPut("k", []byte("v"))
	_, state2, _ := cl.Health().State("any", nil)
	_, checks2, _ := cl.Health().Checks("web", nil)
	p, _, _ := cl.KV().Get("k", nil)
	if state2.LastIndex != state.LastIndex || checks2.LastIndex != checks.LastIndex || p.ModifyIndex <= state.LastIndex {
		t.Fatalf("after a KV write at %d: state index %d -> %d, checks index %d -> %d; want both unchanged",
			p.ModifyIndex, state.LastIndex, state2.LastIndex, checks.LastIndex, checks2.LastIndex)
	}
}
