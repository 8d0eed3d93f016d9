package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// An update that changes one range of a big record is one write, the head's, which carries
// the changed chunk; carried chunks are moved out to variables of their own once they would
// pass their bound, and a reader that never saw the record reads it whole at every step.
func TestNomadHeadCarriesChangedChunks(t *testing.T) {
	cl, cnt, s := startCountedStore(t, store.NomadOptions{})
	ctx := testContext(t, time.Minute)
	rec := createRecord(t, ctx, s, "default", "big", 3000)
	head := "nomad-restart/big/" + rec.ID
	oneWrite, movedOut := 0, 0
	for i := range 20 {
		// Like a driver's batches: each update changes the next range of allocations.
		for j := range 100 {
			rec.Allocs[i*100+j].State = "done"
		}
		puts := cnt.count("PUT")
		if err := s.Update(ctx, rec); err != nil {
			t.Fatal(err)
		}
		switch cnt.count("PUT") - puts {
		case 1:
			oneWrite++
		default:
			movedOut++
		}
		v, _, err := cl.Variables().Read(head, nil)
		if err != nil {
			t.Fatal(err)
		}
		size := 0
		for k, val := range v.Items {
			size += len(k) + len(val)
		}
		if size > 65536 {
			t.Fatalf("update %d: head of %d bytes, over Nomad's limit", i, size)
		}
		got, err := store.NewNomad(cl, store.NomadOptions{}).Get(ctx, "default", rec.ID)
		if err != nil {
			t.Fatalf("update %d: a fresh reader: %v", i, err)
		}
		for k := range rec.Allocs {
			if got.Allocs[k].State != rec.Allocs[k].State {
				t.Fatalf("update %d: allocation %d read as %q, want %q", i, k, got.Allocs[k].State, rec.Allocs[k].State)
			}
		}
	}
	t.Logf("%d updates in one write, %d moved chunks out", oneWrite, movedOut)
	if oneWrite < 10 || movedOut == 0 {
		t.Fatalf("%d updates were one write, %d moved chunks out: want most in one write, and some moving out", oneWrite, movedOut)
	}
	// An unhurried write leaves the head carrying nothing.
	rec.Allocs[2999].State = "done"
	if err := s.Update(store.Unhurried(ctx), rec); err != nil {
		t.Fatal(err)
	}
	v, _, err := cl.Variables().Read(head, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range v.Items {
		if strings.HasPrefix(k, "c.") {
			t.Fatalf("after an unhurried write the head still carries %s", k)
		}
	}
	if got, err := store.NewNomad(cl, store.NomadOptions{}).Get(ctx, "default", rec.ID); err != nil || got.Allocs[2999].State != "done" {
		t.Fatalf("after an unhurried write: %v", err)
	}
	// Nothing leaks: the variables under the record are exactly the chunks the head names
	// and does not carry, once the replaced ones are deleted (off the writer's path).
	simtest.WaitFor(t, ctx, "replaced chunks to be deleted", func() bool {
		listed, named := chunkVariables(t, cl, head)
		return listed == named
	})
}

// chunkVariables counts the chunk variables under a record's head, and the chunks the head
// names that are variables (not those it carries).
func chunkVariables(t *testing.T, cl *api.Client, head string) (listed, named int) {
	t.Helper()
	metas, _, err := cl.Variables().PrefixList(head+"/c/", nil)
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := cl.Variables().Read(head, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Fields(v.Items["chunks"]) {
		if _, carried := v.Items["c."+name]; !carried {
			named++
		}
	}
	return len(metas), named
}
