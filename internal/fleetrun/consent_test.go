package fleetrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// markers is a store.Fleets that answers FleetMember from a map (namespace -> marker or
// error) and counts the reads; any other method panics (nil embedded interface).
type markers struct {
	store.Fleets
	m     map[string]store.Membership
	errs  map[string]error
	reads map[string]int
}

func (f *markers) Member(_ context.Context, ns, _ string) (store.Membership, error) {
	f.reads[ns]++
	if err, ok := f.errs[ns]; ok {
		return store.Membership{}, err
	}
	m, ok := f.m[ns]
	if !ok {
		return store.Membership{}, store.ErrNoMember
	}
	return m, nil
}

func (f *markers) MemberPath(id string) string { return "nomad-restart/~fleets/" + id + "/member" }

func TestConsentFailure(t *testing.T) {
	denied := fmt.Errorf("nomad fleet store: %w", cluster.ErrPermissionDenied)
	f := &markers{
		m: map[string]store.Membership{
			"prod":  {Home: "default", Jobs: []string{"api", "db"}},
			"other": {Home: "staging", Jobs: []string{"api"}},
		},
		errs:  map[string]error{"locked": denied, "flaky": errors.New("connection refused")},
		reads: map[string]int{},
	}
	r := newRun(New(Config{Fleets: f}), "default", "fleet-1", nil)
	rec := &fleet.Record{Namespace: "default", Fleet: fleet.Fleet{ID: "fleet-1"}}
	cases := []struct {
		ns, job string
		want    string // "" : may restart
	}{
		{"default", "web", ""},
		{"", "web", ""},
		{"prod", "db", ""},
		{"prod", "api", ""},
		{"prod", "cache", "holds a member marker of the fleet that does not name the job"},
		{"qa", "api", `namespace "qa" holds no member marker of the fleet`},
		{"other", "api", `for home namespace "staging", not "default"`},
		{"locked", "api", "could not be checked"},
		{"flaky", "api", "connection refused"},
		{"flaky", "db", "connection refused"},
	}
	for _, tc := range cases {
		got := r.consentFailure(context.Background(), rec, fleet.Job{Namespace: tc.ns, JobID: tc.job})
		switch {
		case tc.want == "" && got != "":
			t.Errorf("%s/%s: refused (%s), want consent", tc.ns, tc.job, got)
		case tc.want != "" && !strings.Contains(got, tc.want):
			t.Errorf("%s/%s: %q, want it to say %q", tc.ns, tc.job, got, tc.want)
		case tc.want != "" && (!strings.Contains(got, "nomad-restart/~fleets/fleet-1/member") ||
			!strings.Contains(got, `may write nomad-restart variables in namespace "`+tc.ns+`"`) || strings.Contains(got, "\n")):
			t.Errorf("%s/%s: %q does not name the marker and the fix in one line", tc.ns, tc.job, got)
		}
	}
	if f.reads["prod"] != 1 || f.reads["locked"] != 1 || f.reads["default"] != 0 {
		t.Errorf("marker reads %v: want one per namespace per drive, none in the home", f.reads)
	}
	if f.reads["flaky"] != 2 {
		t.Errorf("a marker that could not be read was read %d times; want it read again (2)", f.reads["flaky"])
	}
}
