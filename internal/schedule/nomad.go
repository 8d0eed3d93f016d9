package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
)

// Dir is the path segment under the store's prefix that holds schedules. It is one that
// nomadvars.EscapeSegment never makes (nomadvars.Reserved: "~" and a lower-case letter),
// and the restart store names jobs with EscapeSegment, so schedules can never collide with
// a job's records.
const Dir = "~schedules"

// item is the variable item holding the schedule's JSON.
const item = "schedule"

// Errors of the store, for errors.Is.
var (
	ErrNotFound = errors.New("schedule not found")
	ErrConflict = errors.New("schedule changed since it was read")
)

// AmbiguousIDError says an ID prefix matched several schedules.
type AmbiguousIDError struct {
	Prefix  string
	Matches []string
}

func (e *AmbiguousIDError) Error() string {
	return fmt.Sprintf("schedule ID prefix %q matched %d schedules; give more characters of the ID", e.Prefix, len(e.Matches))
}

// PermissionError says Nomad's ACLs refused a schedule's variable, and what to grant.
type PermissionError struct {
	Capability, Namespace, Path, Prefix string
	// Err is the denial (a *nomadvars.PermissionError).
	Err error
}

func (e *PermissionError) Error() string {
	denied := &nomadvars.PermissionError{Capability: e.Capability, Namespace: e.Namespace, Path: e.Path}
	return fmt.Sprintf("%s: schedules live with the restart records; the token's ACL policy needs %s", denied.Error(), denied.Policy(e.Prefix))
}

func (e *PermissionError) Unwrap() error { return e.Err }

// Store keeps schedules in Nomad Variables, one variable each, in the job's namespace (a
// fleet schedule's: the fleet's home):
//
//	<prefix>/~schedules/<id>/schedule
//
// (a third segment, so that the restart store's listings, which take <prefix>/<a>/<b> for
// a record's head, never mistake a schedule for a restart). Writes are check-and-set on the
// variable's ModifyIndex.
type Store struct {
	vars *nomadvars.Client
	// watching is vars for ListMeta's watch loops, which pace their own tries.
	watching *nomadvars.Client
	prefix   string
}

// NewStore returns a store on vars's cluster under prefix ("" is "nomad-restart", the
// restart store's default).
func NewStore(vars *nomadvars.Client, prefix string) *Store {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		prefix = "nomad-restart"
	}
	return &Store{vars: vars, watching: vars.Watching(), prefix: prefix}
}

// ListPrefix is the variable path prefix of every schedule, for a blocking list query.
func (s *Store) ListPrefix() string { return s.prefix + "/" + Dir + "/" }

// Path is the variable path of schedule id.
func (s *Store) Path(id string) string { return s.ListPrefix() + id + "/" + item }

// IDOf returns the schedule ID of a listed variable path, or false when the path is no
// schedule's.
func (s *Store) IDOf(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, s.ListPrefix())
	if !ok {
		return "", false
	}
	id, name, ok := strings.Cut(rest, "/")
	if !ok || name != item || !validID(id) {
		return "", false
	}
	return id, true
}

func validID(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil && len(id) == 36
}

func allNamespaces(n string) bool { return n == "" || n == "*" }

// Create stores a new schedule (a new ID when it has none) in sc.Namespace.
func (s *Store) Create(ctx context.Context, sc *Schedule) error {
	if sc.ID == "" {
		sc.ID = uuid.NewString()
	}
	if !validID(sc.ID) {
		return fmt.Errorf("schedule store: invalid schedule ID %q", sc.ID)
	}
	if err := sc.validateTarget(); err != nil {
		return fmt.Errorf("schedule store: %w", err)
	}
	sc.Namespace = nomadvars.Namespace(sc.Namespace)
	if sc.CreateTime.IsZero() {
		sc.CreateTime = time.Now().UTC()
	}
	if sc.Status == "" {
		sc.Status = StatusActive
	}
	v, err := s.encode(sc)
	if err != nil {
		return err
	}
	out, err := s.vars.Write(ctx, v)
	if err != nil {
		var conflict *nomadvars.ConflictError
		if errors.As(err, &conflict) {
			return fmt.Errorf("schedule store: schedule %s already exists", sc.ID)
		}
		return s.storeErr(err)
	}
	sc.CreateIndex, sc.ModifyIndex = out.CreateIndex, out.ModifyIndex
	return nil
}

// Update writes sc if its ModifyIndex is still the stored one (ErrConflict otherwise), and
// sets its new ModifyIndex.
func (s *Store) Update(ctx context.Context, sc *Schedule) error {
	v, err := s.encode(sc)
	if err != nil {
		return err
	}
	v.ModifyIndex = sc.ModifyIndex
	out, err := s.vars.Write(ctx, v)
	if err != nil {
		var conflict *nomadvars.ConflictError
		if errors.As(err, &conflict) {
			return ErrConflict
		}
		return s.storeErr(err)
	}
	sc.ModifyIndex = out.ModifyIndex
	return nil
}

// Delete removes sc if it was not changed since read (ErrConflict otherwise).
func (s *Store) Delete(ctx context.Context, sc *Schedule) error {
	err := s.vars.DeleteAt(ctx, sc.Namespace, s.Path(sc.ID), sc.ModifyIndex)
	var conflict *nomadvars.ConflictError
	if errors.As(err, &conflict) {
		return ErrConflict
	}
	return s.storeErr(err)
}

