package sourcewatch

import (
	"context"
	"errors"
	"fmt"

	consulapi "github.com/hashicorp/consul/api"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// Values: what reverts of config changes need beyond watching. A watch sees metadata only;
// a job that asks for reverts (nomad-restart.on-failure = "revert") has the agent read the
// whole value of its variables and keys (which needs "read" on them), so that the value a
// change replaces can be kept, and written back with check-and-set when the change's
// rollout fails.

// ReadValue reads the whole value of src, one variable or one key; a missing one is a
// SourceValue with Index 0.
func (h *Hub) ReadValue(ctx context.Context, src onchange.Source) (onchange.SourceValue, error) {
	switch src.Kind {
	case onchange.NomadVariable:
		if h.vars == nil {
			return onchange.SourceValue{}, errNoNomad
		}
		v, err := h.vars.InRegion(src.Region).Read(ctx, src.Namespace, src.Path)
		if errors.Is(err, nomadvars.ErrNotFound) {
			return onchange.SourceValue{}, nil
		}
		if err != nil {
			return onchange.SourceValue{}, valueErr(src, err)
		}
		return onchange.SourceValue{Index: v.ModifyIndex, Items: v.Items}, nil
	case onchange.ConsulKey:
		kv, err := h.consulKV(src.Datacenter)
		if err != nil {
			return onchange.SourceValue{}, err
		}
		pair, _, err := kv.Get(src.Path, consulQuery(ctx, src))
		if err != nil {
			return onchange.SourceValue{}, fmt.Errorf("reading Consul key %q: %w", src.Path, valueErr(src, err))
		}
		if pair == nil {
			return onchange.SourceValue{}, nil
		}
		return onchange.SourceValue{Index: pair.ModifyIndex, Bytes: pair.Value, Flags: pair.Flags}, nil
	}
	return onchange.SourceValue{}, fmt.Errorf("%s holds no single value to read", src)
}

// WriteBack writes v's content to src with check-and-set on index (the bad value's
// ModifyIndex: Nomad's cas, Consul's ?cas), and returns the source's index after the
// write; onchange.ErrChanged when the source is no longer at index.
func (h *Hub) WriteBack(ctx context.Context, src onchange.Source, v onchange.SourceValue, index uint64) (uint64, error) {
	switch src.Kind {
	case onchange.NomadVariable:
		if h.vars == nil {
			return 0, errNoNomad
		}
		out, err := h.vars.InRegion(src.Region).Write(ctx, &nomadvars.Variable{Namespace: src.Namespace, Path: src.Path, Items: v.Items, ModifyIndex: index})
		var conflict *nomadvars.ConflictError
		if errors.As(err, &conflict) {
			return 0, fmt.Errorf("writing %s back: %w", src, onchange.ErrChanged)
		}
		if err != nil {
			return 0, valueErr(src, err)
		}
		return out.ModifyIndex, nil
	case onchange.ConsulKey:
		kv, err := h.consulKV(src.Datacenter)
		if err != nil {
			return 0, err
		}
		w := (&consulapi.WriteOptions{Datacenter: src.Datacenter, Namespace: src.Namespace, Partition: src.Partition}).WithContext(ctx)
		ok, _, err := kv.CAS(&consulapi.KVPair{Key: src.Path, Value: v.Bytes, Flags: v.Flags, ModifyIndex: index}, w)
		if err != nil {
			return 0, fmt.Errorf("writing %s back: %w", src, valueErr(src, err))
		}
		if !ok {
			return 0, fmt.Errorf("writing %s back: %w", src, onchange.ErrChanged)
		}
		// Consul's ?cas answers true or false, not the index written: it is read back, and
		// a value other than the one written means someone wrote since. Its index is theirs,
		// and taking it for the write-back's would hide their change from the rollouts.
		cur, err := h.ReadValue(ctx, src)
		if err != nil {
			return 0, fmt.Errorf("reading %s after writing it back: %w", src, err)
		}
		if !cur.SameContent(v) {
			return 0, fmt.Errorf("writing %s back: written, then %w (index %d)", src, onchange.ErrChanged, cur.Index)
		}
		return cur.Index, nil
	}
	return 0, fmt.Errorf("%s holds no single value to write", src)
}

// valueErr is a failed read or write of src's whole value: a denial says what a job that
// reverts needs, which the shipped agent policy does not grant (read and write on the
// source, docs/acl.md); any other error stays as it is.
func valueErr(src onchange.Source, err error) error {
	var denied *DeniedError
	if !errors.As(sourceErr(src, err), &denied) {
		return err
	}
	rule := fmt.Sprintf(`key %q { policy = "write" }`, src.Path)
	if src.Kind.Nomad() {
		rule = fmt.Sprintf(`namespace %q { variables { path %q { capabilities = ["list", "read", "write"] } } }`, nomadvars.Namespace(src.Namespace), src.Path)
	}
	return fmt.Errorf("%w: a job with %s = %q needs the agent's token to read and write %s; grant it %s (docs/acl.md)",
		err, onchange.KeyOnFailure, onchange.OnFailureRevert, src, rule)
}

func consulQuery(ctx context.Context, src onchange.Source) *consulapi.QueryOptions {
	return (&consulapi.QueryOptions{Datacenter: src.Datacenter, Namespace: src.Namespace, Partition: src.Partition}).WithContext(ctx)
}
