package store_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// A fleet's member markers are the namespaces of its jobs other than its home, each with
// that namespace's job IDs sorted and once.
func TestMembershipsOf(t *testing.T) {
	f := &fleet.Record{Namespace: "default", Fleet: fleet.Fleet{Jobs: []fleet.Job{
		{Namespace: "default", JobID: "web"},
		{Namespace: "prod", JobID: "db"},
		{Namespace: "prod", JobID: "api"},
		{Namespace: "qa", JobID: "api"},
		{Namespace: "prod", JobID: "api"},
	}}}
	got := store.MembershipsOf(f)
	want := map[string]store.Membership{
		"prod": {Home: "default", Jobs: []string{"api", "db"}},
		"qa":   {Home: "default", Jobs: []string{"api"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("MembershipsOf: got %+v, want %+v", got, want)
	}
	if !want["prod"].Has("db") || want["prod"].Has("web") || want["qa"].Has("db") {
		t.Error("Membership.Has answers wrong")
	}
	if got := store.MembershipsOf(&fleet.Record{Namespace: "", Fleet: fleet.Fleet{Jobs: []fleet.Job{{Namespace: "default", JobID: "x"}}}}); len(got) != 0 {
		t.Errorf("a fleet of its home's jobs needs no marker: %+v", got)
	}
}

// A member marker is written (and written again) in the job's namespace under the fleet's
// folder, read back as written, and is neither a fleet nor a restart to any listing.
func TestFleetMemberWriteRead(t *testing.T) {
	cl, s, rs := startFleets(t, store.NomadOptions{})
	ctx := testContext(t, 30*time.Second)
	f := mustCreateFleet(t, ctx, s, newFleet("default", 1))
	if _, err := s.Member(ctx, "prod", f.ID); !errors.Is(err, store.ErrNoMember) {
		t.Fatalf("FleetMember before any was written: got %v, want ErrNoMember", err)
	}
	if _, err := s.Member(ctx, "prod", "not-an-id"); !errors.Is(err, store.ErrNoMember) {
		t.Fatalf("FleetMember of an invalid ID: got %v, want ErrNoMember", err)
	}
	if err := s.PutMember(ctx, "prod", f.ID, store.Membership{Home: "", Jobs: []string{"web", "api", "web"}}); err != nil {
		t.Fatalf("PutFleetMember: %v", err)
	}
	if err := s.PutMember(ctx, "prod", f.ID, store.Membership{Home: "default", Jobs: []string{"web", "db", "api"}}); err != nil {
		t.Fatalf("PutFleetMember over an existing marker: %v", err)
	}
	got, err := s.Member(ctx, "prod", f.ID)
	if want := (store.Membership{Home: "default", Jobs: []string{"api", "db", "web"}}); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("FleetMember: got %+v, %v; want %+v", got, err, want)
	}
	v, _, err := cl.Variables().Read(s.MemberPath(f.ID), &api.QueryOptions{Namespace: "prod"})
	if err != nil || v.Path != "nomad-restart/~fleets/"+f.ID+"/member" {
		t.Fatalf("the marker is not at nomad-restart/~fleets/<id>/member in prod: %v, %v", v, err)
	}

	fleets, err := s.List(ctx, "*", false)
	if err != nil || len(fleets) != 1 || fleets[0].ID != f.ID || fleets[0].Namespace != "default" {
		t.Errorf("List(*) with a marker in prod: %d fleets, %v; want the one in default", len(fleets), err)
	}
	if _, err := s.Get(ctx, "prod", f.ID); !errors.Is(err, store.ErrFleetNotFound) {
		t.Errorf("GetFleet in the marker's namespace: got %v, want ErrFleetNotFound", err)
	}
	if recs, err := rs.List(ctx, store.Filter{Namespace: "*"}); err != nil || len(recs) != 0 {
		t.Errorf("the restart store lists the marker: %v, %v", recs, err)
	}
	if listing, err := store.NewNomadRestartLister(cl, "").List(ctx, "*", 0, 0); err != nil || len(listing.Restarts) != 0 {
		t.Errorf("the restart lister shows the marker: %+v, %v", listing, err)
	}

	if err := s.DeleteMember(ctx, "prod", f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Member(ctx, "prod", f.ID); !errors.Is(err, store.ErrNoMember) {
		t.Fatalf("FleetMember after DeleteFleetMember: got %v, want ErrNoMember", err)
	}
}

// A token that may write nomad-restart's variables in default only is refused a marker
// in prod, with the rule to grant; so is a token that may not read there.
func TestFleetMemberDenied(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	ctx := testContext(t, 30*time.Second)
	admin := simClient(t, c, c.BootstrapToken())
	if _, err := admin.Namespaces().Register(&api.Namespace{Name: "prod"}, nil); err != nil {
		t.Fatal(err)
	}
	token, err := c.CreateToken("default-writer", map[string]string{"default-writer": `
namespace "default" {
  variables { path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] } }
}`})
	if err != nil {
		t.Fatal(err)
	}
	s := store.NewNomadFleets(simClient(t, c, token), store.NomadOptions{})
	f := mustCreateFleet(t, ctx, s, newFleet("default", 1))
	err = s.PutMember(ctx, "prod", f.ID, store.Membership{Home: "default", Jobs: []string{"db"}})
	var perm *store.PermissionError
	if !errors.As(err, &perm) || perm.Capability != "write" || perm.Namespace != "prod" {
		t.Fatalf("PutFleetMember in prod with a default-only token: got %v, want a PermissionError for write in prod", err)
	}
	if !strings.Contains(err.Error(), `path "nomad-restart/*"`) {
		t.Errorf("the denial does not name the rule to grant: %v", err)
	}
	if _, err := s.Member(ctx, "prod", f.ID); !errors.As(err, &perm) || perm.Capability != "read" {
		t.Fatalf("FleetMember in prod with a default-only token: got %v, want a PermissionError for read", err)
	}
	if metas, _, err := admin.Variables().PrefixList("", &api.QueryOptions{Namespace: "prod"}); err != nil || len(metas) != 0 {
		t.Errorf("variables in prod after the refusal: %v, %v", metas, err)
	}
}

// Retention deletes a pruned fleet's member markers in its jobs' namespaces with it.
func TestFleetMemberPruned(t *testing.T) {
	cl, s, _ := startFleets(t, store.NomadOptions{Keep: 1})
	ctx := testContext(t, 30*time.Second)
	ended := func(jobNamespace string) *fleet.Record {
		f := newFleet("default", 1)
		f.Jobs[0].Namespace = jobNamespace
		f.Status = restart.StatusSucceeded
		for ns, m := range store.MembershipsOf(f) {
			if err := s.PutMember(ctx, ns, f.ID, m); err != nil {
				t.Fatal(err)
			}
		}
		return mustCreateFleet(t, ctx, s, f)
	}
	oldest := ended("prod")
	kept := ended("prod")
	ended("default") // prunes the oldest
	if _, err := s.Get(ctx, "default", oldest.ID); !errors.Is(err, store.ErrFleetNotFound) {
		t.Fatalf("the oldest finished fleet was not pruned: %v", err)
	}
	if _, err := s.Member(ctx, "prod", oldest.ID); !errors.Is(err, store.ErrNoMember) {
		t.Errorf("the pruned fleet's member marker in prod: got %v, want ErrNoMember", err)
	}
	if _, err := s.Member(ctx, "prod", kept.ID); err != nil {
		t.Errorf("the kept fleet's member marker: %v", err)
	}
	if _, _, err := cl.Variables().Read(s.MemberPath(kept.ID), &api.QueryOptions{Namespace: "prod"}); err != nil {
		t.Errorf("reading the kept marker directly: %v", err)
	}
}
