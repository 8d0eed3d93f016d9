package nomadstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// FleetsDir is the path segment under the store's prefix that holds fleets. It is one
// that nomadvars.EscapeSegment never makes (nomadvars.Reserved), so no job's records can
// collide with a fleet's, and the restart store's listings skip it.
const FleetsDir = "~fleets"

// The variables of a fleet, under <prefix>/~fleets/<id>/, and the items of its record.
const (
	fleetRecordName = "fleet"
	fleetLeaseName  = "lease"

	fleetItemFormat = "format"
	fleetItemData   = "fleet.gz" // the record's JSON, gzip'd then base64'd
	fleetFormat     = "1"
)

// Fleets keeps fleet records in Nomad Variables, in each fleet's home namespace
// (fleet.Record.Namespace):
//
//	<prefix>/~fleets/<id>/fleet     the record, compressed into one variable
//	<prefix>/~fleets/<id>/control   the control bell, rung by steering (see control.go)
//	<prefix>/~fleets/<id>/lease     the driver's lease (a variable lock)
//
// The record is one variable so that every write is one check-and-set; compressed, a
// fleet of a few thousand jobs fits Nomad's 64 KiB. Namespace "" is "default"; "*" asks the
// methods that take a fleet's ID to find its namespace first (one listing).
type Fleets struct {
	// n is the restart store's plumbing on the same cluster and prefix: its variables
	// clients, options, leases and bells.
	n *Restarts
}

var _ store.Fleets = (*Fleets)(nil)

// NewFleets returns a fleet store on vars's cluster, under opts.Prefix (default
// "nomad-restart", beside the restart records). Of opts it uses Prefix, the lease's
// LockTTL, LockDelay and RenewEvery, Keep (how many finished fleets of a namespace are
// kept) and Logger.
func NewFleets(vars *nomadvars.Client, opts Options) *Fleets {
	return &Fleets{n: NewRestarts(vars, opts)}
}

// fleetDir is the prefix of every fleet variable, for listings.
func (s *Fleets) fleetDir() string { return s.n.opts.Prefix + "/" + FleetsDir + "/" }

// fleetPath is the path of fleet id's variable name (fleetRecordName, bellName,
// fleetLeaseName).
func (s *Fleets) fleetPath(id, name string) string { return s.fleetDir() + id + "/" + name }

// fleetRef is a fleet's record variable as a listing shows it.
type fleetRef struct {
	ns, id      string
	createIndex uint64
}

// listFleets lists the record variables of the fleets in ns ("" or "*": every namespace
// the token may list), without reading them.
func (s *Fleets) listFleets(ctx context.Context, ns string) ([]fleetRef, error) {
	refs, _, err := s.listFleetDir(ctx, ns)
	return refs, err
}

// listFleetDir is listFleets that also returns the lease variables listed without their
// fleet's record: leases whose creator died between taking the lease and writing the
// record (CreateLeased), or whose record was deleted since.
func (s *Fleets) listFleetDir(ctx context.Context, ns string) (refs []fleetRef, orphans []*nomadvars.Metadata, err error) {
	if store.AllNamespaces(ns) {
		ns = "*"
	}
	metas, err := s.n.vars.List(ctx, ns, s.fleetDir())
	if err != nil {
		return nil, nil, s.fleetErr(err)
	}
	recorded := map[string]bool{}
	var leases []*nomadvars.Metadata
	for _, m := range metas {
		rest := strings.TrimPrefix(m.Path, s.fleetDir())
		id, name, ok := strings.Cut(rest, "/")
		switch {
		case !ok || !store.ValidID(id):
		case name == fleetRecordName:
			refs = append(refs, fleetRef{ns: m.Namespace, id: id, createIndex: m.CreateIndex})
			recorded[key(m.Namespace, id)] = true
		case name == fleetLeaseName:
			leases = append(leases, m)
		}
	}
	for _, m := range leases {
		id, _, _ := strings.Cut(strings.TrimPrefix(m.Path, s.fleetDir()), "/")
		if !recorded[key(m.Namespace, id)] {
			orphans = append(orphans, m)
		}
	}
	return refs, orphans, nil
}

// home resolves the namespace a caller named for fleet id: "" is "default", "*" is
// wherever the fleet is.
func (s *Fleets) home(ctx context.Context, ns, id string) (string, error) {
	if !store.ValidID(id) {
		return "", store.ErrFleetNotFound
	}
	if ns != "*" {
		return nomadvars.Namespace(ns), nil
	}
	refs, err := s.listFleets(ctx, "*")
	if err != nil {
		return "", err
	}
	for _, r := range refs {
		if r.id == id {
			return r.ns, nil
		}
	}
	return "", store.ErrFleetNotFound
}

