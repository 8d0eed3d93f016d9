// Package cli is nomad-restart's command-line interface: commands, Nomad-style flags,
// prompts, and human and JSON output. It is a library (Run) so that tests run commands
// in-process; cmd/nomad-restart only wires os.Args and signals to it.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// app is one invocation of the command line.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	env            func(string) string
	// environ lists the environment (for the variables named by a prefix:
	// NOMAD_RESTART_NOTIFY_<NAME>); nil: none are listed.
	environ func() []string
	// interactive is true when both stdin and stdout are terminals: only then are questions
	// asked and the progress line drawn.
	interactive bool
	width       int
	backend     backend
	now         func() time.Time
	// lines delivers stdin lines once a prompt needs them (see app.inputLines).
	lines <-chan string
}

// Run runs the command line args (without the program name) and returns the exit code:
// 0 on success (and where Nomad's command exits 0 by design), 1 otherwise. Cancelling ctx
// (Ctrl-C, SIGTERM) detaches from a restart in progress; the restart itself is left intact.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string) int {
	a := newApp(stdin, stdout, stderr, env)
	return a.run(ctx, args)
}

// RunEnviron is Run with the whole environment listed too (os.Environ), for the variables
// whose names are not known in advance (NOMAD_RESTART_NOTIFY_<NAME>).
func RunEnviron(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, env func(string) string, environ func() []string) int {
	a := newApp(stdin, stdout, stderr, env)
	a.environ = environ
	return a.run(ctx, args)
}

// environment is the listed environment (empty when none was handed in).
func (a *app) environment() []string {
	if a.environ == nil {
		return nil
	}
	return a.environ()
}

func newApp(stdin io.Reader, stdout, stderr io.Writer, env func(string) string) *app {
	if env == nil {
		env = func(string) string { return "" }
	}
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, env: env, backend: nomadBackend{}, now: time.Now}
	inFd, inOK := fd(stdin)
	outFd, outOK := fd(stdout)
	if inOK && outOK && term.IsTerminal(inFd) && term.IsTerminal(outFd) {
		a.interactive = true
		if w, _, err := term.GetSize(outFd); err == nil {
			a.width = w
		}
	}
	return a
}

// fd returns the file descriptor behind r or w when it is an *os.File.
func fd(v any) (int, bool) {
	f, ok := v.(*os.File)
	if !ok || f == nil {
		return 0, false
	}
	return int(f.Fd()), true
}

// command is one subcommand, as Nomad's command/ has them (mitchellh/cli's Command): its
// one-line synopsis for the usage, its help (`<command> -help`), and what it does with the
// invocation it is handed (stdin, stdout, stderr, the environment, the terminal, the
// backend). Each command's type, flags, help and Run are in its file.
type command interface {
	Synopsis() string
	Help() string
	Run(ctx context.Context, a *app, args []string) error
}

// namedCommand is a row of the command table: the name a user types, and its command.
type namedCommand struct {
	name string
	command
}

// commands is the command table, in the order the usage lists them.
func commands() []namedCommand {
	return []namedCommand{
		{"run", runCommand{}},
		{"status", statusCommand{}},
		{"attach", attachCommand{}},
		{"pause", pauseCommand{}},
		{"resume", resumeCommand{}},
		{"cancel", cancelCommand{}},
		{"answer", answerCommand{}},
		{"demo", demoCommand{}},
		{"agent", agentCommand{}},
		{"schedules", schedulesCommand{}},
		{"unschedule", unscheduleCommand{}},
		{"watches", watchesCommand{}},
		{"stale", staleCommand{}},
		{"notify", notifyCommand{}},
		{"version", versionCommand{}},
	}
}

func (a *app) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stderr, a.usage())
		return 1
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		fmt.Fprint(a.stdout, a.usage())
		return 0
	case "help":
		return a.help(args[1:])
	case "-v", "-version", "--version":
		name = "version"
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		err := c.Run(ctx, a, args[1:])
		if outputClosed(ctx, err) {
			return 0
		}
		return a.exit(c, err)
	}
	fmt.Fprintf(a.stderr, "unknown command %q; the commands are: %s (see `nomad-restart -help`)\n", name, commandNames())
	return 1
}

