// Command nomad-restart runs durable, graceful rolling restarts of Nomad jobs. See
// `nomad-restart -help`; the commands live in internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/nomad-restart/nomad-restart/internal/cli"
)

func main() {
	// Ctrl-C and SIGTERM end the context: a restart in progress is detached, its record left
	// consistent for `nomad-restart resume`. A second signal kills the process at once.
	// A closed stdout (`nomad-restart run web | head`) is a detach too, not a death that
	// would keep the lease until it expires: while SIGPIPE is notified, writes to the broken
	// pipe fail with EPIPE instead of killing the process, and the first one ends the context.
	// It stays notified, so that later writes cannot kill the process mid-detach either.
	// A command that only prints (status | head -1) then ends quietly, exit 0: the cause
	// tells it its output was closed.
	base, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	go func() {
		<-pipe
		cancel(cli.ErrOutputClosed)
	}()
	limitMemory(os.Args[1:], os.Getenv)
	ctx, stop := signal.NotifyContext(base, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore the default handlers: the next signal terminates
	}()
	code := cli.RunEnviron(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv, os.Environ)
	stop()
	os.Exit(code)
}

// driveMemoryLimit is the soft memory limit of a process that drives one restart.
const driveMemoryLimit = 64 << 20

// limitMemory sets Go's soft memory limit for the commands that drive one restart (run,
// resume, attach), unless the operator chose one with GOMEMLIMIT. Such a process holds the
// record and a batch's allocations, a few tens of MB at 10,000 allocations, and Go's
// collector would let the heap grow to twice that between collections; with the limit it
// collects sooner, for a few percent of CPU, and stays well under 100 MiB resident. The
// limit is soft: a process that needs more gets it. The agent (many restarts) and the demo
// (a simulated cluster in the process) are left to GOMEMLIMIT.
func limitMemory(args []string, getenv func(string) string) {
	if getenv("GOMEMLIMIT") != "" || len(args) == 0 {
		return
	}
	switch args[0] {
	case "run", "resume", "attach":
		debug.SetMemoryLimit(driveMemoryLimit)
	}
}
