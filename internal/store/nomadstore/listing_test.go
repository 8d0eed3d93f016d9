package nomadstore

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestListedRestartsParsesTheLayout(t *testing.T) {
	t.Parallel()
	const id1, id2 = "0b4c3f1e-8a2d-4e5f-9a1b-2c3d4e5f6a7b", "9f8e7d6c-5b4a-4321-8765-0fedcba98765"
	head := func(ns, path string, index uint64) *nomadvars.Metadata {
		return &nomadvars.Metadata{Namespace: ns, Path: path, ModifyIndex: index}
	}
	tests := []struct {
		name  string
		metas []*nomadvars.Metadata
		want  []store.ListedRestart
	}{
		{name: "nothing listed", want: []store.ListedRestart{}},
		{
			name:  "a head",
			metas: []*nomadvars.Metadata{head("default", "nomad-restart/web/"+id1, 10)},
			want:  []store.ListedRestart{{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10}},
		},
		{
			name: "a head and its lease, in either order",
			metas: []*nomadvars.Metadata{
				head("default", "nomad-restart/web/"+id1+"/lease", 12),
				head("default", "nomad-restart/web/"+id1, 10),
			},
			want: []store.ListedRestart{{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10, LeaseIndex: 12}},
		},
		{
			name: "chunks and the active marker are ignored",
			metas: []*nomadvars.Metadata{
				head("default", "nomad-restart/web/"+id1, 10),
				head("default", "nomad-restart/web/"+id1+"/c/a1b2", 9),
				head("default", "nomad-restart/web/active", 8),
			},
			want: []store.ListedRestart{{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10}},
		},
		{
			name:  "a lease whose record is gone: nothing to drive",
			metas: []*nomadvars.Metadata{head("prod", "nomad-restart/old/"+id1+"/lease", 5)},
			want:  []store.ListedRestart{},
		},
		{
			name: "one ID in two namespaces is two restarts, in listing order",
			metas: []*nomadvars.Metadata{
				head("prod", "nomad-restart/api/"+id2, 20),
				head("default", "nomad-restart/api/"+id2, 21),
			},
			want: []store.ListedRestart{
				{Namespace: "prod", ID: id2, JobSegment: "api", HeadIndex: 20},
				{Namespace: "default", ID: id2, JobSegment: "api", HeadIndex: 21},
			},
		},
		{
			name: "other paths: another prefix, a name that is no restart ID, deeper or shallower paths",
			metas: []*nomadvars.Metadata{
				head("default", "nomad-restarts/web/"+id2, 30),
				head("default", "nomad-restart/web/not-an-id", 31),
				head("default", "nomad-restart/web/"+id2[:35], 32),
				head("default", "nomad-restart/"+id2, 33),
				head("default", "nomad-restart/web/"+id2+"/other", 34),
				head("default", "nomad-restart/web/"+id2+"/lease/x", 35),
				head("default", "other/nomad-restart/web/"+id2, 36),
			},
			want: []store.ListedRestart{},
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
	metas := []*nomadvars.Metadata{
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
	want := []store.ListedRestart{
		{Namespace: "default", ID: id1, JobSegment: "web", HeadIndex: 10, LeaseIndex: 12},
		{Namespace: "prod", ID: id2, JobSegment: "api", HeadIndex: 20},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("candidates = %+v\nwant %+v", got, want)
	}
}

// A fleet's variables never read as a restart's in the lister's parse, even when the
// fleet's ID is a restart's too (its lease would otherwise read as the restart's lease).
func TestListedRestartsIgnoreFleets(t *testing.T) {
	t.Parallel()
	const id = "0b4c3f1e-8a2d-4e5f-9a1b-2c3d4e5f6a7b"
	var metas []*nomadvars.Metadata
	for _, path := range []string{"web/" + id, "~fleets/" + id + "/fleet", "~fleets/" + id + "/control", "~fleets/" + id + "/lease"} {
		metas = append(metas, &nomadvars.Metadata{Namespace: "default", Path: "nomad-restart/" + path, ModifyIndex: 10})
	}
	got := listedRestarts("nomad-restart", metas)
	want := []store.ListedRestart{{Namespace: "default", ID: id, JobSegment: "web", HeadIndex: 10}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listedRestarts: got %+v, want %+v", got, want)
	}
}

// The shared watch's listing takes no fleet variable for a restart's head or bell.
func TestSharedWatchIgnoresFleets(t *testing.T) {
	cl := simtest.Client(t, simtest.Start(t, nomadsim.Options{}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fleets := NewFleets(nomadvars.New(cl, nomadvars.Options{}), Options{})
	f := &fleet.Record{Fleet: fleet.Fleet{Status: restart.StatusRunning}, Namespace: "default"}
	if err := fleets.Create(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fleets.WatchControl(ctx, "default", f.ID, 0); err != nil {
		t.Fatal(err)
	}
	hub := &watchHub{n: fleets.n, ns: "default"}
	heads, _, err := hub.list(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for path := range heads {
		if strings.Contains(path, FleetsDir) {
			t.Errorf("the shared watch took fleet variable %s for a restart's", path)
		}
	}
}
