package store_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

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
	s, err := store.NewLocal(os.Getenv(envDir))
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
	rec := createRecord(t, ctx, s, "default", "web", 1)
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
	rec := createRecord(t, ctx, s, "default", "web", 1)
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