// help is `nomad-restart help [command]`: the usage, or the command's help as
// `<command> -help` prints it.
func (a *app) help(args []string) int {
	if len(args) == 0 || (len(args) == 1 && args[0] == "help") {
		fmt.Fprint(a.stdout, a.usage())
		return 0
	}
	if len(args) > 1 {
		fmt.Fprintf(a.stderr, "help takes one command, not %d arguments; run `nomad-restart help <command>`\n", len(args))
		return 1
	}
	name := args[0]
	if name == "-v" || name == "-version" || name == "--version" {
		name = "version"
	}
	for _, c := range commands() {
		if c.name == name {
			fmt.Fprintln(a.stdout, strings.TrimSpace(c.Help()))
			return 0
		}
	}
	fmt.Fprintf(a.stderr, "no command %q to help with; the commands are: %s\n", args[0], commandNames())
	return 1
}

// ErrOutputClosed is the cause a command's context ends with when its standard output was
// closed under it (a reader such as `head` went away: SIGPIPE).
var ErrOutputClosed = fmt.Errorf("standard output closed: %w", syscall.EPIPE)

// outputClosed reports whether err comes of a closed standard output: a write that failed
// with EPIPE, or a request cut short by the context that the closed output ended. Such a
// command ends quietly with exit 0: the reader has what it wanted, and an error about the
// output is noise (Nomad's CLI, which leaves SIGPIPE to Go's default, dies of it without a
// word). A command that chose its exit code itself (a run that detached, and said so on
// stderr, since the restart no longer runs) keeps it.
func outputClosed(ctx context.Context, err error) bool {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return false
	}
	return errors.Is(err, syscall.EPIPE) || errors.Is(context.Cause(ctx), syscall.EPIPE)
}

// exitError carries an exit code with no message: the command has printed what it had to.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// exit turns a command's error into output and an exit code: one line on stderr.
func (a *app) exit(c command, err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintln(a.stdout, strings.TrimSpace(c.Help()))
		return 0
	case errors.As(err, &ee):
		return ee.code
	}
	fmt.Fprintln(a.stderr, output.OneLine(errorLine(err)))
	return 1
}

// errorLine is the line a failed command ends with: err's text, or, when Nomad, Consul or
// Prometheus did not answer or something else answered in their place, upstream's line
// alone, which names the address and what to change (the layers' wrapping around it says
// only which request it was).
func errorLine(err error) string {
	if _, step := errors.AsType[*engine.StepError](err); step {
		return err.Error() // it says which command to type next
	}
	if ue, ok := upstream.Find(err); ok {
		return ue.Error()
	}
	return err.Error()
}

func commandNames() string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return strings.Join(names, ", ")
}

func (a *app) usage() string {
	var b strings.Builder
	b.WriteString("Usage: nomad-restart <command> [options] [args]\n\n")
	b.WriteString("Durable, graceful rolling restarts of Nomad jobs.\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(&b, "    %-10s %s\n", c.name, c.Synopsis())
	}
	b.WriteString("\nRun `nomad-restart <command> -help` (or `nomad-restart help <command>`) for a command's options.\n")
	return b.String()
}

// logger returns the debug logger of -log-level: off unless asked for, so that stderr keeps
// its one-line errors.
func (a *app) logger(level string) (*slog.Logger, error) {
	var l slog.Level
	switch strings.ToLower(level) {
	case "", "off":
		return slog.New(slog.DiscardHandler), nil
	case "debug", "trace":
		l = slog.LevelDebug
	case "info":
		l = slog.LevelInfo
	case "warn":
		l = slog.LevelWarn
	case "error":
		l = slog.LevelError
	default:
		return nil, usageErrorf("Invalid -log-level value %q: valid options are debug, info, warn, error and off", level)
	}
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: l})), nil
}

// holder names this process for the record's Driver field and the event log.
func (a *app) holder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	holder := fmt.Sprintf("%s:%d", host, os.Getpid())
	// Under Nomad (the agent's job) each task may be pid 1 in its own namespace, on a
	// node whose hostname its siblings share: the allocation tells two agents apart.
	if alloc := a.env("NOMAD_ALLOC_ID"); alloc != "" {
		holder += "/" + alloc[:min(8, len(alloc))]
	}
	return holder
}

// by names the operator for pause, resume, cancel and answer.
func (a *app) by() string {
	user := a.env("USER")
	if user == "" {
		user = a.env("USERNAME")
	}
	host, _ := os.Hostname()
	switch {
	case user != "" && host != "":
		return user + "@" + host
	case user != "":
		return user
	case host != "":
		return host
	}
	return "nomad-restart"
}
