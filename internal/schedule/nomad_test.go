package schedule_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/schedule"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// startWithProd starts nomadsim with opts and a namespace "prod" beside default, and
// returns it, a management client of it and the test's context.
func startWithProd(t *testing.T, opts nomadsim.Options) (*nomadsim.Cluster, *api.Client, context.Context) {
	t.Helper()
	c := simtest.Start(t, opts)
	cl := simtest.ClientAs(t, c, c.BootstrapToken())
	if _, err := cl.Namespaces().Register(&api.Namespace{Name: "prod"}, nil); err != nil {
		t.Fatal(err)
	}
	return c, cl, ctxT(t)
}

// storeOn opens a schedule store through cl, under the default prefix.
func storeOn(cl *api.Client) *schedule.Store {
	return schedule.NewStore(nomadvars.New(cl, nomadvars.Options{}), "")
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestStoreRoundTripAndCAS(t *testing.T) {
	_, cl, ctx := startWithProd(t, nomadsim.Options{})
	st := storeOn(cl)
	t0 := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	spec := restart.Spec{BatchSizes: []restart.BatchSize{{N: 2}}, OnError: restart.OnErrorFail, MinHealthyTime: 3 * time.Second, MinHealthyTimeGiven: true}
	a := &schedule.Schedule{JobID: "web", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Next: t0, Grace: time.Minute}
	a.SetSpec(spec)
	if err := st.Create(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := &schedule.Schedule{Namespace: "prod", JobID: "api", At: t0, Next: t0}
	if err := st.Create(ctx, b); err != nil {
		t.Fatal(err)
	}
	if a.ID == "" || a.ModifyIndex == 0 || a.Namespace != "default" || a.Status != schedule.StatusActive {
		t.Fatalf("created %+v", a)
	}

	got, err := st.Get(ctx, "default", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Cron != a.Cron || got.TimeZone != a.TimeZone || !got.Next.Equal(t0) || got.ModifyIndex != a.ModifyIndex ||
		!got.RestartSpec().MinHealthyTimeGiven || got.RestartSpec().MinHealthyTime != 3*time.Second || got.Spec.OnError != restart.OnErrorFail {
		t.Fatalf("read back %+v", got)
	}
	if _, err := st.Get(ctx, "prod", a.ID); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("a schedule read in another namespace: %v", err)
	}

	all, err := st.List(ctx, "*", "")
	if err != nil || len(all) != 2 {
		t.Fatalf("List(*) = %d, %v", len(all), err)
	}
	onlyProd, err := st.List(ctx, "prod", "")
	if err != nil || len(onlyProd) != 1 || onlyProd[0].ID != b.ID || onlyProd[0].Namespace != "prod" {
		t.Fatalf("List(prod) = %v, %v", onlyProd, err)
	}
	byJob, err := st.List(ctx, "*", "web")
	if err != nil || len(byJob) != 1 || byJob[0].ID != a.ID {
		t.Fatalf("List(job web) = %v, %v", byJob, err)
	}
	found, err := st.Find(ctx, "*", a.ID[:6])
	if err != nil || found.ID != a.ID {
		t.Fatalf("Find(prefix) = %v, %v", found, err)
	}
	if _, err := st.Find(ctx, "*", "zz"); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("Find(nothing) = %v", err)
	}
	if _, err := st.Find(ctx, "*", ""); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("Find(empty) = %v", err)
	}

	// Check-and-set: a stale copy cannot overwrite a newer one.
	stale := *got
	got.Next = t0.Add(24 * time.Hour)
	if err := st.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	stale.Next = t0.Add(48 * time.Hour)
	if err := st.Update(ctx, &stale); !errors.Is(err, schedule.ErrConflict) {
		t.Fatalf("stale update: %v, want ErrConflict", err)
	}
	if err := st.Delete(ctx, &stale); !errors.Is(err, schedule.ErrConflict) {
		t.Fatalf("stale delete: %v, want ErrConflict", err)
	}
	after, err := storeOn(cl).Mutate(ctx, "default", a.ID, func(s *schedule.Schedule) (bool, error) {
		s.Missed++
		return true, nil
	})
	if err != nil || after.Missed != 1 || !after.Next.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("Mutate = %+v, %v", after, err)
	}
	if err := st.Delete(ctx, after); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, "default", a.ID); !errors.Is(err, schedule.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// Schedules share the restart store's prefix, so its listings must not take them for
// records: a restart store with a schedule next to its records lists, finds and creates
// as before.
func TestSchedulesAreInvisibleToTheRestartStore(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	cl := simtest.ClientAs(t, c, c.BootstrapToken())
	ctx := ctxT(t)
	sched := storeOn(cl)
	if err := sched.Create(ctx, &schedule.Schedule{JobID: "web", Cron: "@daily", Next: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	rs := nomadstore.NewRestarts(nomadvars.New(cl, nomadvars.Options{}), nomadstore.Options{})
	rec := &restart.Record{Namespace: "default", JobID: "web", Status: restart.StatusPending}
	if err := rs.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	recs, err := rs.List(ctx, store.Filter{Namespace: "*"})
	if err != nil || len(recs) != 1 || recs[0].ID != rec.ID {
		t.Fatalf("restart store List with a schedule present = %v, %v", recs, err)
	}
	if _, err := rs.Find(ctx, "*", rec.ID[:4]); err != nil {
		t.Fatalf("restart store Find: %v", err)
	}
	// And the schedule listing ignores the records.
	got, err := sched.List(ctx, "*", "")
	if err != nil || len(got) != 1 {
		t.Fatalf("schedules = %v, %v", got, err)
	}
}

func TestStorePermissionDenied(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{ACLs: true})
	tok := simtest.Token(t, c, "reader", `namespace "default" { capabilities = ["read-job"] }`)
	ctx := ctxT(t)
	st := storeOn(simtest.ClientAs(t, c, tok))
	err := st.Create(ctx, &schedule.Schedule{JobID: "web", Cron: "@daily", Next: time.Now().Add(time.Hour)})
	var perm *schedule.PermissionError
	if !errors.As(err, &perm) || perm.Capability != "write" {
		t.Fatalf("create without variable rights: %v", err)
	}
	// Nomad filters a listing by the token's rights: nothing is listed, nothing learnt.
	if got, err := st.List(ctx, "default", ""); err != nil || len(got) != 0 {
		t.Fatalf("list without variable rights = %v, %v; want nothing", got, err)
	}
}

// The schedules' directory is one the restart store's job segments can never be.
func TestDirIsReserved(t *testing.T) {
	if !nomadvars.Reserved(schedule.Dir) {
		t.Fatalf("%q is not a reserved segment: a job could be named like it", schedule.Dir)
	}
}
