package cli

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestLocalRecordOfAnotherCluster: a local record filed against another Nomad address is not
// listed, and resume refuses it with one line naming its cluster.
func TestLocalRecordOfAnotherCluster(t *testing.T) {
	_, e := startSimEnv(t, nomadsim.Options{}, simpleJob("web", api.JobTypeService, 1))
	ctx := testCtx(t)
	local := e.localStore(t)
	other := "http://nomad.elsewhere:4646"
	rec := storetest.NewRecord("default", "web", 1)
	if err := store.ScopeToCluster(local, other).Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	id := rec.ID[:8]
	if code, out, errOut := e.run(ctx, "status"); strings.Contains(out, id) {
		t.Fatalf("status lists another cluster's restart: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := e.run(ctx, "resume", id)
	if code != 1 || !strings.Contains(errOut, "belongs to the Nomad cluster at "+other) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("resume of another cluster's restart: exit %d, want 1 and one line\n%s\n%s", code, out, errOut)
	}
	got, err := local.Get(context.Background(), rec.Namespace, rec.ID)
	if err != nil || got.Status != rec.Status || got.ModifyIndex != rec.ModifyIndex {
		t.Fatalf("the refused resume changed the record: %v %+v", err, got)
	}
	// Seen from its own cluster it is there.
	if recs, err := store.ScopeToCluster(local, other).List(context.Background(), store.Filter{}); err != nil || len(recs) != 1 {
		t.Fatalf("List from its own cluster: %d records, %v", len(recs), err)
	}
}
