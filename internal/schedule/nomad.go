package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"
)

// Dir is the path segment under the store's prefix that holds schedules. A job's segment
// never starts with "~" followed by a letter (the restart store escapes "~" as "~7E"), so
// schedules can never collide with a job's records.
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

// PermissionError says Nomad's ACLs refused a schedule's variable.
type PermissionError struct {
	Capability, Namespace, Path, Prefix string
	Err                                 error
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("Nomad denied %q on variable %q in namespace %q (Permission denied): schedules live with the restart records; "+
		"the token's ACL policy needs namespace %q { variables { path \"%s/*\" { capabilities = [\"read\", \"list\", \"write\", \"destroy\"] } } }",
		e.Capability, e.Path, e.Namespace, e.Namespace, e.Prefix)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// Store keeps schedules in Nomad Variables, one variable each, in the job's namespace:
//
//	<prefix>/~schedules/<id>/schedule
//
// (a third segment, so that the restart store's listings, which take <prefix>/<a>/<b> for
// a record's head, never mistake a schedule for a restart). Writes are check-and-set on the
// variable's ModifyIndex.
type Store struct {
	client *api.Client
	prefix string
}

// NewStore returns a store on client under prefix ("" is "nomad-restart", the restart
// store's default).
func NewStore(client *api.Client, prefix string) *Store {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		prefix = "nomad-restart"
	}
	return &Store{client: client, prefix: prefix}
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

func ns(n string) string {
	if n == "" {
		return "default"
	}
	return n
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
	if sc.JobID == "" {
		return errors.New("schedule store: a schedule needs a JobID")
	}
	sc.Namespace = ns(sc.Namespace)
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
	out, _, err := s.client.Variables().CheckedCreate(v, s.wo(ctx, sc.Namespace))
	if err != nil {
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) {
			return fmt.Errorf("schedule store: schedule %s already exists", sc.ID)
		}
		return s.mapErr(ctx, err, "write", sc.Namespace, v.Path)
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
	out, _, err := s.client.Variables().CheckedUpdate(v, s.wo(ctx, sc.Namespace))
	if err != nil {
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) {
			return ErrConflict
		}
		return s.mapErr(ctx, err, "write", sc.Namespace, v.Path)
	}
	sc.ModifyIndex = out.ModifyIndex
	return nil
}

// Delete removes sc if it was not changed since read (ErrConflict otherwise).
func (s *Store) Delete(ctx context.Context, sc *Schedule) error {
	path := s.Path(sc.ID)
	_, err := s.client.Variables().CheckedDelete(path, sc.ModifyIndex, s.wo(ctx, ns(sc.Namespace)))
	if err != nil {
		var conflict api.ErrCASConflict
		if errors.As(err, &conflict) {
			return ErrConflict
		}
		return s.mapErr(ctx, err, "destroy", ns(sc.Namespace), path)
	}
	return nil
}

// Get reads schedule id in namespace.
func (s *Store) Get(ctx context.Context, namespace, id string) (*Schedule, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	path := s.Path(id)
	v, _, err := s.client.Variables().Read(path, s.qo(ctx, ns(namespace)))
	if err != nil {
		return nil, s.mapErr(ctx, err, "read", ns(namespace), path)
	}
	return s.decode(v)
}

// Meta is a listed schedule: where it lives and its index, to tell which changed.
type Meta struct {
	Namespace, ID string
	ModifyIndex   uint64
}

// ListMeta lists the schedules' variables in namespace ("" or "*" for every namespace the
// token may list). With waitIndex > 0 it is a blocking query that returns when the listing
// changes past waitIndex or wait passes; it returns the index to wait on next.
func (s *Store) ListMeta(ctx context.Context, namespace string, waitIndex uint64, wait time.Duration) ([]Meta, uint64, error) {
	if allNamespaces(namespace) {
		namespace = "*"
	}
	q := s.qo(ctx, namespace)
	q.WaitIndex, q.WaitTime = waitIndex, wait
	metas, qm, err := s.client.Variables().PrefixList(s.ListPrefix(), q)
	if err != nil {
		return nil, 0, s.mapErr(ctx, err, "list", namespace, s.ListPrefix())
	}
	var out []Meta
	for _, m := range metas {
		if id, ok := s.IDOf(m.Path); ok {
			out = append(out, Meta{Namespace: m.Namespace, ID: id, ModifyIndex: m.ModifyIndex})
		}
	}
	var index uint64
	if qm != nil {
		index = qm.LastIndex
	}
	return out, index, nil
}

