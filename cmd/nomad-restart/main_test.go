package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestMain lets a test run this very binary as the command (NOMAD_RESTART_TEST_MAIN=1), so
// that its signal handling is tested in a process of its own.
func TestMain(m *testing.M) {
	if os.Getenv("NOMAD_RESTART_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestBrokenStdoutDetaches: `run web | head -1` must not die of SIGPIPE holding the lease;
// the broken pipe detaches like Ctrl-C, so the lease is free at once and the restart is left
// for resume.
func TestBrokenStdoutDetaches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startWeb(t, 3)

	cmd := exec.CommandContext(ctx, os.Args[0], "run", "-state=nomad", "-batch-size=1", "-batch-wait=2s", "-yes", "web")
	cmd.Env = append(os.Environ(), "NOMAD_RESTART_TEST_MAIN=1", "NOMAD_ADDR="+c.Addr())
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read up to the first batch's end, then close the pipe, as `head` does.
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && !strings.Contains(sc.Text(), "Finished 1st batch") {
	}
	_ = stdout.Close()
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("command ended with %v, want exit 1 (detached); stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "Detached from restart") {
		t.Errorf("stderr does not say it detached:\n%s", stderr.String())
	}

	st := nomadstore.NewRestarts(nomadvars.New(simtest.Client(t, c), nomadvars.Options{}), nomadstore.Options{})
	recs, err := st.List(ctx, store.Filter{JobID: "web"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %d, %v", len(recs), err)
	}
	rec := recs[0]
	if rec.Status.Terminal() || rec.Status == restart.StatusSucceeded {
		t.Fatalf("restart status %s; want it left mid-way for resume", rec.Status)
	}
	free, err := store.LeaseFree(ctx, st, rec.Namespace, rec.ID, "test")
	if err != nil || !free {
		t.Fatalf("lease free after the broken pipe: %v, %v; want it released at once", free, err)
	}
}

// TestBrokenStdoutEndsStatusQuietly: `status | head -1` whose reader is gone before status
// writes ends without a word on stderr and with exit 0, as it would have with its output
// read.
func TestBrokenStdoutEndsStatusQuietly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := startWeb(t, 2)
	env := append(os.Environ(), "NOMAD_RESTART_TEST_MAIN=1", "NOMAD_ADDR="+c.Addr())
	detach := exec.CommandContext(ctx, os.Args[0], "run", "-state=nomad", "-detach", "-yes", "web")
	detach.Env = env
	if out, err := detach.CombinedOutput(); err != nil {
		t.Fatalf("run -detach: %v\n%s", err, out)
	}

	for _, args := range [][]string{{"status"}, {"status", "-json"}} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		_ = r.Close() // the reader is gone before the command writes
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = env
		cmd.Stdout = w
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err = cmd.Run()
		_ = w.Close()
		if err != nil || stderr.Len() != 0 {
			t.Errorf("%v with its output closed: %v, stderr %q; want exit 0 and nothing on stderr", args, err, stderr.String())
		}
	}
}

// startWeb starts a simulated cluster running job "web" of count allocations; it is closed
// when the test ends.
func startWeb(t *testing.T, count int) *nomadsim.Cluster {
	t.Helper()
	// Slower than simtest.TimeScale, so that a restart of one allocation a batch is still
	// mid-way when the first batch has ended.
	c := simtest.Start(t, nomadsim.Options{TimeScale: 5})
	id, typ := "web", api.JobTypeService
	job := &api.Job{ID: &id, Name: &id, Type: &typ, Datacenters: []string{"dc1"}}
	tg := api.NewTaskGroup("web", count)
	tg.AddTask(api.NewTask("main", "mock_driver"))
	job.AddTaskGroup(tg)
	simtest.RegisterRunning(t, c, job)
	return c
}
