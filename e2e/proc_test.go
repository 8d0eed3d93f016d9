package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// driverEnv is what every nomad-restart process of one test shares: the cluster's address
// and a private state home (so the local store lives under it).
type driverEnv struct {
	addr      string
	stateHome string
	// binary, when set, is a built nomad-restart to run instead of this test binary (the
	// benchmarks' memory figures are then the product's own).
	binary string
}

// localDir is where the children's local store lives (localstore.DefaultDir under
// XDG_STATE_HOME).
func (e driverEnv) localDir() string { return filepath.Join(e.stateHome, "nomad-restart") }

// child is one nomad-restart process: this test binary re-executed in child mode.
type child struct {
	cmd  *exec.Cmd
	out  simtest.SyncBuffer
	done chan struct{}
	code int
}

// start runs `nomad-restart args...` as a new process.
func (e driverEnv) start(args ...string) (*child, error) {
	ch := &child{done: make(chan struct{})}
	cmd := exec.Command(os.Args[0], args...)
	if e.binary != "" {
		cmd = exec.Command(e.binary, args...)
	}
	cmd.Env = append(os.Environ(),
		childEnv+"=1",
		"NOMAD_ADDR="+e.addr,
		"NOMAD_TOKEN=",
		"NOMAD_NAMESPACE=",
		"NOMAD_REGION=",
		"XDG_STATE_HOME="+e.stateHome,
		"USER=e2e",
	)
	cmd.Stdin = strings.NewReader("")
	cmd.Stdout = &ch.out
	cmd.Stderr = &ch.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting nomad-restart %s: %w", strings.Join(args, " "), err)
	}
	ch.cmd = cmd
	go func() {
		err := cmd.Wait()
		ch.code = 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ch.code = ee.ExitCode() // -1 when killed by a signal
		} else if err != nil {
			ch.code = -2
		}
		close(ch.done)
	}()
	return ch, nil
}

// kill SIGKILLs the process and waits for it; it reports whether the process was still
// running (a real kill) rather than already ended.
func (c *child) kill() bool {
	select {
	case <-c.done:
		return false
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.done
	ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// wait waits for the process to end, or ctx; on ctx's end it kills it.
func (c *child) wait(ctx context.Context) (int, error) {
	select {
	case <-c.done:
		return c.code, nil
	case <-ctx.Done():
		c.kill()
		return -1, fmt.Errorf("nomad-restart %s did not end: %w\n%s", strings.Join(c.cmd.Args[1:], " "), ctx.Err(), c.out.String())
	}
}

// latestRecord returns the job's newest restart record, or nil when none was created.
func latestRecord(ctx context.Context, st store.Store, jobID string) (*restart.Record, error) {
	recs, err := st.List(ctx, store.Filter{Namespace: "default", JobID: jobID})
	if err != nil {
		return nil, fmt.Errorf("listing restarts of %s: %w", jobID, err)
	}
	if len(recs) == 0 {
		return nil, nil
	}
	if len(recs) > 1 {
		return nil, fmt.Errorf("job %s has %d restart records, want 1", jobID, len(recs))
	}
	return recs[0], nil
}

// freeLease ends a dead driver's lease on the Nomad store at once, as its TTL and Nomad's
// lock delay would (after 2×15 s + 15 s of real time with the CLI's defaults). The lock's ID
// is read from the variable, as an operator can with `nomad var get`. It reports whether a
// lock was held.
func freeLease(client *api.Client, id string) (bool, error) {
	vars, _, err := client.Variables().PrefixList("nomad-restart/", nil)
	if err != nil {
		return false, fmt.Errorf("listing the store's variables: %w", err)
	}
	for _, m := range vars {
		if !strings.HasSuffix(m.Path, "/"+id+"/lease") {
			continue
		}
		v, _, err := client.Variables().Peek(m.Path, nil)
		if err != nil {
			return false, fmt.Errorf("reading lease %s: %w", m.Path, err)
		}
		if v == nil || v.Lock == nil || v.Lock.ID == "" {
			return false, nil
		}
		rel := &api.Variable{Namespace: v.Namespace, Path: v.Path, Lock: &api.VariableLock{ID: v.Lock.ID}}
		if _, _, err := client.Variables().ReleaseLock(rel, nil); err != nil {
			return false, fmt.Errorf("releasing lease %s: %w", m.Path, err)
		}
		return true, nil
	}
	return false, nil
}
