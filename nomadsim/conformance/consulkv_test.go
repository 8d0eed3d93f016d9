package conformance

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
)

func TestConsulKVReadShapes(t *testing.T) {
	forEachConsul(t, func(t *testing.T, tg *consulTarget) {
		key := tg.key(t, "config")
		p := tg.put(t, key, "hello", 42)

		r := tg.do(t, "GET", "/v1/kv/"+key, "")
		if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET %s: %d %q, want 200 JSON", key, r.status, r.header.Get("Content-Type"))
		}
		for h, want := range map[string]string{"X-Consul-Knownleader": "true", "X-Consul-Lastcontact": "0",
			"X-Consul-Default-Acl-Policy": "allow", "X-Consul-Query-Backend": "blocking-query",
			"X-Consul-Effective-Consistency": ""} {
			if got := r.header.Get(h); got != want {
				t.Errorf("GET %s: header %s %q, want %q", key, h, got, want)
			}
		}
		if got := consulIndex(t, r); got != p.ModifyIndex {
			t.Errorf("X-Consul-Index %d, want the key's ModifyIndex %d", got, p.ModifyIndex)
		}
		es := entries(t, r)
		if len(es) != 1 || es[0]["Key"] != key || es[0]["Value"] != base64.StdEncoding.EncodeToString([]byte("hello")) ||
			es[0]["Flags"] != 42.0 || es[0]["LockIndex"] != 0.0 || es[0]["CreateIndex"] != es[0]["ModifyIndex"] {
			t.Errorf("entries %v: want one, the key with base64 hello, flags 42, LockIndex 0, created at its ModifyIndex", es)
		}

		raw := tg.do(t, "GET", "/v1/kv/"+key+"?raw", "")
		if raw.status != 200 || string(raw.body) != "hello" || consulIndex(t, raw) != p.ModifyIndex {
			t.Errorf("?raw: %d %q, want 200 hello", raw.status, raw.body)
		}
		for h, want := range map[string]string{"Content-Type": "text/plain", "X-Content-Type-Options": "nosniff",
			"Content-Security-Policy": "sandbox", "Content-Length": "5"} {
			if got := raw.header.Get(h); got != want {
				t.Errorf("?raw: header %s %q, want %q", h, got, want)
			}
		}

		missing := tg.do(t, "GET", "/v1/kv/"+tg.key(t, "missing"), "")
		if missing.status != 404 || len(missing.body) != 0 || missing.header.Get("Content-Type") != "" ||
			missing.header.Get("X-Consul-Knownleader") != "true" || missing.header.Get("X-Consul-Query-Backend") != "blocking-query" {
			t.Errorf("missing key: %d %q Content-Type %q, want a bare 404 with query headers", missing.status, missing.body, missing.header.Get("Content-Type"))
		}
		if consulIndex(t, missing) < p.ModifyIndex {
			t.Errorf("missing key's index %d is below the last write's %d: want the KV table's index", consulIndex(t, missing), p.ModifyIndex)
		}

		// An empty body stores no value: it reads back as null.
		empty := tg.key(t, "empty")
		if r := tg.do(t, "PUT", "/v1/kv/"+empty, ""); r.status != 200 || string(r.body) != "true" {
			t.Fatalf("PUT empty: %d %q", r.status, r.body)
		}
		if es := entries(t, tg.do(t, "GET", "/v1/kv/"+empty, "")); len(es) != 1 || es[0]["Value"] != nil {
			t.Errorf("empty value read back as %v, want null", es)
		}
		if r := tg.do(t, "GET", "/v1/kv/"+empty+"?raw", ""); r.status != 200 || len(r.body) != 0 ||
			r.header.Get("Content-Length") != "0" || r.header.Get("Content-Type") != "text/plain" {
			t.Errorf("?raw of an empty value: %d %q %v, want 200, empty, text/plain", r.status, r.body, r.header)
		}
	})
}

