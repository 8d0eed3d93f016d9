package variables

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/testhttp"
)

const lockBody = `{"Items":{"holder":"%s"},"Lock":{"TTL":"15s","LockDelay":"5s"}}`

func acquire(t *testing.T, e *env, holder string) rawResponse {
	t.Helper()
	return e.do(t, http.MethodPut, "/v1/var/nomad-restart/lock?lock-acquire", strings.Replace(lockBody, "%s", holder, 1), "")
}

func decodeVar(t *testing.T, body string) varJSON {
	t.Helper()
	var v varJSON
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	return v
}

func TestLockLifecycle(t *testing.T) {
	e := newEnv(t, false)

	first := acquire(t, e, "a")
	if first.status != http.StatusOK {
		t.Fatalf("acquire: %d %s", first.status, first.body)
	}
	held := decodeVar(t, first.body)
	if held.Lock == nil || held.Lock.ID == "" || held.Lock.TTL != "15s" || held.Lock.LockDelay != "5s" || held.Items["holder"] != "a" {
		t.Fatalf("acquired: %+v", held)
	}
	// The TTL timer runs for twice the TTL, as on Nomad's leader.
	if p := e.timers.pending(); len(p) != 1 || p[0] != 30*time.Second {
		t.Fatalf("pending timers %v, want one of 30s", p)
	}

	t.Run("held by another", func(t *testing.T) {
		raw := acquire(t, e, "b")
		if raw.status != http.StatusConflict || raw.header.Get("X-Nomad-Index") != "" {
			t.Fatalf("second acquire: %d index %q", raw.status, raw.header.Get("X-Nomad-Index"))
		}
		v := decodeVar(t, raw.body)
		if v.Path != "nomad-restart/lock" || v.Namespace != "default" || v.CreateIndex != 0 || v.Items != nil || v.Lock != nil {
			t.Fatalf("conflict should be the empty variable: %s", raw.body)
		}
	})
	t.Run("plain write by another", func(t *testing.T) {
		raw := e.do(t, http.MethodPut, "/v1/var/nomad-restart/lock", `{"Items":{"x":"y"}}`, "")
		if raw.status != http.StatusConflict || decodeVar(t, raw.body).CreateIndex != 0 {
			t.Fatalf("write over a held lock: %d %s", raw.status, raw.body)
		}
	})
	t.Run("delete while held", func(t *testing.T) {
		raw := e.do(t, http.MethodDelete, "/v1/var/nomad-restart/lock", "", "")
		if raw.status != http.StatusConflict {
			t.Fatalf("delete of a locked variable: %d %s", raw.status, raw.body)
		}
	})
	t.Run("renew", func(t *testing.T) {
		raw := e.do(t, http.MethodPut, "/v1/var/nomad-restart/lock?lock-renew", `{"Lock":{"ID":"`+held.Lock.ID+`"}}`, "")
		if raw.status != http.StatusOK || raw.header.Get("X-Nomad-Index") != "" {
			t.Fatalf("renew: %d %s", raw.status, raw.body)
		}
		v := decodeVar(t, raw.body)
		if v.Lock == nil || v.Lock.ID != held.Lock.ID || v.Items != nil || v.ModifyIndex != held.ModifyIndex {
			t.Fatalf("renew answer: %s", raw.body)
		}
		if p := e.timers.pending(); len(p) != 1 {
			t.Fatalf("renew should replace the TTL timer: %v", p)
		}
	})
	t.Run("renew with a wrong ID", func(t *testing.T) {
		raw := e.do(t, http.MethodPut, "/v1/var/nomad-restart/lock?lock-renew", `{"Lock":{"ID":"00000000-0000-0000-0000-000000000000"}}`, "")
		if raw.status != http.StatusConflict || raw.body != "attempting to modify locked variable" {
			t.Fatalf("renew wrong ID: %d %q", raw.status, raw.body)
		}
	})
	t.Run("release with a wrong ID", func(t *testing.T) {
		raw := e.do(t, http.MethodPut, "/v1/var/nomad-restart/lock?lock-release", `{"Lock":{"ID":"00000000-0000-0000-0000-000000000000"}}`, "")
		if raw.status != http.StatusConflict || decodeVar(t, raw.body).CreateIndex != 0 {
			t.Fatalf("release wrong ID: %d %s", raw.status, raw.body)
		}
	})
	t.Run("release then immediate re-acquire", func(t *testing.T) {
		raw := e.do(t, http.MethodPut, "/v1/var/nomad-restart/lock?lock-release", `{"Lock":{"ID":"`+held.Lock.ID+`"}}`, "")
		if raw.status != http.StatusOK {
			t.Fatalf("release: %d %s", raw.status, raw.body)
		}
		rel := decodeVar(t, raw.body)
		if rel.Lock != nil || rel.Items != nil || rel.ModifyTime != held.ModifyTime || rel.ModifyIndex <= held.ModifyIndex {
			t.Fatalf("release answer: %s", raw.body)
		}
		if p := e.timers.pending(); len(p) != 0 {
			t.Fatalf("release should stop the TTL timer: %v", p)
		}
		again := acquire(t, e, "b")
		if again.status != http.StatusOK {
			t.Fatalf("re-acquire right after release: %d %s", again.status, again.body)
		}
		v := decodeVar(t, again.body)
		if v.Lock == nil || v.Lock.ID == held.Lock.ID || v.CreateIndex != held.CreateIndex {
			t.Fatalf("re-acquired: %s", again.body)
		}
	})
}

