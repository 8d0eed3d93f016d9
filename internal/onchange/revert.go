package onchange

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Reverts: a group with nomad-restart.on-failure = "revert" whose rollout fails gets the
// previous value of the source that changed written back, and the allocations that
// restarted onto the new value restarted again. Only a single Nomad variable or Consul
// key can be put back: the agent keeps one value per source, the one it saw before the
// change.

// Revertible reports whether a change of src can be reverted: one variable or one key,
// whose whole value the agent can keep and write back.
func Revertible(src Source) bool {
	return src.Kind == NomadVariable || src.Kind == ConsulKey
}

// Reverts reports whether the group reverts a failed rollout of a change of src.
func (g Group) Reverts(src Source) bool {
	return g.OnFailure == OnFailureRevert && g.Rolls() && Revertible(src)
}

// notRevertible lists, for a group that asks for reverts, the changes it cannot revert.
func notRevertible(g Group) []string {
	if g.OnFailure != OnFailureRevert {
		return nil
	}
	var out []string
	for _, w := range g.Watched {
		if !Revertible(w.Source) {
			out = append(out, fmt.Sprintf("%s: a prefix covers many entries, and the agent keeps the previous value of one variable or key only; a failed rollout of its change stops", w.Source.Ref()))
		}
	}
	for _, f := range g.Followed {
		out = append(out, fmt.Sprintf("template %q of task %q: followed by its re-renders, whose source (a Vault secret, a computed path, a file) the agent never reads; a failed rollout of a re-render stops", f.Destination, f.Task))
	}
	return out
}

// ErrChanged says a check-and-set write (a write-back, or of a kept value) found what it
// writes changed since the index it was checked against: someone else wrote first. The
// stores of sources and kept values (the agent's SourceValues) return it, wrapped.
var ErrChanged = errors.New("changed since the index checked")

// RevertID is the ID of the restart that brings back the allocations a failed rollout
// restarted onto a bad value: derived from the rollout's, so that of several agents that
// finish the revert, one files it.
func RevertID(rolloutID string) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("nomad-restart:revert:"+rolloutID)).String()
}

// RestartedOnto lists the allocations of a failed rollout that may run the bad value: every
// one whose restart was asked of Nomad (or may have been: its intent was written), in the
// rollout's order. Those left pending or skipped never restarted and kept the value they
// started with, whatever their template files showed since.
func RestartedOnto(rec *restart.Record) []string {
	var out []string
	for _, a := range rec.Allocs {
		switch {
		case a.State == restart.AllocPending, a.State == restart.AllocSkipped && a.Attempts == 0:
			continue
		}
		id := a.ID
		if a.Replacement != "" {
			id = a.Replacement // a rescheduled allocation's replacement runs the bad value
		}
		out = append(out, id)
	}
	return out
}

// RevertTrigger finds, among a failed rollout's triggers, the change of src.
func RevertTrigger(rec *restart.Record, src Source) (restart.Trigger, bool) {
	for _, t := range rec.Triggers {
		if t.Source == src.Ref() && t.NewIndex != 0 {
			return t, true
		}
	}
	return restart.Trigger{}, false
}

// KeptDir is the directory, under the product's prefix, of the kept previous values.
const KeptDir = "~kept"

// KeptPath is where the previous value of src is kept, under prefix (the product's, such as
// "nomad-restart"), in the namespace of the job that reads it: one variable per source,
// named by its reference and, where set, its namespace, region and partition.
func KeptPath(prefix string, src Source, escape func(string) string) string {
	name := src.Ref()
	for _, where := range [][2]string{{"ns", src.Namespace}, {"region", src.Region}, {"partition", src.Partition}} {
		if where[1] != "" {
			name += " " + where[0] + "=" + where[1]
		}
	}
	return strings.TrimSuffix(prefix, "/") + "/" + KeptDir + "/" + escape(name)
}

// SourceValue is what one variable or key holds at one index: a variable's items, or a
// key's bytes and flags. It never leaves the agent but to be kept or written back: no
// record, event, log line or page shows it.
type SourceValue struct {
	// Index is the variable's or key's ModifyIndex; 0: it does not exist.
	Index uint64
	Items map[string]string `json:",omitempty"`
	Bytes []byte            `json:",omitempty"`
	Flags uint64            `json:",omitempty"`
}

// Exists reports whether the value was read from an existing variable or key.
func (v SourceValue) Exists() bool { return v.Index != 0 }

// SameContent reports whether v and o hold the same thing, whatever their indexes.
func (v SourceValue) SameContent(o SourceValue) bool {
	if v.Exists() != o.Exists() || v.Flags != o.Flags || string(v.Bytes) != string(o.Bytes) || len(v.Items) != len(o.Items) {
		return false
	}
	for k, x := range v.Items {
		if y, ok := o.Items[k]; !ok || x != y {
			return false
		}
	}
	return true
}

// String, LogValue: a value printed or logged by mistake (fmt's %v and %+v, log/slog, even
// as a field of a Kept) shows its index and size, never its content, which may be a
// secret.
func (v SourceValue) String() string {
	return fmt.Sprintf("{Index:%d, %d item(s), %d byte(s): not shown}", v.Index, len(v.Items), len(v.Bytes))
}

// LogValue: see String.
func (v SourceValue) LogValue() slog.Value { return slog.StringValue(v.String()) }