func TestConsulKVRecurseAndKeys(t *testing.T) {
	forEachConsul(t, func(t *testing.T, tg *consulTarget) {
		dir := tg.key(t, "")
		var highest uint64
		for _, k := range []string{"b/d", "a", "b/c", "e/"} {
			highest = max(highest, tg.put(t, dir+k, k, 0).ModifyIndex)
		}
		tg.put(t, dir[:len(dir)-1]+"x", "outside", 0) // shares the prefix without its slash

		r := tg.do(t, "GET", "/v1/kv/"+dir+"?recurse", "")
		var keys []string
		for _, e := range entries(t, r) {
			keys = append(keys, e["Key"].(string))
		}
		if want := []string{dir + "a", dir + "b/c", dir + "b/d", dir + "e/"}; !slices.Equal(keys, want) {
			t.Errorf("?recurse keys %q, want %q in key order", keys, want)
		}
		if got := consulIndex(t, r); got != highest {
			t.Errorf("?recurse index %d, want the highest ModifyIndex under the prefix %d", got, highest)
		}

		for query, want := range map[string][]string{
			"":                          {dir + "a", dir + "b/c", dir + "b/d", dir + "e/"},
			"&separator=%2F":            {dir + "a", dir + "b/", dir + "e/"},
			"&seperator=%2F":            {dir + "a", dir + "b/", dir + "e/"}, // Consul's historic spelling
			"&separator=b%2F":           {dir + "a", dir + "b/", dir + "e/"},
			"&separator=&seperator=%2F": {dir + "a", dir + "b/c", dir + "b/d", dir + "e/"}, // the right spelling wins
		} {
			path := "/v1/kv/" + dir + "?keys" + query
			r := tg.do(t, "GET", path, "")
			var got []string
			if err := json.Unmarshal(r.body, &got); err != nil || r.status != 200 || !slices.Equal(got, want) {
				t.Errorf("GET %s: %d %s, want %q", path, r.status, r.body, want)
			}
			if consulIndex(t, r) != highest {
				t.Errorf("GET %s: index %d, want %d", path, consulIndex(t, r), highest)
			}
		}
		// ?pretty indents by four spaces and ends in a newline.
		pretty := tg.do(t, "GET", "/v1/kv/"+dir+"?keys&separator=%2F&pretty", "")
		if want, _ := json.MarshalIndent([]string{dir + "a", dir + "b/", dir + "e/"}, "", "    "); string(pretty.body) != string(want)+"\n" {
			t.Errorf("?pretty: %q, want %q and a newline", pretty.body, want)
		}
		// The api client's Keys reads the same.
		if got, _, err := tg.api.KV().Keys(dir, "/", nil); err != nil || !slices.Equal(got, []string{dir + "a", dir + "b/", dir + "e/"}) {
			t.Errorf("api Keys: %q %v", got, err)
		}

		none := tg.key(t, "none/")
		for _, q := range []string{"?recurse", "?keys"} {
			if r := tg.do(t, "GET", "/v1/kv/"+none+q, ""); r.status != 404 || len(r.body) != 0 {
				t.Errorf("%s of an empty prefix: %d %q, want a bare 404", q, r.status, r.body)
			}
		}
	})
}

