package store

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// A fleet's variables never read as a restart's in the lister's parse, even when the
// fleet's ID is a restart's too (its lease would otherwise read as the restart's lease).
func TestListedRestartsIgnoreFleets(t *testing.T) {
	t.Parallel()
	const id = "0b4c3f1e-8a2d-4e5f-9a1b-2c3d4e5f6a7b"
	var metas []*api.VariableMetadata
	for _, path := range []string{"web/" + id, "~fleets/" + id + "/fleet", "~fleets/" + id + "/control", "~fleets/" + id + "/lease"} {
		metas = append(metas, &api.VariableMetadata{Namespace: "default", Path: "nomad-restart/" + path, ModifyIndex: 10})
	}
	got := listedRestarts("nomad-restart", metas)
	want := []ListedRestart{{Namespace: "default", ID: id, JobSegment: "web", HeadIndex: 10}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("listedRestarts: got %+v, want %+v", got, want)
	}
}

// The shared watch's listing takes no fleet variable for a restart's head or bell.
func TestSharedWatchIgnoresFleets(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	cl, err := c.APIClient("")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fleets := NewNomadFleets(cl, NomadOptions{})
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
