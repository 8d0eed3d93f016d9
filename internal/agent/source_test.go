package agent

import (
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestNomadSourceCandidates(t *testing.T) {
	t.Parallel()
	const id1, id2 = "0b4c3f1e-8a2d-4e5f-9a1b-2c3d4e5f6a7b", "9f8e7d6c-5b4a-4321-8765-0fedcba98765"
	s := &nomadSource{prefix: "nomad-restart"}
	metas := []*api.VariableMetadata{
		{Namespace: "default", Path: "nomad-restart/web/" + id1, ModifyIndex: 10},
		{Namespace: "default", Path: "nomad-restart/web/" + id1 + "/lease", ModifyIndex: 12},
		{Namespace: "default", Path: "nomad-restart/web/" + id1 + "/c/a1b2", ModifyIndex: 9},
		{Namespace: "default", Path: "nomad-restart/web/active", ModifyIndex: 8},
		{Namespace: "prod", Path: "nomad-restart/api/" + id2, ModifyIndex: 20},
		// A lease whose record is gone: nothing to drive.
		{Namespace: "prod", Path: "nomad-restart/old/" + id1 + "/lease", ModifyIndex: 5},
		// Not ours: another prefix, a name that is no restart ID.
		{Namespace: "default", Path: "nomad-restarts/web/" + id2, ModifyIndex: 30},
		{Namespace: "default", Path: "nomad-restart/web/not-an-id", ModifyIndex: 31},
	}
	got := s.candidates(metas)
	want := []candidate{
		{ns: "default", id: id1, headIndex: 10, leaseIndex: 12},
		{ns: "prod", id: id2, headIndex: 20},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("candidates = %+v\nwant %+v", got, want)
	}
}
