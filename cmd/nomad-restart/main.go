// Command nomad-restart runs durable, graceful rolling restarts of Nomad jobs. See
// `nomad-restart -help`; the commands live in internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
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
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	go func() {
		<-pipe
		cancel()
	}()
	ctx, stop := signal.NotifyContext(base, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore the default handlers: the next signal terminates
	}()
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
