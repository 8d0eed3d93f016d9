package localstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

func TestLocalSuite(t *testing.T) {
	storetest.RunSuite(t, func(t *testing.T) storetest.Backend {
		dir := t.TempDir()
		return storetest.Backend{Open: func(t *testing.T) store.Store {
			s, err := localstore.New(dir)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}}
	})
}

func TestDefaultLocalDir(t *testing.T) {
	if d, err := localstore.DefaultDir("/state", "/home/op"); err != nil || d != "/state/nomad-restart" {
		t.Fatalf("with XDG_STATE_HOME: %q, %v", d, err)
	}
	if d, err := localstore.DefaultDir("", "/home/op"); err != nil || d != "/home/op/.local/state/nomad-restart" {
		t.Fatalf("without XDG_STATE_HOME: %q, %v", d, err)
	}
	if d, err := localstore.DefaultDir("relative", "/home/op"); err != nil || d != "/home/op/.local/state/nomad-restart" {
		t.Fatalf("with a relative XDG_STATE_HOME (the spec says to ignore it): %q, %v", d, err)
	}
	if _, err := localstore.DefaultDir("", ""); err == nil || !strings.Contains(err.Error(), "set XDG_STATE_HOME or HOME") {
		t.Fatalf("with neither: %v, want the variables to set", err)
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
	storetest.CheckStaleMarkerIsFree(t, s)
}

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

// The test binary re-executes itself as a child process that works on the same local store,
// to prove the store's locks hold across processes (not just goroutines).
const (
	envChild = "NOMAD_RESTART_STORE_TEST_CHILD"
	envDir   = "NOMAD_RESTART_STORE_TEST_DIR"
	envID    = "NOMAD_RESTART_STORE_TEST_ID"
	envN     = "NOMAD_RESTART_STORE_TEST_N"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(envChild); mode != "" {
		if err := runChild(mode); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(mode string) error {
	ctx := context.Background()
	s, err := localstore.New(os.Getenv(envDir))
	if err != nil {
		return err
	}
	id := os.Getenv(envID)
	switch mode {
	case "lease":
		if _, err := s.AcquireLease(ctx, "default", id, fmt.Sprintf("child-%d", os.Getpid())); err != nil {
			return err
		}
		fmt.Println("held")
		select {} // hold it until killed
	case "mutate":
		n, _ := strconv.Atoi(os.Getenv(envN))
		for range n {
			if _, err := store.Mutate(ctx, s, "default", id, func(r *restart.Record) error { r.CurrentBatch++; return nil }); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown mode %q", mode)
}

func child(t *testing.T, mode, dir, id string, extra ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode, envDir+"="+dir, envID+"="+id)
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stderr = os.Stderr
	return cmd
}

func TestLocalLeaseFreedWhenDriverIsKilled(t *testing.T) {
	dir, s := newLocalStore(t)
	ctx := context.Background()
	rec := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
	cmd := child(t, "lease", dir, rec.ID)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("child did not take the lease: %q, %v", line, err)
	}
	if _, err := s.AcquireLease(ctx, "default", rec.ID, "parent"); !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("AcquireLease while the child holds it: got %v, want ErrLeaseHeld", err)
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no chance to clean up
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// No retry and no wait: the kernel released the lock with the process.
	storetest.TakeFreeLease(t, ctx, s, rec, "parent", "right after the holder was killed")
}

func TestLocalMutateAcrossProcesses(t *testing.T) {
	dir, s := newLocalStore(t)
	ctx := context.Background()
	rec := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
	const procs, each = 3, 15
	var wg sync.WaitGroup
	errs := make([]error, procs)
	for i := range procs {
		cmd := child(t, "mutate", dir, rec.ID, envN+"="+strconv.Itoa(each))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Run()
		}()
	}
	// The parent mutates at the same time.
	for range each {
		if _, err := store.Mutate(ctx, s, "default", rec.ID, func(r *restart.Record) error { r.CurrentBatch++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("child: %v", err)
		}
	}
	got, err := s.Get(ctx, "default", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := (procs + 1) * each; got.CurrentBatch != want {
		t.Fatalf("CurrentBatch = %d after %d increments from %d processes: updates were lost", got.CurrentBatch, want, procs+1)
	}
}

func BenchmarkLocalUpdate(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("allocs=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			s, err := localstore.New(dir)
			if err != nil {
				b.Fatal(err)
			}
			// The local store rewrites the record's file (and the index file) per update:
			// add up their sizes after each.
			var total int64
			storetest.BenchUpdate(b, s, n, func() int64 {
				var sum int64
				files, _ := filepath.Glob(filepath.Join(dir, "records", "*", "*.json"))
				for _, f := range append(files, filepath.Join(dir, "index")) {
					if fi, err := os.Stat(f); err == nil {
						sum += fi.Size()
					}
				}
				total += sum
				return total
			})
		})
	}
}

// A lease file whose record was never written (its creator died between the two, and the
// kernel freed its lock) is deleted by the namespace's next creation; the lease files of
// existing records stay.
func TestLocalLeaseWithoutRecordIsSwept(t *testing.T) {
	dir, s := newLocalStore(t)
	ctx := storetest.Context(t, 30*time.Second)
	kept := storetest.CreateRecord(t, ctx, s, "default", "web", 1)
	storetest.TakeFreeLease(t, ctx, s, kept, "driver", "of the kept restart")
	// The lease of a record built but never created, as its dead creator left it.
	unwritten := storetest.NewRecord("default", "api", 1)
	orphan := filepath.Join(dir, "leases", "default", unwritten.ID+".lock")
	for _, p := range []string{orphan, orphan + ".holder"} {
		if err := os.WriteFile(p, []byte("killed\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	storetest.CreateRecord(t, ctx, s, "default", "api", 1)
	for _, p := range []string{orphan, orphan + ".holder"} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there after the next creation: %v", filepath.Base(p), err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "leases", "default", kept.ID+".lock")); err != nil {
		t.Errorf("the lease file of an existing restart was deleted: %v", err)
	}
}

// newLocalStore opens a local store in a new temporary directory, which it returns too.
func newLocalStore(t testing.TB) (string, *localstore.Store) {
	t.Helper()
	dir := t.TempDir()
	s, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	return dir, s
}

// One local directory serves every cluster an operator uses: a restart of job "web" in
// progress on one cluster does not refuse a restart of "web" on another, while a second
// on the same cluster is refused, and a record stamped with no cluster (written before
// records named their cluster) still holds the job everywhere.
func TestLocalJobBusyPerCluster(t *testing.T) {
	_, s := newLocalStore(t)
	ctx := context.Background()
	east := store.ScopeToCluster(s, "http://east:4646")
	west := store.ScopeToCluster(s, "http://west:4646")

	storetest.MustCreate(t, east, storetest.NewRecord("default", "web", 1))
	storetest.MustCreate(t, west, storetest.NewRecord("default", "web", 1))
	var busy *store.JobBusyError
	if err := east.Create(ctx, storetest.NewRecord("default", "web", 1)); !errors.As(err, &busy) {
		t.Fatalf("a second restart of web on the same cluster: %v, want it refused as busy", err)
	}

	// Ending east's restart frees web there and leaves west's busy.
	recs, err := east.List(ctx, store.Filter{Namespace: "default", JobID: "web"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("east's restarts of web: %d, %v", len(recs), err)
	}
	ended := recs[0]
	ended.Status = restart.StatusSucceeded
	if err := east.Update(ctx, ended); err != nil {
		t.Fatal(err)
	}
	storetest.MustCreate(t, east, storetest.NewRecord("default", "web", 1))
	if err := west.Create(ctx, storetest.NewRecord("default", "web", 1)); !errors.As(err, &busy) {
		t.Fatalf("west's web after east's ended: %v, want west's own restart still holding it", err)
	}

	storetest.MustCreate(t, s, storetest.NewRecord("default", "api", 1))
	for name, scoped := range map[string]store.Store{"east": east, "west": west} {
		if err := scoped.Create(ctx, storetest.NewRecord("default", "api", 1)); !errors.As(err, &busy) {
			t.Errorf("%s: api held by a record of no cluster: %v, want busy", name, err)
		}
	}
}
