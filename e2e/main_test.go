package e2e

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/cli"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// childEnv marks a re-executed test binary that must behave as the nomad-restart command:
// the campaign's drivers are real processes (so SIGKILL is real) without a second build.
const childEnv = "NOMAD_RESTART_E2E_CHILD"

func TestMain(m *testing.M) { simtest.MainOrChild(m, childEnv, runChild) }

// profileEnv, set to a file name, makes a child write its CPU profile there: where the
// benchmarks' driver spends its time.
const profileEnv = "NOMAD_RESTART_E2E_CPUPROFILE"

// heapProfileEnv, set to a file name, makes a child write its heap profile there when it
// ends (in use as of the last collection): what the benchmarks' driver holds.
const heapProfileEnv = "NOMAD_RESTART_E2E_HEAPPROFILE"

// runChild is cmd/nomad-restart's main: signals (ctx's end) detach, the exit code is the
// command's.
func runChild(ctx context.Context) int {
	if path := os.Getenv(profileEnv); path != "" {
		f, err := os.Create(path)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() {
				pprof.StopCPUProfile()
				_ = f.Close()
			}()
		}
	}
	if path := os.Getenv(heapProfileEnv); path != "" {
		defer func() {
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("heap").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	return cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
}