// Create implements store.Fleets. It gives f an ID when it has none and files it in
// f.Namespace ("" is "default"); then it deletes the namespace's finished fleets beyond
// the newest Options.Keep, best effort.
func (s *Fleets) Create(ctx context.Context, f *fleet.Record) error {
	if err := s.prepareNew(f); err != nil {
		return err
	}
	rec := *f
	rec.Namespace = nomadvars.Namespace(f.Namespace)
	store.StampTimes(&rec.CreateTime, &rec.ModifyTime, time.Now().UTC())
	v, err := s.encode(&rec)
	if err != nil {
		return err
	}
	out, err := s.n.vars.Write(ctx, v) // ModifyIndex 0: create only
	var conflict *nomadvars.ConflictError
	if errors.As(err, &conflict) {
		return store.ErrExists
	}
	if err != nil {
		return s.fleetErr(err)
	}
	rec.CreateIndex, rec.ModifyIndex = out.CreateIndex, out.ModifyIndex
	*f = rec
	s.prune(ctx, rec.Namespace, rec.ID)
	return nil
}

// CreateLeased implements store.Records, as the restart store's does: the fleet's lease is
// locked for holder before its record is written, so that an agent never takes up a fleet
// whose creator is about to drive it. A fleet that cannot be created releases the lease,
// which deletes its variable (as every release of a fleet's lease does).
func (s *Fleets) CreateLeased(ctx context.Context, f *fleet.Record, holder string) (store.Lease, error) {
	if err := s.prepareNew(f); err != nil {
		return nil, err
	}
	ns := nomadvars.Namespace(f.Namespace)
	l, err := s.n.lockLease(ctx, ns, s.fleetPath(f.ID, fleetLeaseName), holder, (*nomadLease).dropReleased)
	if errors.Is(err, store.ErrLeaseHeld) {
		return nil, fmt.Errorf("nomad fleet store: fleet %s: another process holds its lease: %w", f.ID, store.ErrExists)
	}
	if err != nil {
		return nil, plumbingErr(err)
	}
	if err := s.Create(ctx, f); err != nil {
		if rerr := l.Release(ctx); rerr != nil {
			s.n.opts.Logger.Debug("could not release the lease of a refused fleet; it expires on its own", "fleet", f.ID, "namespace", ns, "error", rerr)
		}
		return nil, err
	}
	return l, nil
}

// prepareNew gives a new fleet an ID when it has none and refuses what cannot be stored.
func (s *Fleets) prepareNew(f *fleet.Record) error {
	if f.ID == "" {
		f.ID = uuid.NewString()
	}
	if !store.ValidID(f.ID) {
		return fmt.Errorf("nomad fleet store: invalid fleet ID %q", f.ID)
	}
	if f.Namespace == "*" {
		return fmt.Errorf(`nomad fleet store: fleet %s names namespace "*" as its home: a fleet lives in one namespace ("default" for a selection across namespaces)`, f.ID)
	}
	return nil
}

// Update implements store.Fleets.
func (s *Fleets) Update(ctx context.Context, f *fleet.Record) error {
	if f.ModifyIndex == 0 {
		return fmt.Errorf("nomad fleet store: fleet %s has no ModifyIndex: read it (or create it) before updating it", f.ID)
	}
	if !store.ValidID(f.ID) {
		return store.ErrFleetNotFound
	}
	rec := *f
	rec.Namespace = nomadvars.Namespace(f.Namespace)
	rec.ModifyTime = time.Now().UTC()
	v, err := s.encode(&rec)
	if err != nil {
		return err
	}
	v.ModifyIndex = f.ModifyIndex
	out, err := s.n.vars.Write(ctx, v)
	var conflict *nomadvars.ConflictError
	switch {
	case errors.As(err, &conflict) && conflict.Current == nil:
		return store.ErrFleetNotFound
	case errors.As(err, &conflict):
		return store.ErrConflict
	case err != nil:
		return s.fleetErr(err)
	}
	f.Namespace, f.ModifyIndex, f.ModifyTime = rec.Namespace, out.ModifyIndex, rec.ModifyTime
	return nil
}

// Get implements store.Fleets.
func (s *Fleets) Get(ctx context.Context, namespace, id string) (*fleet.Record, error) {
	ns, err := s.home(ctx, namespace, id)
	if err != nil {
		return nil, err
	}
	v, err := s.n.vars.Read(ctx, ns, s.fleetPath(id, fleetRecordName))
	if err != nil {
		return nil, s.fleetErr(err)
	}
	return s.decode(v)
}

