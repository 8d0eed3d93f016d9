package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// varBody is a variable as written on the wire.
func varBody(path string, items map[string]string, lock string) string {
	b, _ := json.Marshal(map[string]any{"Path": path, "Items": items})
	if lock != "" {
		b, _ = json.Marshal(map[string]any{"Path": path, "Items": items, "Lock": json.RawMessage(lock)})
	}
	return string(b)
}

// decodeVar reads a variable from a raw answer, failing the test when it is not one.
func decodeVar(t *testing.T, what string, r rawResponse) *api.Variable {
	t.Helper()
	var v api.Variable
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("%s: body %.300q is not a variable: %v", what, r.body, err)
	}
	return &v
}

// deleteVarLater removes a variable when the test ends, whatever its state.
func (tg *target) deleteVarLater(t *testing.T, path string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = tg.api.Variables().Delete(path, (&api.WriteOptions{}).WithContext(ctx))
	})
}

func TestVariablesCheckAndSet(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		path := "nomad-restart/" + tg.id("cas")
		tg.deleteVarLater(t, path)
		put := func(query string, items map[string]string) rawResponse {
			return tg.do(t, "PUT", "/v1/var/"+path+query, tg.token, strings.NewReader(varBody(path, items, "")))
		}

		created := put("?cas=0", map[string]string{"k": "v1"})
		if created.status != 200 {
			t.Fatalf("create-only write of a new variable: %d %q, want 200", created.status, created.body)
		}
		v1 := decodeVar(t, "create", created)
		if v1.Items["k"] != "v1" || v1.ModifyIndex == 0 || v1.CreateIndex != v1.ModifyIndex || v1.Namespace != "default" || v1.Path != path {
			t.Errorf("created variable %+v", v1)
		}
		if got := headerIndex(t, created); got != v1.ModifyIndex {
			t.Errorf("create: X-Nomad-Index %d, variable ModifyIndex %d", got, v1.ModifyIndex)
		}

		conflicts := []struct {
			name, query string
		}{
			{"stale cas", "?cas=1"},
			{"cas=0 on an existing variable", "?cas=0"},
		}
		for _, c := range conflicts {
			r := put(c.query, map[string]string{"k": "other"})
			if r.status != 409 {
				t.Fatalf("%s: %d %q, want 409 with the current variable", c.name, r.status, r.body)
			}
			cur := decodeVar(t, c.name, r)
			if cur.ModifyIndex != v1.ModifyIndex || cur.Items["k"] != "v1" || cur.Path != path {
				t.Errorf("%s: conflict body %+v, want the current variable (ModifyIndex %d, k=v1)", c.name, cur, v1.ModifyIndex)
			}
		}

		// The official client turns the 409 into ErrCASConflict carrying the current variable.
		stale := &api.Variable{Path: path, Items: api.VariableItems{"k": "v2"}, ModifyIndex: 1}
		_, _, err := tg.api.Variables().CheckedUpdate(stale, nil)
		var conflict api.ErrCASConflict
		if !errors.As(err, &conflict) || conflict.Conflict == nil || conflict.Conflict.ModifyIndex != v1.ModifyIndex {
			t.Errorf("api client CheckedUpdate with a stale index: %v, want ErrCASConflict with the current variable", err)
		}

		ok := put(fmt.Sprintf("?cas=%d", v1.ModifyIndex), map[string]string{"k": "v2"})
		if ok.status != 200 {
			t.Fatalf("write with the current cas: %d %q", ok.status, ok.body)
		}
		v2 := decodeVar(t, "cas ok", ok)
		if v2.ModifyIndex <= v1.ModifyIndex || v2.CreateIndex != v1.CreateIndex || v2.Items["k"] != "v2" {
			t.Errorf("after a cas write: %+v (before: ModifyIndex %d)", v2, v1.ModifyIndex)
		}

		// Listing by prefix gives metadata only.
		list := tg.do(t, "GET", "/v1/vars?prefix="+path, tg.token, nil)
		var metas []map[string]any
		if err := json.Unmarshal(list.body, &metas); err != nil || list.status != 200 || len(metas) != 1 {
			t.Fatalf("list by prefix: %d %.300q (%v), want one entry", list.status, list.body, err)
		}
		if _, has := metas[0]["Items"]; has || metas[0]["Path"] != path {
			t.Errorf("list entry %v: want the path and no Items", metas[0])
		}

		// Delete with a stale cas: 409 and the current variable; with the right one: 204.
		del := tg.do(t, "DELETE", "/v1/var/"+path+"?cas=1", tg.token, nil)
		if del.status != 409 || decodeVar(t, "delete stale", del).ModifyIndex != v2.ModifyIndex {
			t.Errorf("delete with a stale cas: %d %.300q, want 409 with the current variable", del.status, del.body)
		}
		del = tg.do(t, "DELETE", fmt.Sprintf("/v1/var/%s?cas=%d", path, v2.ModifyIndex), tg.token, nil)
		if del.status != 204 || len(del.body) != 0 || del.header.Get("X-Nomad-Index") == "" {
			t.Errorf("delete with the current cas: %d %q (X-Nomad-Index %q), want 204, empty, with an index", del.status, del.body, del.header.Get("X-Nomad-Index"))
		}
		if r := tg.do(t, "GET", "/v1/var/"+path, tg.token, nil); r.status != 404 {
			t.Errorf("read after delete: %d %q, want 404", r.status, r.body)
		}
	})
}

