package agent

import (
	"reflect"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/store"
)

// The listing's parsing is the store's (TestNomadSourceCandidates in internal/store); the
// source keeps each listed restart's namespace, ID and indexes, in the listing's order.
func TestCandidatesFromListedRestarts(t *testing.T) {
	t.Parallel()
	const id1, id2 = "0b4c3f1e-8a2d-4e5f-9a1b-2c3d4e5f6a7b", "9f8e7d6c-5b4a-4321-8765-0fedcba98765"
	listed := []store.ListedRestart{
		{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10, LeaseIndex: 12},
		{Namespace: "prod", ID: id2, JobSegment: "api", HeadIndex: 20},
	}
	got := candidates(listed)
	want := []candidate{
		{ns: "default", id: id1, headIndex: 10, leaseIndex: 12},
		{ns: "prod", id: id2, headIndex: 20},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("candidates = %+v\nwant %+v", got, want)
	}
	if got := candidates(nil); got == nil || len(got) != 0 {
		t.Errorf("candidates(nil) = %#v, want an empty pass", got)
	}
}
