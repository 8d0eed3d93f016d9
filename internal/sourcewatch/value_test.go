package sourcewatch

import (
	"errors"
	"maps"
	"net/http"
	"testing"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// A variable's whole value is read, and written back only over the index checked: a write
// over a stale index is onchange.ErrChanged and changes nothing. A missing one reads as Index 0.
func TestWriteBackAVariableWithCheckAndSet(t *testing.T) {
	t.Parallel()
	c, writer, ctx := startWriter(t)
	h := hubOn(t, c, Options{})
	src := variable("nomad/jobs/web/config")
	if v, err := h.ReadValue(ctx, src); err != nil || v.Exists() {
		t.Fatalf("a missing variable reads %+v (%v), want none", v, err)
	}
	good := put(t, writer, src.Path, "good")
	kept, err := h.ReadValue(ctx, src)
	if err != nil || kept.Index != good.ModifyIndex || !maps.Equal(kept.Items, map[string]string{"v": "good"}) {
		t.Fatalf("read %+v (%v), want the items at index %d", kept, err, good.ModifyIndex)
	}
	bad, _, err := writer.Variables().Update(&api.Variable{Namespace: "default", Path: src.Path, Items: map[string]string{"v": "bad", "x": "1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteBack(ctx, src, kept, good.ModifyIndex); !errors.Is(err, onchange.ErrChanged) {
		t.Errorf("a write-back over a stale index: %v, want onchange.ErrChanged", err)
	}
	written, err := h.WriteBack(ctx, src, kept, bad.ModifyIndex)
	if err != nil {
		t.Fatal(err)
	}
	now, err := h.ReadValue(ctx, src)
	if err != nil || now.Index != written || !now.SameContent(kept) {
		t.Errorf("after the write-back: %+v (%v), want the kept items at index %d", now, err, written)
	}
}

// A Consul key's bytes and flags are read and written back with ?cas: a stale index is
// onchange.ErrChanged (Consul answers 200 false) and changes nothing.
func TestWriteBackAConsulKeyWithCheckAndSet(t *testing.T) {
	t.Parallel()
	c, _, ctx := startWriter(t)
	clients := &consulClients{addr: c.ConsulAddr()}
	h := New(nil, Options{Consul: clients.client})
	kv, err := clients.client("")
	if err != nil {
		t.Fatal(err)
	}
	src := consulKey("web/mode")
	if _, err := kv.KV().Put(&consulapi.KVPair{Key: src.Path, Value: []byte("good"), Flags: 42}, nil); err != nil {
		t.Fatal(err)
	}
	kept, err := h.ReadValue(ctx, src)
	if err != nil || string(kept.Bytes) != "good" || kept.Flags != 42 || !kept.Exists() {
		t.Fatalf("read %+v (%v)", kept, err)
	}
	if _, err := kv.KV().Put(&consulapi.KVPair{Key: src.Path, Value: []byte("bad")}, nil); err != nil {
		t.Fatal(err)
	}
	bad, err := h.ReadValue(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteBack(ctx, src, kept, kept.Index); !errors.Is(err, onchange.ErrChanged) {
		t.Errorf("a write-back over a stale index: %v, want onchange.ErrChanged", err)
	}
	if now, _ := h.ReadValue(ctx, src); string(now.Bytes) != "bad" {
		t.Errorf("a refused write-back changed the key to %q", now.Bytes)
	}
	written, err := h.WriteBack(ctx, src, kept, bad.Index)
	if err != nil {
		t.Fatal(err)
	}
	now, err := h.ReadValue(ctx, src)
	if err != nil || now.Index != written || !now.SameContent(kept) {
		t.Errorf("after the write-back: %+v (%v), want %q flags 42 at %d", now, err, kept.Bytes, written)
	}
}

// Consul's ?cas answers only true: when someone writes the key between the write-back and
// its read-back, their index is not taken for the write-back's (which would hide their
// change from the rollouts as the revert's own): it is onchange.ErrChanged.
func TestWriteBackAConsulKeyChangedRightAfterIsErrChanged(t *testing.T) {
	t.Parallel()
	c, _, ctx := startWriter(t)
	writer, err := consulapi.NewClient(&consulapi.Config{Address: c.ConsulAddr()})
	if err != nil {
		t.Fatal(err)
	}
	src := consulKey("web/mode")
	humanWrites := func(r *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err == nil && r.Method == http.MethodPut && r.URL.Query().Has("cas") {
			_, err = writer.KV().Put(&consulapi.KVPair{Key: src.Path, Value: []byte("by hand")}, nil)
		}
		return resp, err
	}
	h := New(nil, Options{Consul: func(string) (*consulapi.Client, error) {
		cfg := consulapi.DefaultNonPooledConfig()
		cfg.Address = c.ConsulAddr()
		cfg.HttpClient = &http.Client{Transport: roundTripFunc(humanWrites)}
		return consulapi.NewClient(cfg)
	}})
	if _, err := writer.KV().Put(&consulapi.KVPair{Key: src.Path, Value: []byte("bad")}, nil); err != nil {
		t.Fatal(err)
	}
	bad, err := h.ReadValue(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	if idx, err := h.WriteBack(ctx, src, onchange.SourceValue{Index: 1, Bytes: []byte("good")}, bad.Index); !errors.Is(err, onchange.ErrChanged) {
		t.Errorf("a write-back changed by hand before its read-back: index %d, %v; want onchange.ErrChanged", idx, err)
	}
}

// The kept value round-trips through its variable, under the product's prefix, with
// check-and-set: a second create, or a write over a stale index, is onchange.ErrChanged.
func TestKeptValueRoundTrip(t *testing.T) {
	t.Parallel()
	c, _, ctx := startWriter(t)
	h := hubOn(t, c, Options{})
	src := variable("nomad/jobs/web/config")
	k := onchange.Kept{Source: src.String(), State: onchange.KeptHeld, OldIndex: 3, BadIndex: 5, Value: onchange.SourceValue{Index: 3, Items: map[string]string{"v": "good"}}}
	idx, err := h.WriteKept(ctx, "default", src, k, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WriteKept(ctx, "default", src, k, 0); !errors.Is(err, onchange.ErrChanged) {
		t.Errorf("a second create: %v, want onchange.ErrChanged", err)
	}
	got, at, err := h.ReadKept(ctx, "default", src)
	if err != nil || at != idx || got.BadIndex != 5 || !got.Value.SameContent(k.Value) {
		t.Fatalf("read back %+v at %d (%v)", got, at, err)
	}
	if err := h.DeleteKept(ctx, "default", src, idx+100); !errors.Is(err, onchange.ErrChanged) {
		t.Errorf("a delete over a stale index: %v, want onchange.ErrChanged", err)
	}
	if err := h.DeleteKept(ctx, "default", src, idx); err != nil {
		t.Fatal(err)
	}
	if _, at, err := h.ReadKept(ctx, "default", src); err != nil || at != 0 {
		t.Errorf("after the delete: index %d (%v), want nothing kept", at, err)
	}
}