func TestConsulKVWrites(t *testing.T) {
	forEachConsul(t, func(t *testing.T, tg *consulTarget) {
		key := tg.key(t, "k")
		put := func(query, body string) string {
			t.Helper()
			r := tg.do(t, "PUT", "/v1/kv/"+key+query, body)
			if r.status != 200 || r.header.Get("Content-Type") != "application/json" || r.header.Get("X-Consul-Index") != "" {
				t.Fatalf("PUT %s%s: %d %q %v, want 200 JSON without query headers", key, query, r.status, r.body, r.header)
			}
			return string(r.body)
		}
		if got := put("?cas=0", "v1"); got != "true" {
			t.Fatalf("create-only put of a new key: %s, want true", got)
		}
		if got := put("?cas=0", "v2"); got != "false" {
			t.Fatalf("create-only put of an existing key: %s, want false", got)
		}
		created, _, _ := tg.api.KV().Get(key, nil)
		p := tg.put(t, key, "v1", 0) // the same value and flags: no change
		if created == nil || p.ModifyIndex != created.ModifyIndex {
			t.Fatalf("rewriting the same value: %+v, then %+v; want the ModifyIndex kept", created, p)
		}
		if got := put("?cas="+strconv.FormatUint(p.ModifyIndex+1000, 10), "v2"); got != "false" {
			t.Errorf("put with a wrong cas: %s, want false", got)
		}
		if got := put("?flags=7&cas="+strconv.FormatUint(p.ModifyIndex, 10), "v2"); got != "true" {
			t.Errorf("put with the current cas: %s, want true", got)
		}
		p2, _, _ := tg.api.KV().Get(key, nil)
		if string(p2.Value) != "v2" || p2.Flags != 7 || p2.CreateIndex != p.CreateIndex || p2.ModifyIndex <= p.ModifyIndex {
			t.Errorf("after cas put %+v (before %+v): want v2, flags 7, same CreateIndex, higher ModifyIndex", p2, p)
		}

		if got := put("", "v3"); got != "true" {
			t.Fatalf("plain put: %s", got)
		}
		if p3, _, _ := tg.api.KV().Get(key, nil); p3.Flags != 0 || p3.CreateIndex != p.CreateIndex {
			t.Errorf("a put without ?flags: %+v, want flags back to 0", p3)
		}
		p2, _, _ = tg.api.KV().Get(key, nil)

		del := func(query string) string {
			t.Helper()
			r := tg.do(t, "DELETE", "/v1/kv/"+key+query, "")
			if r.status != 200 {
				t.Fatalf("DELETE %s%s: %d %q", key, query, r.status, r.body)
			}
			return string(r.body)
		}
		if got := del("?cas=" + strconv.FormatUint(p.ModifyIndex, 10)); got != "false" {
			t.Errorf("delete with a stale cas: %s, want false", got)
		}
		if got := del("?cas=" + strconv.FormatUint(p2.ModifyIndex, 10)); got != "true" {
			t.Errorf("delete with the current cas: %s, want true", got)
		}
		if got := del("?cas=1"); got != "true" {
			t.Errorf("delete-cas of a missing key: %s, want true (Consul counts it deleted)", got)
		}
		if got := del(""); got != "true" {
			t.Errorf("delete of a missing key: %s, want true", got)
		}

		dir := tg.key(t, "tree/")
		tg.put(t, dir+"a", "1", 0)
		tg.put(t, dir+"b/c", "2", 0)
		if ok, err := tg.api.KV().DeleteTree(dir, nil); err != nil || ok == nil {
			t.Fatalf("delete tree: %v", err)
		}
		if pairs, _, err := tg.api.KV().List(dir, nil); err != nil || len(pairs) != 0 {
			t.Errorf("after delete tree: %v %v", pairs, err)
		}
	})
}

