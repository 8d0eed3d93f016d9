package schedule_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// A fleet schedule's member marker is written (again) in another namespace, read back as
// written, never listed as a schedule, and removed by DeleteMembers; a token without rights
// there is refused with a PermissionError.
func TestScheduleMemberMarker(t *testing.T) {
	c, admin, ctx := startWithProd(t, nomadsim.Options{ACLs: true})
	s := schedule.NewStore(nomadvars.New(admin, nomadvars.Options{}), "")
	due := time.Now().Add(time.Hour).UTC()
	sc := &schedule.Schedule{At: due, Next: due, Namespace: "default",
		Fleet: &schedule.FleetTarget{Selection: fleet.Selection{Namespace: "*", Filter: `Name matches "^api-"`}, Options: fleet.DefaultOptions()}}
	sc.SetSpec(restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}})
	if err := s.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Member(ctx, "prod", sc.ID); !errors.Is(err, schedule.ErrNoMember) {
		t.Fatalf("Member before any was written: got %v, want ErrNoMember", err)
	}
	want := schedule.MemberOf(sc)
	if want != (schedule.Member{Home: "default", Filter: `Name matches "^api-"`}) {
		t.Fatalf("MemberOf: %+v", want)
	}
	for range 2 { // the second write overwrites the first
		if err := s.PutMember(ctx, "prod", sc.ID, want); err != nil {
			t.Fatalf("PutMember: %v", err)
		}
	}
	if got, err := s.Member(ctx, "prod", sc.ID); err != nil || got != want {
		t.Fatalf("Member: %+v, %v; want %+v", got, err, want)
	}
	list, err := s.List(ctx, "*", "")
	if err != nil || len(list) != 1 || list[0].ID != sc.ID || list[0].Namespace != "default" {
		t.Fatalf("List(*) with a marker in prod: %d schedules, %v; want the one in default", len(list), err)
	}
	if _, err := s.Get(ctx, "prod", sc.ID); !errors.Is(err, schedule.ErrNotFound) {
		t.Errorf("Get in the marker's namespace: got %v, want ErrNotFound", err)
	}

	token := simtest.Token(t, c, "default-writer", `
namespace "default" { variables { path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] } } }`)
	var perm *schedule.PermissionError
	if err := schedule.NewStore(nomadvars.New(simtest.ClientAs(t, c, token), nomadvars.Options{}), "").PutMember(ctx, "prod", sc.ID, want); !errors.As(err, &perm) || perm.Namespace != "prod" {
		t.Fatalf("PutMember in prod with a default-only token: got %v, want a PermissionError in prod", err)
	}

	if err := s.DeleteMembers(ctx, sc.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Member(ctx, "prod", sc.ID); !errors.Is(err, schedule.ErrNoMember) {
		t.Errorf("Member after DeleteMembers: got %v, want ErrNoMember", err)
	}
	if _, err := s.Get(ctx, "default", sc.ID); err != nil {
		t.Errorf("DeleteMembers removed the schedule itself: %v", err)
	}
}
