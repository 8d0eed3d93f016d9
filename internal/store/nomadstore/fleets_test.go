package nomadstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

// newFleet is a pending fleet of jobs jobs in namespace ns, as a driver files it.
func newFleet(ns string, jobs int) *fleet.Record {
	f := &fleet.Record{
		Fleet: fleet.Fleet{
			ID:      uuid.NewString(),
			Options: fleet.DefaultOptions(),
			Status:  restart.StatusPending,
			Control: restart.Control{Intent: restart.IntentRun},
		},
		Namespace: ns,
		Selection: fleet.Selection{Namespace: ns, Filter: `Meta["team"] == "payments"`},
		Spec:      restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, OnError: restart.OnErrorAsk},
		Reason:    "rotate the database credentials",
	}
	for i := range jobs {
		f.Jobs = append(f.Jobs, fleet.Job{
			Namespace: ns,
			JobID:     fmt.Sprintf("payments-service-%04d", i),
			Priority:  50,
			RestartID: fleet.ChildID(f.ID, ns, fmt.Sprintf("payments-service-%04d", i)),
			Status:    fleet.JobPending,
		})
	}
	return f
}

func mustCreateFleet(t testing.TB, ctx context.Context, s store.Fleets, f *fleet.Record) *fleet.Record {
	t.Helper()
	if err := s.Create(ctx, f); err != nil {
		t.Fatalf("CreateFleet: %v", err)
	}
	return f
}