// TestConsulKVIndexRules checks Consul's indexes for what is not there: a deleted key's
// prefix keeps the index of its delete (a tombstone), which later writes elsewhere do not
// move, and a missing key reports the KV table's index.
func TestConsulKVIndexRules(t *testing.T) {
	forEachConsul(t, func(t *testing.T, tg *consulTarget) {
		dir := tg.key(t, "")
		p := tg.put(t, dir+"k", "v", 0)
		if _, err := tg.api.KV().Delete(dir+"k", nil); err != nil {
			t.Fatal(err)
		}
		r := tg.do(t, "GET", "/v1/kv/"+dir+"?recurse", "")
		deleted := consulIndex(t, r)
		if r.status != 404 || deleted <= p.ModifyIndex {
			t.Fatalf("prefix after its only key's delete: %d at %d, want 404 above the key's %d", r.status, deleted, p.ModifyIndex)
		}
		other := tg.put(t, dir[:len(dir)-1]+"-elsewhere", "v", 0) // outside the prefix
		if r := tg.do(t, "GET", "/v1/kv/"+dir+"?keys", ""); r.status != 404 || consulIndex(t, r) != deleted {
			t.Errorf("?keys of the emptied prefix after a write elsewhere: %d at %d, want 404 at the delete's %d", r.status, consulIndex(t, r), deleted)
		}
		if r := tg.do(t, "GET", "/v1/kv/"+dir+"k", ""); r.status != 404 || consulIndex(t, r) < other.ModifyIndex {
			t.Errorf("deleted key: %d at %d, want 404 at the table's index (at least %d)", r.status, consulIndex(t, r), other.ModifyIndex)
		}
	})
}

func TestConsulKVBlocking(t *testing.T) {
	forEachConsul(t, func(t *testing.T, tg *consulTarget) {
		key := tg.key(t, "k")
		p := tg.put(t, key, "old", 0)

		// Nothing changes: the query waits out its wait and answers the key's index; so
		// does one from an index above the current one. Elapsed time is checked only from
		// below, which a slow machine cannot break.
		const wait = time.Second
		for _, from := range []uint64{p.ModifyIndex, p.ModifyIndex + 1_000_000} {
			start := time.Now()
			r := tg.do(t, "GET", fmt.Sprintf("/v1/kv/%s?index=%d&wait=%s", key, from, wait), "")
			if elapsed := time.Since(start); elapsed < wait {
				t.Errorf("quiet blocking query from %d answered after %v, before its wait of %v", from, elapsed, wait)
			}
			if r.status != 200 || consulIndex(t, r) != p.ModifyIndex {
				t.Errorf("quiet blocking query from %d: %d at %d, want 200 at %d", from, r.status, consulIndex(t, r), p.ModifyIndex)
			}
		}
		if r := tg.do(t, "GET", "/v1/kv/"+key+"?index=0&wait=10m", ""); r.status != 200 || consulIndex(t, r) != p.ModifyIndex {
			t.Errorf("index 0: %d at %d, want an answer at once", r.status, consulIndex(t, r))
		}

		// A change wakes it (or, sent after the change, it answers at once) with the new value.
		got := make(chan *consulapi.KVPair, 1)
		go func() {
			q := (&consulapi.QueryOptions{WaitIndex: p.ModifyIndex, WaitTime: time.Minute}).WithContext(t.Context())
			np, _, err := tg.api.KV().Get(key, q)
			if err != nil {
				t.Error(err)
			}
			got <- np
		}()
		tg.put(t, key, "new", 0)
		if np := <-got; np == nil || string(np.Value) != "new" || np.ModifyIndex <= p.ModifyIndex {
			t.Errorf("blocking get after a change: %+v, want the new value above %d", np, p.ModifyIndex)
		}

		// A prefix's query answers when a key under it changes, at that key's new index.
		dir := tg.key(t, "dir/")
		tg.put(t, dir+"a", "1", 0)
		list := tg.do(t, "GET", "/v1/kv/"+dir+"?recurse", "")
		listed := make(chan rawResponse, 1)
		go func() {
			r, err := tg.request(t.Context(), "GET", fmt.Sprintf("/v1/kv/%s?recurse&index=%d&wait=1m", dir, consulIndex(t, list)), "")
			if err != nil {
				t.Error(err)
			}
			listed <- r
		}()
		b := tg.put(t, dir+"b", "2", 0)
		if r := <-listed; r.status != 200 || len(entries(t, r)) != 2 || consulIndex(t, r) != b.ModifyIndex {
			t.Errorf("blocking ?recurse after a put under the prefix: %d at %d %q, want both keys at %d", r.status, consulIndex(t, r), r.body, b.ModifyIndex)
		}

		// A missing key's query answers when the key appears.
		later := tg.key(t, "later")
		miss := tg.do(t, "GET", "/v1/kv/"+later, "")
		answer := make(chan rawResponse, 1)
		go func() {
			r, err := tg.request(t.Context(), "GET", fmt.Sprintf("/v1/kv/%s?index=%d&wait=1m", later, consulIndex(t, miss)), "")
			if err != nil {
				t.Error(err)
			}
			answer <- r
		}()
		tg.put(t, later, "here", 0)
		if r := <-answer; r.status != 200 || len(entries(t, r)) != 1 {
			t.Errorf("blocking query on a missing key after its put: %d %q, want 200 and the key", r.status, r.body)
		}
	})
}

