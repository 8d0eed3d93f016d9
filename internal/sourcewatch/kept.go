package sourcewatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// Kept values live in Nomad variables under the product's prefix (RecordsPrefix, so that a
// watch never counts them as a change), in the namespace of the job that reads the source:
// nomad-restart/~kept/<source>, one per source. The shipped operator policy denies that
// path: only the agent's token reads what it keeps.

// keptItem is the one item of a kept variable: the onchange.Kept as JSON.
const keptItem = "kept"

// keptPathLen bounds the escaped source's segment, as the stores bound theirs.
const keptPathLen = 100

// KeptPath is where src's previous value is kept.
func (h *Hub) KeptPath(src onchange.Source) string {
	return onchange.KeptPath(h.opts.RecordsPrefix, src, func(s string) string { return nomadvars.EscapeSegment(s, keptPathLen) })
}

// ReadKept reads the value kept for src in namespace ns, and the kept variable's index
// (0: nothing is kept).
func (h *Hub) ReadKept(ctx context.Context, ns string, src onchange.Source) (onchange.Kept, uint64, error) {
	if h.vars == nil {
		return onchange.Kept{}, 0, errNoNomad
	}
	v, err := h.vars.Read(ctx, ns, h.KeptPath(src))
	if errors.Is(err, nomadvars.ErrNotFound) {
		return onchange.Kept{}, 0, nil
	}
	if err != nil {
		return onchange.Kept{}, 0, err
	}
	var k onchange.Kept
	if err := json.Unmarshal([]byte(v.Items[keptItem]), &k); err != nil {
		return onchange.Kept{}, 0, fmt.Errorf("reading the value kept for %s at %s: %w", src, v.Path, err)
	}
	return k, v.ModifyIndex, nil
}

// WriteKept writes k for src in namespace ns with check-and-set on index (0: create only),
// and returns the kept variable's new index; onchange.ErrChanged when it is no longer at index.
func (h *Hub) WriteKept(ctx context.Context, ns string, src onchange.Source, k onchange.Kept, index uint64) (uint64, error) {
	if h.vars == nil {
		return 0, errNoNomad
	}
	b, err := json.Marshal(k)
	if err != nil {
		return 0, err
	}
	out, err := h.vars.Write(ctx, &nomadvars.Variable{Namespace: ns, Path: h.KeptPath(src), Items: map[string]string{keptItem: string(b)}, ModifyIndex: index})
	var conflict *nomadvars.ConflictError
	if errors.As(err, &conflict) {
		return 0, fmt.Errorf("keeping the value of %s: %w", src, onchange.ErrChanged)
	}
	if err != nil {
		return 0, fmt.Errorf("keeping the value of %s: %w", src, err)
	}
	return out.ModifyIndex, nil
}

// DeleteKept deletes the value kept for src in namespace ns if it is still at index.
func (h *Hub) DeleteKept(ctx context.Context, ns string, src onchange.Source, index uint64) error {
	if h.vars == nil {
		return errNoNomad
	}
	err := h.vars.DeleteAt(ctx, ns, h.KeptPath(src), index)
	var conflict *nomadvars.ConflictError
	if errors.As(err, &conflict) {
		return fmt.Errorf("deleting the value kept for %s: %w", src, onchange.ErrChanged)
	}
	return err
}