func TestNomadFleetCreateGetUpdate(t *testing.T) {
	_, s, _ := startFleets(t, nomadstore.Options{})
	ctx := storetest.Context(t, 30*time.Second)
	f := mustCreateFleet(t, ctx, s, newFleet("", 3))
	if f.Namespace != "default" || f.CreateIndex == 0 || f.ModifyIndex == 0 || f.CreateTime.IsZero() {
		t.Fatalf("CreateFleet did not fill in the namespace, indexes and times: %+v", f)
	}
	if err := s.Create(ctx, &fleet.Record{Fleet: fleet.Fleet{ID: f.ID}, Namespace: "default"}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a second CreateFleet of one ID: got %v, want ErrExists", err)
	}

	got, err := s.Get(ctx, "default", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ModifyIndex != f.ModifyIndex || len(got.Jobs) != 3 || got.Jobs[2].JobID != f.Jobs[2].JobID || got.Reason != f.Reason {
		t.Fatalf("GetFleet: got %+v, want %+v", got, f)
	}

	stale := *got
	got.Status = restart.StatusRunning
	got.Jobs[0].Status = fleet.JobRunning
	before := got.ModifyIndex
	if err := s.Update(ctx, got); err != nil {
		t.Fatalf("UpdateFleet: %v", err)
	}
	if got.ModifyIndex <= before || !got.ModifyTime.After(f.ModifyTime.Add(-time.Nanosecond)) {
		t.Fatalf("UpdateFleet did not set the new ModifyIndex and ModifyTime: %d (was %d), %v", got.ModifyIndex, before, got.ModifyTime)
	}
	stale.Status = restart.StatusCanceled
	if err := s.Update(ctx, &stale); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("UpdateFleet of a stale copy: got %v, want ErrConflict", err)
	}
	again, err := s.Get(ctx, "*", f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if again.Status != restart.StatusRunning || again.Jobs[0].Status != fleet.JobRunning || again.ModifyIndex != got.ModifyIndex {
		t.Fatalf("after a conflict the stored fleet changed: %+v", again)
	}

	for _, id := range []string{uuid.NewString(), "../x"} {
		if _, err := s.Get(ctx, "default", id); !errors.Is(err, store.ErrFleetNotFound) {
			t.Errorf("Get(%q): got %v, want ErrFleetNotFound", id, err)
		}
	}
}

// A fleet of 500 jobs fits its one variable and reads back whole; one whose record cannot
// be compressed under 64 KiB is refused with FleetTooLargeError and nothing is written.
func TestNomadFleetSize(t *testing.T) {
	cl, s, _ := startFleets(t, nomadstore.Options{})
	ctx := storetest.Context(t, 30*time.Second)
	big := newFleet("default", 500)
	for i := range big.Jobs {
		big.Jobs[i].Reason = "waiting for restart " + big.Jobs[i].RestartID[:8] + " of this job to end"
	}
	mustCreateFleet(t, ctx, s, big)
	got, err := s.Get(ctx, "default", big.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Jobs) != 500 || !reflect.DeepEqual(got.Jobs, big.Jobs) {
		t.Fatalf("a 500-job fleet did not round-trip: %d jobs, last %+v", len(got.Jobs), got.Jobs[len(got.Jobs)-1])
	}
	if size := variableSize(t, cl, "nomad-restart/~fleets/"+big.ID+"/fleet"); size > 65536 {
		t.Fatalf("the variable holds %d bytes, over Nomad's 65536", size)
	}

	huge := newFleet("default", 500)
	for i := range huge.Jobs {
		huge.Jobs[i].Reason = randomHex(t, 200) // incompressible
	}
	err = s.Create(ctx, huge)
	var tooLarge *store.FleetTooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Jobs != 500 || tooLarge.Bytes <= tooLarge.Limit || tooLarge.Limit != 65536 {
		t.Fatalf("CreateFleet of an oversized fleet: got %v, want a FleetTooLargeError", err)
	}
	if _, err := s.Get(ctx, "default", huge.ID); !errors.Is(err, store.ErrFleetNotFound) {
		t.Fatalf("an oversized fleet was written anyway: %v", err)
	}
	// An update that would not fit is refused too, and leaves the record as it was.
	got.Jobs[0].Reason = randomHex(t, 100000)
	if err := s.Update(ctx, got); !errors.As(err, &tooLarge) {
		t.Fatalf("UpdateFleet of an oversized fleet: got %v, want a FleetTooLargeError", err)
	}
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestNomadFleetFindAndList(t *testing.T) {
	_, s, _ := startFleets(t, nomadstore.Options{})
	ctx := storetest.Context(t, 30*time.Second)
	a := newFleet("default", 1)
	a.ID = "aaaa1111-" + a.ID[9:]
	b := newFleet("ops", 1)
	b.ID = "aaaa2222-" + b.ID[9:]
	c := newFleet("ops", 1)
	c.ID = "bbbb3333-" + c.ID[9:]
	for _, f := range []*fleet.Record{a, b, c} {
		mustCreateFleet(t, ctx, s, f)
	}

	tests := []struct {
		ns, prefix string
		want       string // the fleet's ID, or "ambiguous", or "none"
	}{
		{"*", "aaaa1", a.ID},
		{"", "aaaa2", b.ID},
		{"*", "bbbb", c.ID},
		{"*", c.ID, c.ID},
		{"ops", "aaaa", b.ID},
		{"default", "bbbb", "none"},
		{"*", "aaaa", "ambiguous"},
		{"*", "cccc", "none"},
	}
	for _, tc := range tests {
		got, err := s.Find(ctx, tc.ns, tc.prefix)
		var amb *store.AmbiguousIDError
		switch tc.want {
		case "ambiguous":
			if !errors.As(err, &amb) || len(amb.Matches) != 2 || !strings.Contains(err.Error(), "fleet ID prefix") {
				t.Errorf("Find(%q, %q): got %v, want an AmbiguousIDError of 2 fleets", tc.ns, tc.prefix, err)
			}
		case "none":
			if !errors.Is(err, store.ErrFleetNotFound) {
				t.Errorf("Find(%q, %q): got %v, want ErrFleetNotFound", tc.ns, tc.prefix, err)
			}
		default:
			if err != nil || got.ID != tc.want {
				t.Errorf("Find(%q, %q): got %v, %v, want %s", tc.ns, tc.prefix, got, err, tc.want)
			}
		}
	}

	if _, err := store.Mutate(ctx, s, "ops", b.ID, func(f *fleet.Record) error {
		f.Status = restart.StatusSucceeded
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	listTests := []struct {
		ns     string
		active bool
		want   []string // newest first
	}{
		{"*", false, []string{c.ID, b.ID, a.ID}},
		{"", true, []string{c.ID, a.ID}},
		{"ops", false, []string{c.ID, b.ID}},
		{"ops", true, []string{c.ID}},
		{"default", false, []string{a.ID}},
	}
	for _, tc := range listTests {
		got, err := s.List(ctx, tc.ns, tc.active)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, f := range got {
			ids = append(ids, f.ID)
		}
		if strings.Join(ids, " ") != strings.Join(tc.want, " ") {
			t.Errorf("List(%q, active=%v): got %v, want %v", tc.ns, tc.active, ids, tc.want)
		}
	}
}

// The driver's writes do not wake WatchFleetControl; an operator's change of Control
// (MutateFleet, which rings) does, and WatchFleet follows every write.
func TestNomadFleetWatches(t *testing.T) {
	cl, s, _ := startFleets(t, nomadstore.Options{})
	ctx := storetest.Context(t, 30*time.Second)
	f := mustCreateFleet(t, ctx, s, newFleet("default", 2))

	first, token, err := s.WatchControl(ctx, "default", f.ID, 0)
	if err != nil || token == 0 || first == nil || first.ID != f.ID {
		t.Fatalf("WatchFleetControl with token 0: %v, %d, %v", first, token, err)
	}
	bellIndex := func() uint64 {
		v, _, err := cl.Variables().Read("nomad-restart/~fleets/"+f.ID+"/control", nil)
		if err != nil {
			t.Fatal(err)
		}
		return v.ModifyIndex
	}
	if bellIndex() != token {
		t.Fatalf("the first token %d is not the bell's index %d", token, bellIndex())
	}

	woke := storetest.WatchControlInBackground(ctx, s, "default", f.ID, token)
	watched := storetest.WatchInBackground(ctx, s, "default", f.ID, f.ModifyIndex)

	// The driver's own writes: WatchFleet answers the first; the bell stays as it was, so
	// a WatchFleetControl woken by them would answer with Control still "run".
	first.Status = restart.StatusRunning
	for range 3 {
		if err := s.Update(ctx, first); err != nil {
			t.Fatal(err)
		}
	}
	w := <-watched
	if w.Err != nil || w.Rec.ModifyIndex <= f.ModifyIndex || w.Rec.Status != restart.StatusRunning {
		t.Fatalf("WatchFleet after an update: %+v, %v", w.Rec, w.Err)
	}
	if bellIndex() != token {
		t.Fatal("UpdateFleet rang the control bell")
	}

	if _, err := store.Mutate(ctx, s, "default", f.ID, func(f *fleet.Record) error {
		f.Control = restart.Control{Intent: restart.IntentPause, By: "alice"}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	a := <-woke
	if a.Err != nil || a.Rec.Control.Intent != restart.IntentPause || a.Token <= token || a.Token != bellIndex() {
		t.Fatalf("WatchFleetControl after MutateFleet: %+v, %d, %v; want the paused fleet and the bell's new index", a.Rec, a.Token, a.Err)
	}

	// RingFleet alone wakes it too.
	woke = storetest.WatchControlInBackground(ctx, s, "default", f.ID, a.Token)
	if err := s.Ring(ctx, "default", f.ID); err != nil {
		t.Fatal(err)
	}
	if a2 := <-woke; a2.Err != nil || a2.Token <= a.Token {
		t.Fatalf("WatchFleetControl after RingFleet: %d, %v", a2.Token, a2.Err)
	}

	// No fleet, no bell.
	missing := uuid.NewString()
	if _, _, err := s.WatchControl(ctx, "default", missing, 0); !errors.Is(err, store.ErrFleetNotFound) {
		t.Fatalf("WatchFleetControl of a missing fleet: got %v, want ErrFleetNotFound", err)
	}
	if _, _, err := cl.Variables().Read("nomad-restart/~fleets/"+missing+"/control", nil); err == nil {
		t.Fatal("WatchFleetControl left a bell for a missing fleet")
	}
}

func TestNomadFleetLease(t *testing.T) {
	_, s, _ := startFleets(t, nomadstore.Options{})
	ctx := storetest.Context(t, 30*time.Second)
	f := mustCreateFleet(t, ctx, s, newFleet("default", 1))

	if h, err := s.LeaseHolder(ctx, "default", f.ID); err != nil || h != "" {
		t.Fatalf("FleetLeaseHolder of a fleet never driven: %q, %v", h, err)
	}
	l, err := s.AcquireLease(ctx, "default", f.ID, "host-a pid 1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "default", f.ID, "host-b pid 2"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("AcquireFleetLease of a held lease: got %v, want ErrLeaseHeld", err)
	}
	if h, err := s.LeaseHolder(ctx, "*", f.ID); err != nil || h != "host-a pid 1" {
		t.Fatalf("FleetLeaseHolder: %q, %v", h, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if h, err := s.LeaseHolder(ctx, "default", f.ID); err != nil || h != "" {
		t.Fatalf("FleetLeaseHolder after Release: %q, %v", h, err)
	}
	l2, err := s.AcquireLease(ctx, "default", f.ID, "host-b pid 2")
	if err != nil {
		t.Fatalf("AcquireFleetLease after Release: %v", err)
	}
	if h, _ := s.LeaseHolder(ctx, "default", f.ID); h != "host-b pid 2" {
		t.Fatalf("FleetLeaseHolder after a new driver took the lease: %q", h)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "default", uuid.NewString(), "x"); !errors.Is(err, store.ErrFleetNotFound) {
		t.Fatalf("AcquireFleetLease of a missing fleet: got %v, want ErrFleetNotFound", err)
	}
}

// A fleet lease that Nomad no longer holds for its driver is lost, as a restart's is.
func TestNomadFleetLeaseLost(t *testing.T) {
	cl, s, _ := startFleets(t, nomadstore.Options{RenewEvery: 20 * time.Millisecond, Logger: quiet})
	ctx := storetest.Context(t, 30*time.Second)
	f := mustCreateFleet(t, ctx, s, newFleet("default", 1))
	l, err := s.AcquireLease(ctx, "default", f.ID, "driver")
	if err != nil {
		t.Fatal(err)
	}
	releaseUnder(t, ctx, cl, "nomad-restart/~fleets/"+f.ID+"/lease", l)
	if _, err := s.AcquireLease(ctx, "default", f.ID, "driver-2"); err != nil {
		t.Fatalf("AcquireFleetLease after the lease was lost: %v", err)
	}
}

// Creating a fleet deletes the namespace's finished fleets beyond the newest Keep, with
// their bells and leases, and leaves active fleets and other namespaces alone.
func TestNomadFleetRetention(t *testing.T) {
	cl, s, _ := startFleets(t, nomadstore.Options{Keep: 2})
	ctx := storetest.Context(t, 30*time.Second)
	var ended []*fleet.Record
	createEnded := func() {
		f := newFleet("default", 1)
		f.Status = restart.StatusSucceeded
		ended = append(ended, mustCreateFleet(t, ctx, s, f))
	}
	for range 3 { // Keep and the new one: nothing to prune yet
		createEnded()
	}
	oldest := ended[0]
	if err := s.Ring(ctx, "default", oldest.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.Variables().Create(&api.Variable{Path: "nomad-restart/~fleets/" + oldest.ID + "/lease", Items: map[string]string{"holder": "gone"}}, nil); err != nil {
		t.Fatal(err)
	}
	createEnded()                                                 // prunes the oldest
	running := mustCreateFleet(t, ctx, s, newFleet("default", 1)) // prunes the second
	other := newFleet("ops", 1)
	other.Status = restart.StatusFailed
	mustCreateFleet(t, ctx, s, other)
	mustCreateFleet(t, ctx, s, newFleet("default", 1)) // prunes nothing more

	got, err := s.List(ctx, "*", false)
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{}
	for _, f := range got {
		kept[f.ID] = true
	}
	for i, f := range ended {
		if want := i >= 2; kept[f.ID] != want {
			t.Errorf("finished fleet %d (of 4, oldest first) kept=%v, want %v", i, kept[f.ID], want)
		}
	}
	if !kept[running.ID] || !kept[other.ID] || len(got) != 5 {
		t.Errorf("retention removed an active fleet or another namespace's: kept %v", kept)
	}
	for _, name := range []string{"fleet", "control", "lease"} {
		if _, _, err := cl.Variables().Read("nomad-restart/~fleets/"+oldest.ID+"/"+name, nil); err == nil {
			t.Errorf("the pruned fleet's %s variable is still there", name)
		}
	}
}

// A fleet's record, bell and lease are no restarts: the restart store's Find and List and
// its lister never show them.
func TestNomadFleetNotARestart(t *testing.T) {
	cl, s, rs := startFleets(t, nomadstore.Options{})
	ctx := storetest.Context(t, 30*time.Second)
	rec := storetest.CreateRecord(t, ctx, rs, "default", "web", 1)
	f := mustCreateFleet(t, ctx, s, newFleet("default", 1))
	if err := s.Ring(ctx, "default", f.ID); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, "default", f.ID, "driver")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx) }()

	metas, _, err := cl.Variables().PrefixList("nomad-restart/~fleets/", nil)
	if err != nil || len(metas) != 3 {
		t.Fatalf("want the fleet's three variables in Nomad: %v, %v", metas, err)
	}
	for _, ns := range []string{"default", "*", ""} {
		recs, err := rs.List(ctx, store.Filter{Namespace: ns})
		if err != nil || len(recs) != 1 || recs[0].ID != rec.ID {
			t.Errorf("List(%q) shows more than the one restart: %v, %v", ns, recs, err)
		}
		if _, err := rs.Find(ctx, ns, f.ID[:8]); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Find(%q) of the fleet's ID prefix: got %v, want ErrNotFound", ns, err)
		}
		if _, err := rs.Get(ctx, ns, f.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("Get(%q) of the fleet's ID: got %v, want ErrNotFound", ns, err)
		}
	}
	listing, err := nomadstore.NewLister(varsOn(cl), "").List(ctx, "*", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(listing.Restarts) != 1 || listing.Restarts[0].ID != rec.ID {
		t.Fatalf("the lister shows more than the one restart: %+v", listing.Restarts)
	}
}

// A token without the variables' write capability is told which rule to grant.
func TestNomadFleetACLs(t *testing.T) {
	c := startWithACLs(t)
	ctx := storetest.Context(t, 30*time.Second)
	reader := simtest.Token(t, c, "reader", `
namespace "default" {
  policy = "read"
  variables {
    path "nomad-restart/*" { capabilities = ["read", "list"] }
  }
}`)
	none := simtest.Token(t, c, "none", `namespace "default" { policy = "read" }`)
	admin := fleetsAs(t, c, c.BootstrapToken())
	f := mustCreateFleet(t, ctx, admin, newFleet("default", 1))

	rs := fleetsAs(t, c, reader)
	err := rs.Create(ctx, newFleet("default", 1))
	var perm *store.PermissionError
	if !errors.As(err, &perm) || perm.Capability != "write" || perm.Namespace != "default" {
		t.Fatalf("CreateFleet with a read-only token: got %v, want a PermissionError for write", err)
	}
	for _, want := range []string{`"write"`, `path "nomad-restart/*"`, `namespace "default"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not mention %s", err, want)
		}
	}
	if _, err := rs.Get(ctx, "default", f.ID); err != nil {
		t.Fatalf("GetFleet with a reader token: %v", err)
	}
	if err := rs.Ring(ctx, "default", f.ID); !errors.As(err, &perm) || perm.Capability != "write" {
		t.Fatalf("RingFleet with a read-only token: got %v, want a PermissionError for write", err)
	}
	if _, err := rs.AcquireLease(ctx, "default", f.ID, "x"); !errors.As(err, &perm) || perm.Capability != "write" {
		t.Fatalf("AcquireFleetLease with a read-only token: got %v, want a PermissionError for write", err)
	}

	ns := fleetsAs(t, c, none)
	// Nomad leaves out of a listing what the token may not list: nothing to find.
	if _, err := ns.Find(ctx, "default", f.ID[:6]); !errors.Is(err, store.ErrFleetNotFound) {
		t.Fatalf("FindFleet without the variables' list capability: got %v, want ErrFleetNotFound", err)
	}
	if _, err := ns.Get(ctx, "default", f.ID); !errors.As(err, &perm) || perm.Capability != "read" {
		t.Fatalf("GetFleet without the variables' read capability: got %v, want a PermissionError for read", err)
	}
}

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
	cl, s, rs := startFleets(t, nomadstore.Options{})
	ctx := storetest.Context(t, 30*time.Second)
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
	if listing, err := nomadstore.NewLister(varsOn(cl), "").List(ctx, "*", 0, 0); err != nil || len(listing.Restarts) != 0 {
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
	c := startWithACLs(t)
	ctx := storetest.Context(t, 30*time.Second)
	admin := simtest.ClientAs(t, c, c.BootstrapToken())
	if _, err := admin.Namespaces().Register(&api.Namespace{Name: "prod"}, nil); err != nil {
		t.Fatal(err)
	}
	token := simtest.Token(t, c, "default-writer", `
namespace "default" {
  variables { path "nomad-restart/*" { capabilities = ["read", "list", "write", "destroy"] } }
}`)
	s := fleetsAs(t, c, token)
	f := mustCreateFleet(t, ctx, s, newFleet("default", 1))
	err := s.PutMember(ctx, "prod", f.ID, store.Membership{Home: "default", Jobs: []string{"db"}})
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
	cl, s, _ := startFleets(t, nomadstore.Options{Keep: 1})
	ctx := storetest.Context(t, 30*time.Second)
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
