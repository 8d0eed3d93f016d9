package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

// TestNomadRetention: an ended restart's lease variable goes when its driver releases it,
// and creating a restart prunes the job's ended ones beyond Keep, oldest first, leaving
// other jobs' alone.
func TestNomadRetention(t *testing.T) {
	cl, s := startNomadStore(t, store.NomadOptions{Keep: 2})
	ctx := testContext(t, 30*time.Second)

	end := func(rec *restart.Record) {
		t.Helper()
		l := storetest.MustLease(t, ctx, s, rec, "driver")
		rec.Status = restart.StatusSucceeded
		if err := s.Update(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	other := createRecord(t, ctx, s, "default", "api", 1)
	end(other)
	var ids []string
	for i := range 4 {
		rec := storetest.NewRecord("default", "web", 1)
		rec.CreateTime = time.Now().Add(time.Duration(i) * time.Second)
		if err := s.Create(ctx, rec); err != nil {
			t.Fatalf("create #%d: %v", i, err)
		}
		ids = append(ids, rec.ID)
		end(rec)
	}
	// The 4th create pruned the 1st (2 ended were kept: 2nd, 3rd); the 4th ended after.
	recs, err := s.List(ctx, store.Filter{JobID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, r := range recs {
		got[r.ID] = true
	}
	if got[ids[0]] || !got[ids[1]] || !got[ids[2]] || !got[ids[3]] || len(recs) != 3 {
		t.Errorf("kept %d records %v; want the newest 3 of %v", len(recs), got, ids)
	}
	if _, err := s.Get(ctx, "default", other.ID); err != nil {
		t.Errorf("another job's ended restart was pruned: %v", err)
	}
	vars, _, err := cl.Variables().PrefixList("", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		if strings.HasSuffix(v.Path, "/lease") {
			t.Errorf("lease variable %s left after its restart ended", v.Path)
		}
		if strings.Contains(v.Path, ids[0]) {
			t.Errorf("variable %s of a pruned restart left", v.Path)
		}
	}
}
