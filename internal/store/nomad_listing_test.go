package store

import (
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"
)

func TestListedRestartsParsesTheLayout(t *testing.T) {
	t.Parallel()
	const id1, id2 = "0b4c3f1e-8a2d-4e5f-9a1b-2c3d4e5f6a7b", "9f8e7d6c-5b4a-4321-8765-0fedcba98765"
	head := func(ns, path string, index uint64) *api.VariableMetadata {
		return &api.VariableMetadata{Namespace: ns, Path: path, ModifyIndex: index}
	}
	tests := []struct {
		name  string
		metas []*api.VariableMetadata
		want  []ListedRestart
	}{
		{name: "nothing listed", want: []ListedRestart{}},
		{
			name:  "a head",
			metas: []*api.VariableMetadata{head("default", "nomad-restart/web/"+id1, 10)},
			want:  []ListedRestart{{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10}},
		},
		{
			name: "a head and its lease, in either order",
			metas: []*api.VariableMetadata{
				head("default", "nomad-restart/web/"+id1+"/lease", 12),
				head("default", "nomad-restart/web/"+id1, 10),
			},
			want: []ListedRestart{{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10, LeaseIndex: 12}},
		},
		{
			name: "chunks and the active marker are ignored",
			metas: []*api.VariableMetadata{
				head("default", "nomad-restart/web/"+id1, 10),
				head("default", "nomad-restart/web/"+id1+"/c/a1b2", 9),
				head("default", "nomad-restart/web/active", 8),
			},
			want: []ListedRestart{{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10}},
		},
		{
			name:  "a lease whose record is gone: nothing to drive",
			metas: []*api.VariableMetadata{head("prod", "nomad-restart/old/"+id1+"/lease", 5)},
			want:  []ListedRestart{},
		},
		{
			name: "one ID in two namespaces is two restarts, in listing order",
			metas: []*api.VariableMetadata{
				head("prod", "nomad-restart/api/"+id2, 20),
				head("default", "nomad-restart/api/"+id2, 21),
			},
			want: []ListedRestart{
				{Namespace: "prod", ID: id2, JobSegment: "api", HeadIndex: 20},
				{Namespace: "default", ID: id2, JobSegment: "api", HeadIndex: 21},
			},
		},
		{
			name: "other paths: another prefix, a name that is no restart ID, deeper or shallower paths",
			metas: []*api.VariableMetadata{
				head("default", "nomad-restarts/web/"+id2, 30),
				head("default", "nomad-restart/web/not-an-id", 31),
				head("default", "nomad-restart/web/"+id2[:35], 32),
				head("default", "nomad-restart/"+id2, 33),
				head("default", "nomad-restart/web/"+id2+"/other", 34),
				head("default", "nomad-restart/web/"+id2+"/lease/x", 35),
				head("default", "other/nomad-restart/web/"+id2, 36),
			},
			want: []ListedRestart{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := listedRestarts("nomad-restart", tt.metas); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("listedRestarts = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Moved from internal/agent with the listing's parsing: the agent's candidates are these
// restarts' namespace, ID and indexes.
func TestNomadSourceCandidates(t *testing.T) {
	t.Parallel()
	const id1, id2 = "0b4c3f1e-8a2d-4e5f-9a1b-2c3d4e5f6a7b", "9f8e7d6c-5b4a-4321-8765-0fedcba98765"
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
	got := listedRestarts("nomad-restart", metas)
	want := []ListedRestart{
		{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10, LeaseIndex: 12},
		{Namespace: "prod", ID: id2, JobSegment: "api", HeadIndex: 20},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("candidates = %+v\nwant %+v", got, want)
	}
}