// Find implements store.Fleets.
func (s *Fleets) Find(ctx context.Context, namespace, prefix string) (*fleet.Record, error) {
	refs, err := s.listFleets(ctx, namespace)
	if err != nil {
		return nil, err
	}
	return nomadvars.FindByIDPrefix(refs, func(r fleetRef) string { return r.id }, prefix, store.ErrFleetNotFound,
		func(ids []string) error { return &store.AmbiguousIDError{Prefix: prefix, Matches: ids, Kind: "fleet"} },
		func(r fleetRef) (*fleet.Record, error) { return s.Get(ctx, r.ns, r.id) })
}

// List implements store.Fleets. It reads the listed fleets a few at a time; one deleted
// since the listing is left out.
func (s *Fleets) List(ctx context.Context, namespace string, active bool) ([]*fleet.Record, error) {
	refs, err := s.listFleets(ctx, namespace)
	if err != nil {
		return nil, err
	}
	read := make([]*fleet.Record, len(refs))
	err = forEach(ctx, len(refs), chunkWorkers, func(ctx context.Context, i int) error {
		f, err := s.Get(ctx, refs[i].ns, refs[i].id)
		if errors.Is(err, store.ErrFleetNotFound) {
			return nil
		}
		read[i] = f
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]*fleet.Record, 0, len(read))
	for _, f := range read {
		if f != nil && (!active || !f.Status.Terminal()) {
			out = append(out, f)
		}
	}
	sortFleetsNewestFirst(out)
	return out, nil
}

// sortFleetsNewestFirst orders fleets by CreateTime, newest first (then by CreateIndex, for
// fleets created within one clock tick).
func sortFleetsNewestFirst(fleets []*fleet.Record) {
	slices.SortStableFunc(fleets, func(a, b *fleet.Record) int {
		if c := b.CreateTime.Compare(a.CreateTime); c != 0 {
			return c
		}
		return cmp.Compare(b.CreateIndex, a.CreateIndex)
	})
}

// encode turns a fleet into its variable; *FleetTooLargeError when it would not fit.
func (s *Fleets) encode(f *fleet.Record) (*nomadvars.Variable, error) {
	raw, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("nomad fleet store: encoding fleet %s: %w", f.ID, err)
	}
	packed, err := s.n.pack(raw)
	if err != nil {
		return nil, fmt.Errorf("nomad fleet store: compressing fleet %s: %w", f.ID, err)
	}
	items := map[string]string{fleetItemFormat: fleetFormat, fleetItemData: packed}
	if size := itemsSize(items); size > maxVariableSize {
		return nil, &store.FleetTooLargeError{Jobs: len(f.Jobs), Bytes: size, Limit: maxVariableSize}
	}
	return &nomadvars.Variable{Namespace: f.Namespace, Path: s.fleetPath(f.ID, fleetRecordName), Items: items}, nil
}

// decode reads a fleet's variable; its namespace and indexes are the variable's own.
func (s *Fleets) decode(v *nomadvars.Variable) (*fleet.Record, error) {
	if f := v.Items[fleetItemFormat]; f != fleetFormat {
		return nil, fmt.Errorf("nomad fleet store: variable %q in namespace %q has unknown fleet format %q (written by a newer nomad-restart?)", v.Path, v.Namespace, f)
	}
	raw, err := unpack(v.Items[fleetItemData])
	if err != nil {
		return nil, fmt.Errorf("nomad fleet store: variable %q in namespace %q is corrupt: %w", v.Path, v.Namespace, err)
	}
	f := &fleet.Record{}
	if err := json.Unmarshal(raw, f); err != nil {
		return nil, fmt.Errorf("nomad fleet store: variable %q in namespace %q is not a fleet: %w", v.Path, v.Namespace, err)
	}
	if v.Path != s.fleetPath(f.ID, fleetRecordName) {
		return nil, fmt.Errorf("nomad fleet store: variable %q in namespace %q holds fleet %q, not the one its path names", v.Path, v.Namespace, f.ID)
	}
	f.Namespace = nomadvars.Namespace(v.Namespace)
	f.CreateIndex, f.ModifyIndex = v.CreateIndex, v.ModifyIndex
	return f, nil
}

// fleetErr turns an error of nomadvars into the fleet store's terms: ErrFleetNotFound, a
// *PermissionError naming the prefix to grant, or the failure with the store's name.
func (s *Fleets) fleetErr(err error) error {
	return nomadvars.Translate(err, "nomad fleet store", store.ErrFleetNotFound, func(perm *nomadvars.PermissionError) error {
		return &store.PermissionError{Capability: perm.Capability, Namespace: perm.Namespace, Path: perm.Path, Prefix: s.n.opts.Prefix, Err: perm, Fleet: true}
	})
}

// plumbingErr is fleetErr for an error of the restart store's plumbing (bells, leases),
// which is in the store's terms already but for saying ErrNotFound of a restart.
func plumbingErr(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return store.ErrFleetNotFound
	}
	return err
}
