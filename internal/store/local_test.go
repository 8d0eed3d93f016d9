package store_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

func TestLocalSuite(t *testing.T) {
	storetest.RunSuite(t, func(t *testing.T) storetest.Backend {
		dir := t.TempDir()
		return storetest.Backend{Open: func(t *testing.T) store.Store {
			s, err := store.NewLocal(dir)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}}
	})
}

func TestDefaultLocalDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/state")
	if d, err := store.DefaultLocalDir(); err != nil || d != "/state/nomad-restart" {
		t.Fatalf("with XDG_STATE_HOME: %q, %v", d, err)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/op")
	if d, err := store.DefaultLocalDir(); err != nil || d != "/home/op/.local/state/nomad-restart" {
		t.Fatalf("without XDG_STATE_HOME: %q, %v", d, err)
	}
}

// A job marker naming a restart that does not exist (its creator died between the two
// writes) does not block the job.
func TestLocalStaleMarkerIsFree(t *testing.T) {
	dir, s := newLocalStore(t)
	if err := os.MkdirAll(filepath.Join(dir, "active", "default"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "active", "default", "web"), []byte("00000000-0000-4000-8000-000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkStaleMarkerIsFree(t, s)
}