// TestConsulKVMissingKeyIgnoresOtherWrites checks Consul's rule for a blocking query on a
// missing key: writes to other keys do not answer it, only the key's appearance or the
// end of its wait. A query that reaches the agent after the other write answers at once
// (the index moved): then the case tries again, a few times.
func TestConsulKVMissingKeyIgnoresOtherWrites(t *testing.T) {
	forEachConsul(t, func(t *testing.T, tg *consulTarget) {
		const wait = 3 * time.Second
		for attempt := range 3 {
			missing := tg.key(t, "missing"+strconv.Itoa(attempt))
			from := consulIndex(t, tg.do(t, "GET", "/v1/kv/"+missing, ""))
			answer := make(chan rawResponse, 1)
			start := time.Now()
			go func() {
				r, err := tg.request(t.Context(), "GET", fmt.Sprintf("/v1/kv/%s?index=%d&wait=%s", missing, from, wait), "")
				if err != nil {
					t.Error(err)
				}
				answer <- r
			}()
			time.Sleep(300 * time.Millisecond) // lets the query reach the agent first, mostly
			tg.put(t, tg.key(t, "other"+strconv.Itoa(attempt)), "v", 0)
			r := <-answer
			if r.status != 404 {
				t.Fatalf("query on a missing key: %d %q, want 404", r.status, r.body)
			}
			if time.Since(start) >= wait {
				return // it waited out the other write
			}
			t.Logf("attempt %d: the query answered before its wait (it reached the agent after the other write?)", attempt)
		}
		t.Errorf("a blocking query on a missing key answered early in every attempt: want it to ignore writes to other keys")
	})
}