func TestVariableLocks(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		path := "nomad-restart/" + tg.id("lock")
		tg.deleteVarLater(t, path)
		const lock = `{"TTL":"15s","LockDelay":"5s"}`
		op := func(query, body string) rawResponse {
			return tg.do(t, "PUT", "/v1/var/"+path+"?"+query, tg.token, strings.NewReader(body))
		}

		got := op("lock-acquire", varBody(path, map[string]string{"holder": "a"}, lock))
		if got.status != 200 {
			t.Fatalf("acquire a free lock: %d %q", got.status, got.body)
		}
		held := decodeVar(t, "acquire", got)
		if held.Lock == nil || held.Lock.ID == "" || held.Lock.TTL != "15s" || held.Lock.LockDelay != "5s" || held.Items["holder"] != "a" {
			t.Fatalf("acquired variable %+v lock %+v", held, held.Lock)
		}

		// Someone else: 409 with an empty variable (no items, no indexes, no lock).
		other := op("lock-acquire", varBody(path, map[string]string{"holder": "b"}, lock))
		if other.status != 409 {
			t.Fatalf("acquire a held lock: %d %q, want 409", other.status, other.body)
		}
		empty := decodeVar(t, "acquire held", other)
		if empty.Path != path || len(empty.Items) != 0 || empty.Lock != nil || empty.ModifyIndex != 0 {
			t.Errorf("acquire of a held lock answered %+v, want an empty variable naming the path", empty)
		}

		wrong := op("lock-renew", fmt.Sprintf(`{"Path":%q,"Lock":{"ID":"00000000-0000-0000-0000-000000000000"}}`, path))
		if wrong.status != 409 || string(wrong.body) != "attempting to modify locked variable" {
			t.Errorf("renew with a wrong lock ID: %d %q, want 409 %q", wrong.status, wrong.body, "attempting to modify locked variable")
		}
		renew := op("lock-renew", fmt.Sprintf(`{"Path":%q,"Lock":{"ID":%q}}`, path, held.Lock.ID))
		if renew.status != 200 {
			t.Errorf("renew with the holder's ID: %d %q", renew.status, renew.body)
		} else if v := decodeVar(t, "renew", renew); v.Lock == nil || v.Lock.ID != held.Lock.ID || len(v.Items) != 0 {
			t.Errorf("renew answered %+v, want the lock and no items", v)
		}

		release := op("lock-release", fmt.Sprintf(`{"Path":%q,"Lock":{"ID":%q}}`, path, held.Lock.ID))
		if release.status != 200 {
			t.Fatalf("release: %d %q", release.status, release.body)
		}
		if v := decodeVar(t, "release", release); v.Lock != nil || v.ModifyIndex <= held.ModifyIndex {
			t.Errorf("release answered %+v, want no lock and a new ModifyIndex", v)
		}

		// The lock delay applies when a lock expires, not after an explicit release.
		again := op("lock-acquire", varBody(path, map[string]string{"holder": "b"}, lock))
		if again.status != 200 {
			t.Fatalf("acquire right after a release: %d %q, want 200", again.status, again.body)
		}
		if v := decodeVar(t, "reacquire", again); v.Lock == nil || v.Lock.ID == held.Lock.ID || v.Items["holder"] != "b" {
			t.Errorf("re-acquired variable %+v, want a new lock ID and holder b", v)
		}

		// The api client sees a held lock as an unexpected 409.
		_, _, err := tg.api.Variables().AcquireLock(&api.Variable{Path: path, Lock: &api.VariableLock{TTL: "15s"}}, nil)
		var unexpected api.UnexpectedResponseError
		if !errors.As(err, &unexpected) || unexpected.StatusCode() != 409 {
			t.Errorf("api client AcquireLock of a held lock: %v, want an UnexpectedResponseError with status 409", err)
		}
	})
}