func TestLockExpiryThenDelay(t *testing.T) {
	e := newEnv(t, false)
	first := acquire(t, e, "a")
	if first.status != http.StatusOK {
		t.Fatalf("acquire: %d %s", first.status, first.body)
	}
	id := decodeVar(t, first.body).Lock.ID

	if d := e.timers.fireNext(t); d != 30*time.Second {
		t.Fatalf("TTL timer of %v", d)
	}
	// Expired but in its delay: not renewable, still held.
	raw := e.do(t, http.MethodPut, "/v1/var/nomad-restart/lock?lock-renew", `{"Lock":{"ID":"`+id+`"}}`, "")
	if raw.status != http.StatusConflict || raw.body != "attempting to modify locked variable" {
		t.Fatalf("renew during delay: %d %q", raw.status, raw.body)
	}
	if raw := acquire(t, e, "b"); raw.status != http.StatusConflict {
		t.Fatalf("acquire during delay: %d %s", raw.status, raw.body)
	}

	before := e.idx.Current()
	if d := e.timers.fireNext(t); d != 5*time.Second {
		t.Fatalf("delay timer of %v, want the lock delay", d)
	}
	v, _, err := e.client.Variables().Read("nomad-restart/lock", nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.Lock != nil || v.ModifyIndex != before+1 || v.Items["holder"] != "a" {
		t.Fatalf("after the delay the lock is gone, items kept: %+v", v)
	}
	if raw := acquire(t, e, "b"); raw.status != http.StatusOK {
		t.Fatalf("acquire after delay: %d %s", raw.status, raw.body)
	}
}

func TestLocksThroughClient(t *testing.T) {
	e := newEnv(t, false)
	l, err := e.client.Locks(api.WriteOptions{}, api.Variable{Path: "nomad-restart/l", Lock: &api.VariableLock{TTL: "10s"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := l.Acquire(ctx); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	other, err := e.client.Locks(api.WriteOptions{}, api.Variable{Path: "nomad-restart/l", Lock: &api.VariableLock{TTL: "10s"}}, api.LocksOptionWithMaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Acquire(ctx); err == nil || !strings.Contains(err.Error(), api.ErrLockConflict.Error()) {
		t.Fatalf("second acquire: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, err := other.Acquire(ctx); err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
}

func TestHolderWritesWithItsLockID(t *testing.T) {
	e := newEnv(t, false)
	id := decodeVar(t, acquire(t, e, "a").body).Lock.ID
	raw := e.do(t, http.MethodPut, "/v1/var/nomad-restart/lock", `{"Items":{"state":"x"},"Lock":{"ID":"`+id+`"}}`, "")
	if raw.status != http.StatusOK {
		t.Fatalf("holder write: %d %s", raw.status, raw.body)
	}
	if v := decodeVar(t, raw.body); v.Lock == nil || v.Lock.ID != id || v.Items["state"] != "x" {
		t.Fatalf("holder write answer: %s", raw.body)
	}
}

func TestExpireLockFromGoAPI(t *testing.T) {
	e := newEnv(t, false)
	id := decodeVar(t, acquire(t, e, "a").body).Lock.ID
	if !e.store.ExpireLock("default", "nomad-restart/lock") {
		t.Fatal("ExpireLock found no running lock")
	}
	if e.store.ExpireLock("default", "nomad-restart/lock") {
		t.Fatal("a lock in its delay has no TTL left to expire")
	}
	if _, held, _, _ := e.store.Lookup("default", "nomad-restart/lock"); held != id {
		t.Fatalf("held during the delay by %q, want %q", held, id)
	}
	if p := e.timers.pending(); len(p) != 1 || p[0] != 5*time.Second {
		t.Fatalf("pending %v, want only the 5s delay", p)
	}
	e.timers.fireNext(t)
	items, held, _, ok := e.store.Lookup("default", "nomad-restart/lock")
	if !ok || held != "" || items["holder"] != "a" {
		t.Fatalf("after the delay: %v %q %v", items, held, ok)
	}
}

// TestLockExpiresOnRealTimers runs expiry on real (scaled) timers: the lock must come free
// by itself, observed through a blocking query.
func TestLockExpiresOnRealTimers(t *testing.T) {
	idx := index.New(0)
	st := New(Config{Index: idx, ACL: acl.New(false, idx), AfterFunc: func(d time.Duration, f func()) func() bool {
		return time.AfterFunc(d/10000, f).Stop // 20s of TTL grace and 5s of delay in 2.5ms
	}})
	t.Cleanup(st.Close)
	srv := httptest.NewServer(st.Handler())
	t.Cleanup(srv.Close)
	c := testhttp.NomadClient(t, srv.URL, "")
	got, _, err := c.Variables().AcquireLock(&api.Variable{Path: "l/x", Lock: &api.VariableLock{TTL: "10s", LockDelay: "5s"}}, nil)
	if err != nil || got.Lock == nil {
		t.Fatalf("acquire: %+v %v", got, err)
	}
	wait := got.ModifyIndex
	for {
		v, qm, err := c.Variables().Read("l/x", &api.QueryOptions{WaitIndex: wait, WaitTime: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if v.Lock == nil {
			break
		}
		if qm.LastIndex == wait {
			t.Fatal("the lock did not expire within the wait")
		}
		wait = qm.LastIndex
	}
	if _, _, err := c.Variables().AcquireLock(&api.Variable{Path: "l/x", Lock: &api.VariableLock{TTL: "10s"}}, nil); err != nil {
		t.Fatalf("acquire after expiry: %v", err)
	}
}