// KeptState is where a kept value's revert stands.
type KeptState string

const (
	// KeptHeld: the value is kept; no revert has begun.
	KeptHeld KeptState = "kept"
	// KeptReverting: a revert of Rollout began; the value may or may not be written back.
	KeptReverting KeptState = "reverting"
	// KeptReverted: the value was written back at WrittenIndex.
	KeptReverted KeptState = "reverted"
)

// Kept is the previous value of a source, kept when the agent saw it change, and where
// its revert stands.
type Kept struct {
	// Source names the source (Source.String), for a human reading the variable.
	Source string
	State  KeptState
	// OldIndex is the index of the kept value; BadIndex the index of the change it was
	// replaced by, the only one it may revert.
	OldIndex, BadIndex uint64
	// RolledBy is the rollout filed for the change (set once it is filed, while held): an
	// agent that starts after it finds it here, whatever its watch saw first.
	RolledBy string `json:",omitempty"`
	// Rollout is the failed rollout being reverted (from KeptReverting on).
	Rollout string `json:",omitempty"`
	// WrittenIndex is the source's index after the write-back (KeptReverted).
	WrittenIndex uint64 `json:",omitempty"`
	// WrittenAt is when the write-back was made, by the agent's clock (KeptReverted).
	WrittenAt int64 `json:",omitempty"`
	Value     SourceValue
}

// LogValue logs where the revert stands, never the value (see SourceValue.String): a
// JSON log handler would otherwise marshal the value with the rest.
func (k Kept) LogValue() slog.Value {
	return slog.GroupValue(slog.String("source", k.Source), slog.String("state", string(k.State)),
		slog.Uint64("old_index", k.OldIndex), slog.Uint64("bad_index", k.BadIndex), slog.String("rollout", k.Rollout),
		slog.Uint64("written_index", k.WrittenIndex), slog.String("value", k.Value.String()))
}

// Protects reports whether the kept value must not be replaced by the value a change
// from index from replaced: a revert is under way, or the change is the revert's own
// write-back (from the bad value).
func (k Kept) Protects(from uint64) bool {
	return k.State == KeptReverting || k.State == KeptReverted && from == k.BadIndex
}

// Keep says what to keep when source changes from prev to cur, given what is kept for it
// already (k, at index idx; 0: nothing), and false when the kept value stays as it is.
func Keep(k Kept, idx uint64, source string, prev, cur SourceValue) (Kept, bool) {
	switch {
	case idx != 0 && k.Protects(prev.Index):
		return k, false
	case idx != 0 && k.State == KeptHeld && k.RolledBy == "" && k.BadIndex == prev.Index:
		// prev came and went before any rollout of it was filed (changes within the
		// debounce are rolled as one): the allocations still run the value kept, and it is
		// the one a failed rollout of both changes must put back, not prev.
		k.BadIndex = cur.Index
		return k, true
	}
	return Kept{Source: source, State: KeptHeld, OldIndex: prev.Index, BadIndex: cur.Index, Value: prev}, true
}

// IsWriteBack reports whether index is the revert's own write-back of the kept value.
func (k Kept) IsWriteBack(index uint64) bool {
	return k.State == KeptReverted && index == k.WrittenIndex
}

// WriteBack is what a revert does with the source's current value: write the kept value
// back, count an earlier write-back as done, or leave the source alone.
type WriteBack int

const (
	// WriteNow: the source still holds the bad value; write with check-and-set on it.
	WriteNow WriteBack = iota
	// WrittenAlready: the source holds the kept value (an earlier write-back landed, or
	// someone put it back by hand): nothing to write.
	WrittenAlready
	// ChangedSince: the source changed again since the bad value: someone acted, and the
	// revert stops.
	ChangedSince
)

// DecideWriteBack says what a revert does, given the source's current value.
func (k Kept) DecideWriteBack(cur SourceValue) WriteBack {
	switch {
	case cur.Index == k.BadIndex:
		return WriteNow
	case k.State == KeptReverted && cur.Index == k.WrittenIndex,
		cur.Index > k.BadIndex && cur.SameContent(k.Value):
		return WrittenAlready
	}
	return ChangedSince
}

// RevertNotes says, for a rollout of groups answering triggers, which of its changes a
// failure would not revert and why, when the groups ask for reverts: each line for the
// rollout's plan (its record's events).
func RevertNotes(ex Explain, groups []string, triggers []restart.Trigger) []string {
	var out []string
	for _, g := range ex.Groups {
		if g.OnFailure != OnFailureRevert || !slices.Contains(groups, g.Name) {
			continue
		}
		for _, t := range triggers {
			if t.Destination != "" {
				out = append(out, fmt.Sprintf("On failure, the re-render of template %q of task %q cannot be reverted: the agent never reads what it read (a Vault secret, a computed path, a file); the rollout stops", t.Destination, t.Task))
				continue
			}
			for _, w := range g.Watched {
				if w.Source.Ref() == t.Source && !Revertible(w.Source) {
					out = append(out, fmt.Sprintf("On failure, the change of %s cannot be reverted: a prefix covers many entries, and the agent keeps the previous value of one variable or key only; the rollout stops", t.Source))
				}
			}
		}
		break // the rollout's groups share their options
	}
	return out
}
