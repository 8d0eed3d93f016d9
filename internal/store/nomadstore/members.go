package nomadstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// A fleet's record lives in its home namespace, but its jobs may be in others. Whoever may
// write nomad-restart's variables in the home could list there the jobs of a namespace
// they have no rights in, and the driver (the agent, with a broad token) would restart
// them. So a fleet restarts a job outside its home only when the job's namespace holds the
// fleet's member marker naming the job: a variable only a token with rights in that
// namespace could write (`run -jobs` writes it with the user's token before recording the
// fleet).
const (
	fleetMemberName = "member"

	memberItemFormat = "format"
	memberItemData   = "member.gz" // the Membership's JSON, gzip'd then base64'd
	memberFormat     = "1"
)

// MemberPath is the variable path of fleet id's member marker, in each namespace of
// its jobs but its home.
func (s *Fleets) MemberPath(id string) string { return s.fleetPath(id, fleetMemberName) }

// PutMember implements store.Fleets: it writes (or overwrites) fleet id's member marker in
// namespace.
func (s *Fleets) PutMember(ctx context.Context, namespace, id string, m store.Membership) error {
	if !store.ValidID(id) {
		return fmt.Errorf("nomad fleet store: invalid fleet ID %q", id)
	}
	m.Home = nomadvars.Namespace(m.Home)
	m.Jobs = slices.Compact(slices.Sorted(slices.Values(m.Jobs)))
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("nomad fleet store: encoding the member marker of fleet %s: %w", id, err)
	}
	packed, err := s.n.pack(raw)
	if err != nil {
		return fmt.Errorf("nomad fleet store: compressing the member marker of fleet %s: %w", id, err)
	}
	items := map[string]string{memberItemFormat: memberFormat, memberItemData: packed}
	if size := itemsSize(items); size > maxVariableSize {
		return &store.FleetTooLargeError{Jobs: len(m.Jobs), Bytes: size, Limit: maxVariableSize}
	}
	v := &nomadvars.Variable{Namespace: nomadvars.Namespace(namespace), Path: s.MemberPath(id), Items: items}
	return s.fleetErr(s.n.vars.Overwrite(ctx, v))
}

// Member implements store.Fleets: fleet id's member marker in namespace, ErrNoMember when
// there is none.
func (s *Fleets) Member(ctx context.Context, namespace, id string) (store.Membership, error) {
	if !store.ValidID(id) {
		return store.Membership{}, store.ErrNoMember
	}
	v, err := s.n.vars.Read(ctx, namespace, s.MemberPath(id))
	if err != nil {
		err = s.fleetErr(err)
		if errors.Is(err, store.ErrFleetNotFound) {
			return store.Membership{}, store.ErrNoMember
		}
		return store.Membership{}, err
	}
	return decodeMember(v)
}

// decodeMember reads a member marker's variable.
func decodeMember(v *nomadvars.Variable) (store.Membership, error) {
	if f := v.Items[memberItemFormat]; f != memberFormat {
		return store.Membership{}, fmt.Errorf("nomad fleet store: variable %q in namespace %q has unknown member format %q (written by a newer nomad-restart?)", v.Path, v.Namespace, f)
	}
	raw, err := unpack(v.Items[memberItemData])
	var m store.Membership
	if err == nil {
		err = json.Unmarshal(raw, &m)
	}
	if err != nil {
		return store.Membership{}, fmt.Errorf("nomad fleet store: variable %q in namespace %q is not a fleet member marker: %w", v.Path, v.Namespace, err)
	}
	m.Home = nomadvars.Namespace(m.Home)
	slices.Sort(m.Jobs)
	return m, nil
}

// DeleteMember implements store.Fleets.
func (s *Fleets) DeleteMember(ctx context.Context, namespace, id string) error {
	if !store.ValidID(id) {
		return nil
	}
	return s.fleetErr(s.n.vars.Delete(ctx, namespace, s.MemberPath(id)))
}

// deleteMembers removes a pruned fleet's member markers, best effort: the pruning token
// (the creator's, or the agent's) may have no rights in the jobs' namespaces, and a marker
// left behind names only a fleet that ended (its children's IDs are taken, so a replay of
// the record restarts nothing again while they are kept).
func (s *Fleets) deleteMembers(ctx context.Context, f *fleet.Record) {
	for ns := range store.MembershipsOf(f) {
		if err := s.DeleteMember(ctx, ns, f.ID); err != nil {
			s.n.opts.Logger.Debug("could not delete a pruned fleet's member marker", "path", s.MemberPath(f.ID), "namespace", ns, "error", err)
		}
	}
}