func TestConsulKVErrors(t *testing.T) {
	forEachConsul(t, func(t *testing.T, tg *consulTarget) {
		key := tg.key(t, "k")
		session := "8d2b4a4e-1f0c-4b7e-9c55-3f1e5d3b2a10" // no such session exists
		tests := []struct {
			method, path string
			code         int
			body         string
		}{
			{"GET", "/v1/kv/", 400, "Missing key name"},
			{"PUT", "/v1/kv/", 400, "Missing key name"},
			{"DELETE", "/v1/kv/", 400, "Missing key name"},
			{"GET", "/v1/kv/" + key + "?dc=nowhere", 500, "No path to datacenter"},
			{"GET", "/v1/kv/" + key + "?keys&datacenter=nowhere", 500, "No path to datacenter"},
			{"PUT", "/v1/kv/" + key + "?dc=nowhere", 500, "No path to datacenter"},
			{"DELETE", "/v1/kv/" + key + "?dc=nowhere", 500, "No path to datacenter"},
			{"GET", "/v1/kv/" + key + "?wait=soon", 400, "Invalid wait time"},
			{"GET", "/v1/kv/" + key + "?index=x", 400, "Invalid index"},
			{"GET", "/v1/kv/" + key + "?stale&consistent", 400, "Cannot specify ?stale with ?consistent, conflicting semantics."},
			{"PUT", "/v1/kv/" + key + "?flags=x", 500, `strconv.ParseUint: parsing "x": invalid syntax`},
			{"PUT", "/v1/kv/" + key + "?cas=-1", 500, `strconv.ParseUint: parsing "-1": invalid syntax`},
			{"PUT", "/v1/kv/" + key + "?cas=1&acquire=" + session, 400, "Conflicting flags: acquire=" + session + "&cas=1\n"},
			{"DELETE", "/v1/kv/" + key + "?cas=1&recurse", 400, "Conflicting flags: cas=1&recurse=\n"},
			{"PUT", "/v1/kv/" + key + "?acquire=" + session, 500, `raft apply failed: invalid session "` + session + `"`},
			{"POST", "/v1/kv/" + key, 405, "method POST not allowed"},
			{"GET", "/v1/kv/" + key + "?ns=team", 400, `Invalid query parameter: "ns" - Namespaces are a Consul Enterprise feature`},
			{"GET", "/v1/kv/?keys&partition=p", 400, `Invalid query parameter: "partition" - Partitions are a Consul Enterprise feature`},
			{"PUT", "/v1/kv/?ns=team", 400, `Invalid query parameter: "ns" - Namespaces are a Consul Enterprise feature`},
			{"DELETE", "/v1/kv/" + key + "?recurse&cas=1&partition=p", 400, `Invalid query parameter: "partition" - Partitions are a Consul Enterprise feature`},
		}
		for _, tc := range tests {
			r := tg.do(t, tc.method, tc.path, "")
			if r.status != tc.code || string(r.body) != tc.body || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("%s %s: %d %q (%s), want %d %q as plain text", tc.method, tc.path, r.status, r.body, r.header.Get("Content-Type"), tc.code, tc.body)
			}
			if tc.code == 405 && r.header.Get("Allow") != "OPTIONS,GET,PUT,DELETE" {
				t.Errorf("405 Allow %q", r.header.Get("Allow"))
			}
		}
		const limit = 512 * 1024
		big := tg.do(t, "PUT", "/v1/kv/"+key, strings.Repeat("x", limit+1))
		wantBig := fmt.Sprintf("Request body(%d bytes) too large, max size: %d bytes. See https://www.consul.io/docs/agent/config/config-files#kv_max_value_size.", limit+1, limit)
		if big.status != 413 || string(big.body) != wantBig {
			t.Errorf("PUT of %d bytes: %d %q, want 413 %q", limit+1, big.status, big.body, wantBig)
		}
		if r := tg.do(t, "PUT", "/v1/kv/"+key, strings.Repeat("x", limit)); r.status != 200 || string(r.body) != "true" {
			t.Errorf("PUT of %d bytes (the limit): %d %.100q, want 200 true", limit, r.status, r.body)
		}
		if r := tg.do(t, "PUT", "/v1/kv/"+key+"?release="+session, ""); r.status != 200 || string(r.body) != "false" {
			t.Errorf("release of a lock nobody holds: %d %q, want 200 false", r.status, r.body)
		}
		// Paths go through net/http's ServeMux: unclean ones are redirected to their clean
		// form (so no key with "//" can be reached), /v1/kv to /v1/kv/.
		for path, want := range map[string]string{"/v1/kv/" + key + "//x": "/v1/kv/" + key + "/x", "/v1/kv": "/v1/kv/"} {
			if r := tg.do(t, "PUT", path, ""); r.status != 307 || r.header.Get("Location") != want {
				t.Errorf("PUT %s: %d Location %q, want 307 to %s", path, r.status, r.header.Get("Location"), want)
			}
		}
		if r := tg.do(t, "OPTIONS", "/v1/kv/"+key, ""); r.status != 200 || r.header.Get("Allow") != "OPTIONS,GET,PUT,DELETE" || len(r.body) != 0 {
			t.Errorf("OPTIONS: %d %q Allow %q", r.status, r.body, r.header.Get("Allow"))
		}
	})
}