// A blocking listing of variables by prefix wakes on a write or a delete under its prefix,
// and not on an update elsewhere (Nomad's query watches the prefix's node in its state
// store's tree, then answers at the whole table's index): a watch of the variables that
// templates read is not woken by the product's own records. Timing is one-sided: a listing woken by the
// write elsewhere would return well before its wait; a slow machine only makes it later.
func TestVariablesBlockingListWakesOnItsPrefixOnly(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		prefix := "nomad-restart/" + tg.id("listwake") + "/"
		watched, elsewhere := prefix+"config", "nomad-restart/"+tg.id("elsewhere")
		tg.deleteVarLater(t, watched)
		tg.deleteVarLater(t, elsewhere)
		put := func(path, v string) {
			if r := tg.do(t, "PUT", "/v1/var/"+path, tg.token, strings.NewReader(varBody(path, map[string]string{"k": v}, ""))); r.status != 200 {
				t.Fatalf("writing %s: %d %q", path, r.status, r.body)
			}
		}
		put(watched, "1")
		// Created first: creating a key whose path shares a stretch with the prefix's
		// splits a node of Nomad's state tree, which wakes the watch once; an update does not.
		put(elsewhere, "0")
		first := tg.do(t, "GET", "/v1/vars?prefix="+prefix, tg.token, nil)
		index := headerIndex(t, first)

		type answer struct {
			r       rawResponse
			elapsed time.Duration
		}
		listAfter := func(index uint64, wait string) <-chan answer {
			out := make(chan answer, 1)
			go func() {
				start := time.Now()
				r := tg.do(t, "GET", fmt.Sprintf("/v1/vars?prefix=%s&index=%d&wait=%s", prefix, index, wait), tg.token, nil)
				out <- answer{r, time.Since(start)}
			}()
			return out
		}
		// A write elsewhere does not wake it.
		pending := listAfter(index, "2s")
		time.Sleep(300 * time.Millisecond)
		put(elsewhere, "x")
		if a := <-pending; a.elapsed < 1800*time.Millisecond {
			t.Errorf("a listing of %s woke after %s on a write of %s", prefix, a.elapsed, elsewhere)
		} else if got := headerIndex(t, a.r); got < index {
			t.Errorf("a listing that waited out its wait answered at index %d, before %d", got, index)
		}
		// A write under the prefix does, and so does a delete.
		index = headerIndex(t, tg.do(t, "GET", "/v1/vars?prefix="+prefix, tg.token, nil))
		pending = listAfter(index, "30s")
		time.Sleep(300 * time.Millisecond)
		put(watched, "2")
		if a := <-pending; a.elapsed > 20*time.Second || headerIndex(t, a.r) <= index {
			t.Errorf("a listing did not wake on a write under its prefix: %s, index %d", a.elapsed, headerIndex(t, a.r))
		}
		index = headerIndex(t, tg.do(t, "GET", "/v1/vars?prefix="+prefix, tg.token, nil))
		pending = listAfter(index, "30s")
		time.Sleep(300 * time.Millisecond)
		if r := tg.do(t, "DELETE", "/v1/var/"+watched, tg.token, nil); r.status != 200 && r.status != 204 {
			t.Fatalf("deleting %s: %d %q", watched, r.status, r.body)
		}
		a := <-pending
		if a.elapsed > 20*time.Second || headerIndex(t, a.r) <= index || strings.Contains(string(a.r.body), watched) {
			t.Errorf("a listing did not wake on a delete under its prefix: %s, index %d, body %.200q", a.elapsed, headerIndex(t, a.r), a.r.body)
		}
	})
}