// List reads the schedules in namespace ("" or "*": all), of job when it is not "",
// soonest next due first (done ones last).
func (s *Store) List(ctx context.Context, namespace, job string) ([]*Schedule, error) {
	metas, _, err := s.ListMeta(ctx, namespace, 0, 0)
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
	metas, _, err := s.ListMeta(ctx, namespace, 0, 0)
	if err != nil {
		return nil, err
	}
	var matches []Meta
	for _, m := range metas {
		if m.ID == prefix {
			return s.Get(ctx, m.Namespace, m.ID)
		}
		if prefix != "" && strings.HasPrefix(m.ID, prefix) {
			matches = append(matches, m)
		}
	}
	switch len(matches) {
	case 0:
		return nil, ErrNotFound
	case 1:
		return s.Get(ctx, matches[0].Namespace, matches[0].ID)
	}
	ids := make([]string, len(matches))
	for i, m := range matches {
		ids[i] = m.ID
	}
	return nil, &AmbiguousIDError{Prefix: prefix, Matches: ids}
}

// Mutate reads schedule id, applies change and writes it back with check-and-set,
// retrying on conflicts. change returns false to write nothing (then Mutate returns the
// schedule as read).
func (s *Store) Mutate(ctx context.Context, namespace, id string, change func(*Schedule) (bool, error)) (*Schedule, error) {
	for attempt := 0; ; attempt++ {
		sc, err := s.Get(ctx, namespace, id)
		if err != nil {
			return nil, err
		}
		write, err := change(sc)
		if err != nil || !write {
			return sc, err
		}
		err = s.Update(ctx, sc)
		if err == nil {
			return sc, nil
		}
		if !errors.Is(err, ErrConflict) || attempt >= 50 {
			return nil, err
		}
		t := time.NewTimer(time.Duration(attempt+1) * 5 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func (s *Store) encode(sc *Schedule) (*api.Variable, error) {
	raw, err := json.Marshal(sc)
	if err != nil {
		return nil, fmt.Errorf("schedule store: encoding schedule %s: %w", sc.ID, err)
	}
	return &api.Variable{Namespace: ns(sc.Namespace), Path: s.Path(sc.ID), Items: api.VariableItems{item: string(raw)}}, nil
}

func (s *Store) decode(v *api.Variable) (*Schedule, error) {
	sc := &Schedule{}
	if err := json.Unmarshal([]byte(v.Items[item]), sc); err != nil {
		return nil, fmt.Errorf("schedule store: variable %q in namespace %q is not a schedule: %w", v.Path, v.Namespace, err)
	}
	id, ok := s.IDOf(v.Path)
	if !ok || sc.ID != id {
		return nil, fmt.Errorf("schedule store: variable %q in namespace %q names schedule %q: not the schedule its path names", v.Path, v.Namespace, sc.ID)
	}
	// The namespace is the variable's own: a schedule acts only in the namespace it is in.
	sc.Namespace = ns(v.Namespace)
	sc.CreateIndex, sc.ModifyIndex = v.CreateIndex, v.ModifyIndex
	return sc, nil
}

func (s *Store) qo(ctx context.Context, namespace string) *api.QueryOptions {
	return (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
}

func (s *Store) wo(ctx context.Context, namespace string) *api.WriteOptions {
	return (&api.WriteOptions{Namespace: namespace}).WithContext(ctx)
}

func (s *Store) mapErr(ctx context.Context, err error, capability, namespace, path string) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, api.ErrVariablePathNotFound) {
		return ErrNotFound
	}
	var ure api.UnexpectedResponseError
	var pure *api.UnexpectedResponseError
	code := 0
	if errors.As(err, &ure) && ure.HasStatusCode() {
		code = ure.StatusCode()
	} else if errors.As(err, &pure) && pure.HasStatusCode() {
		code = pure.StatusCode()
	}
	switch code {
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusForbidden:
		return &PermissionError{Capability: capability, Namespace: namespace, Path: path, Prefix: s.prefix, Err: err}
	}
	return fmt.Errorf("schedule store: %s of variable %q in namespace %q failed: %w", capability, path, namespace, err)
}
