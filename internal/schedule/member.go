package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
)

// A fleet schedule lives in its fleet's home namespace, but a selection across namespaces
// ('*') picks jobs of others. Whoever may write nomad-restart's variables in the home could
// store such a schedule, and the agent (with a broad token) would restart what it selects
// everywhere. So at each occurrence the agent keeps only the jobs of the home and of the
// namespaces holding the schedule's member marker: a variable that only a token with
// rights in that namespace could write (`run -jobs ... -at|-every` writes it with the
// user's token when the schedule is created).
const memberName = "member"

// ErrNoMember says a namespace holds no member marker of the schedule asked for.
var ErrNoMember = errors.New("no schedule member marker")

// Member is what a fleet schedule's member marker in one namespace says: the schedule,
// homed in Home, may restart that namespace's jobs that Filter selects. A marker whose
// home or filter is not the schedule's own consents to nothing (the schedule was changed
// since by someone who may not have rights in that namespace).
type Member struct {
	Home   string `json:"home"`
	Filter string `json:"filter"`
}

// MemberOf is the marker sc needs in each namespace of its jobs other than its home.
func MemberOf(sc *Schedule) Member {
	m := Member{Home: nomadvars.Namespace(sc.Namespace)}
	if sc.Fleet != nil {
		m.Filter = sc.Fleet.Selection.Filter
	}
	return m
}

// MemberPath is the variable path of schedule id's member markers.
func (s *Store) MemberPath(id string) string { return s.ListPrefix() + id + "/" + memberName }

// PutMember writes (or overwrites) schedule id's member marker in namespace.
func (s *Store) PutMember(ctx context.Context, namespace, id string, m Member) error {
	if !validID(id) {
		return fmt.Errorf("schedule store: invalid schedule ID %q", id)
	}
	m.Home = nomadvars.Namespace(m.Home)
	raw, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("schedule store: encoding the member marker of schedule %s: %w", id, err)
	}
	v := &nomadvars.Variable{Namespace: nomadvars.Namespace(namespace), Path: s.MemberPath(id), Items: map[string]string{memberName: string(raw)}}
	if err := s.vars.Overwrite(ctx, v); err != nil {
		return s.storeErr(err)
	}
	return nil
}

// Member reads schedule id's member marker in namespace; ErrNoMember when there is none.
func (s *Store) Member(ctx context.Context, namespace, id string) (Member, error) {
	if !validID(id) {
		return Member{}, ErrNoMember
	}
	v, err := s.vars.Read(ctx, namespace, s.MemberPath(id))
	if err != nil {
		err = s.storeErr(err)
		if errors.Is(err, ErrNotFound) {
			return Member{}, ErrNoMember
		}
		return Member{}, err
	}
	var m Member
	if err := json.Unmarshal([]byte(v.Items[memberName]), &m); err != nil {
		return Member{}, fmt.Errorf("schedule store: variable %q in namespace %q is not a schedule member marker: %w", v.Path, v.Namespace, err)
	}
	m.Home = nomadvars.Namespace(m.Home)
	return m, nil
}

// DeleteMembers removes schedule id's member markers in every namespace the token may
// list, best effort: it returns the first failure and goes on past it.
func (s *Store) DeleteMembers(ctx context.Context, id string) error {
	if !validID(id) {
		return nil
	}
	metas, err := s.vars.List(ctx, "*", s.ListPrefix()+id+"/")
	if err != nil {
		return s.storeErr(err)
	}
	var first error
	for _, m := range metas {
		if !strings.HasSuffix(m.Path, "/"+memberName) {
			continue
		}
		if err := s.vars.Delete(ctx, m.Namespace, m.Path); err != nil && first == nil {
			first = s.storeErr(err)
		}
	}
	return first
}
