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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // restore the default handlers: the next signal terminates
	}()
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