// Get reads schedule id in namespace.
func (s *Store) Get(ctx context.Context, namespace, id string) (*Schedule, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	v, err := s.vars.Read(ctx, namespace, s.Path(id))
	if err != nil {
		return nil, s.storeErr(err)
	}
	return s.decode(v)
}

// Meta is a listed schedule: where it lives and its index, to tell which changed.
type Meta struct {
	Namespace, ID string
	ModifyIndex   uint64
}

// ListMeta lists the schedules' variables in namespace ("" or "*" for every namespace the
// token may list) for a watch loop: with waitIndex > 0 it is a blocking query that returns
// when the listing changes past waitIndex or wait passes; it returns the index to wait on
// next. It is tried once: the watch loop paces its own tries.
func (s *Store) ListMeta(ctx context.Context, namespace string, waitIndex uint64, wait time.Duration) ([]Meta, uint64, error) {
	return s.listMeta(ctx, s.watching, namespace, nomadvars.Wait{After: waitIndex, Time: wait})
}

func (s *Store) listMeta(ctx context.Context, vars *nomadvars.Client, namespace string, w nomadvars.Wait) ([]Meta, uint64, error) {
	if allNamespaces(namespace) {
		namespace = "*"
	}
	metas, index, err := vars.ListAfter(ctx, namespace, s.ListPrefix(), w)
	if err != nil {
		return nil, 0, s.storeErr(err)
	}
	var out []Meta
	for _, m := range metas {
		if id, ok := s.IDOf(m.Path); ok {
			out = append(out, Meta{Namespace: m.Namespace, ID: id, ModifyIndex: m.ModifyIndex})
		}
	}
	return out, index, nil
}

// List reads the schedules in namespace ("" or "*": all), of job when it is not "" (then
// fleet schedules are left out), soonest next due first (done ones last).
func (s *Store) List(ctx context.Context, namespace, job string) ([]*Schedule, error) {
	metas, _, err := s.listMeta(ctx, s.vars, namespace, nomadvars.Wait{})
	if err != nil {
		return nil, err
	}
	var out []*Schedule
	for _, m := range metas {
		sc, err := s.Get(ctx, m.Namespace, m.ID)
		if errors.Is(err, ErrNotFound) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, err
		}
		if job == "" || sc.JobID == job {
			out = append(out, sc)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Status == StatusActive) != (b.Status == StatusActive) {
			return a.Status == StatusActive
		}
		if !a.Next.Equal(b.Next) {
			return a.Next.Before(b.Next)
		}
		return a.CreateTime.Before(b.CreateTime)
	})
	return out, nil
}

// Find resolves a schedule ID or unique prefix in namespace ("" or "*": all).
func (s *Store) Find(ctx context.Context, namespace, prefix string) (*Schedule, error) {
	metas, _, err := s.listMeta(ctx, s.vars, namespace, nomadvars.Wait{})
	if err != nil {
		return nil, err
	}
	return nomadvars.FindByIDPrefix(metas, func(m Meta) string { return m.ID }, prefix, ErrNotFound,
		func(ids []string) error { return &AmbiguousIDError{Prefix: prefix, Matches: ids} },
		func(m Meta) (*Schedule, error) { return s.Get(ctx, m.Namespace, m.ID) })
}

// Mutate reads schedule id, applies change and writes it back with check-and-set,
// retrying on conflicts. change returns false to write nothing (then Mutate returns the
// schedule as read).
func (s *Store) Mutate(ctx context.Context, namespace, id string, change func(*Schedule) (bool, error)) (*Schedule, error) {
	return nomadvars.ReadChangeWrite(ctx, ErrConflict,
		func() (*Schedule, error) { return s.Get(ctx, namespace, id) },
		change,
		func(sc *Schedule) error { return s.Update(ctx, sc) })
}

func (s *Store) encode(sc *Schedule) (*nomadvars.Variable, error) {
	raw, err := json.Marshal(sc)
	if err != nil {
		return nil, fmt.Errorf("schedule store: encoding schedule %s: %w", sc.ID, err)
	}
	return &nomadvars.Variable{Namespace: nomadvars.Namespace(sc.Namespace), Path: s.Path(sc.ID), Items: map[string]string{item: string(raw)}}, nil
}

func (s *Store) decode(v *nomadvars.Variable) (*Schedule, error) {
	sc := &Schedule{}
	if err := json.Unmarshal([]byte(v.Items[item]), sc); err != nil {
		return nil, fmt.Errorf("schedule store: variable %q in namespace %q is not a schedule: %w", v.Path, v.Namespace, err)
	}
	id, ok := s.IDOf(v.Path)
	if !ok || sc.ID != id {
		return nil, fmt.Errorf("schedule store: variable %q in namespace %q names schedule %q: not the schedule its path names", v.Path, v.Namespace, sc.ID)
	}
	// The namespace is the variable's own: a schedule acts only in the namespace it is in.
	sc.Namespace = nomadvars.Namespace(v.Namespace)
	sc.CreateIndex, sc.ModifyIndex = v.CreateIndex, v.ModifyIndex
	return sc, nil
}

// storeErr turns an error of nomadvars into the store's terms: ErrNotFound, a
// *PermissionError naming the prefix to grant, or the failure with the store's name.
func (s *Store) storeErr(err error) error {
	return nomadvars.Translate(err, "schedule store", ErrNotFound, func(perm *nomadvars.PermissionError) error {
		return &PermissionError{Capability: perm.Capability, Namespace: perm.Namespace, Path: perm.Path, Prefix: s.prefix, Err: perm}
	})
}
