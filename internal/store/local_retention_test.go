package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

// TestLocalRetention: creating a restart prunes the job's ended ones beyond
// store.DefaultKeep, oldest first, and leaves restarts in progress and other jobs alone.
func TestLocalRetention(t *testing.T) {
	_, s := newLocalStore(t)
	ctx := context.Background()
	base := time.Now()
	other := storetest.NewRecord("default", "api", 1)
	other.Status = restart.StatusSucceeded
	if err := s.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range store.DefaultKeep + 3 {
		rec := storetest.NewRecord("default", "web", 1)
		rec.CreateTime = base.Add(time.Duration(i) * time.Second)
		rec.Status = restart.StatusSucceeded
		if err := s.Create(ctx, rec); err != nil {
			t.Fatalf("create #%d: %v", i, err)
		}
		ids = append(ids, rec.ID)
	}
	recs, err := s.List(ctx, store.Filter{JobID: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != store.DefaultKeep {
		t.Fatalf("kept %d ended restarts of web, want %d", len(recs), store.DefaultKeep)
	}
	for _, id := range ids[:3] {
		if _, err := s.Get(ctx, "default", id); err == nil {
			t.Errorf("oldest restart %s was kept", id[:8])
		}
	}
	if _, err := s.Get(ctx, "default", ids[len(ids)-1]); err != nil {
		t.Errorf("newest restart pruned: %v", err)
	}
	if _, err := s.Get(ctx, "default", other.ID); err != nil {
		t.Errorf("another job's restart pruned: %v", err)
	}
}
