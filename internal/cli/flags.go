package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate/prometheus"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/upstream"
)

// stringsFlag is a repeatable flag (-group a -group b), kept in the order given and without
// duplicates, as Nomad collects -group and -task into sets.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return errors.New("the value must not be empty")
	}
	for _, have := range *s {
		if have == v {
			return nil
		}
	}
	*s = append(*s, v)
	return nil
}

// generalOptions is the help of clientFlags' options (and -state and -log-level), which
// run's help ends with and the other commands' help points to.
const generalOptions = `General Options:

  -address=<addr>
    The address of the Nomad server. Overrides the NOMAD_ADDR environment
    variable if set. Default = http://127.0.0.1:4646

  -region=<region>
    The region of the Nomad servers to forward commands to. Overrides the
    NOMAD_REGION environment variable if set.

  -namespace=<namespace>
    The target namespace for queries and actions bound to a namespace.
    Overrides the NOMAD_NAMESPACE environment variable if set.

  -token=<token>
    The SecretID of an ACL token to use to authenticate API requests with.
    Overrides the NOMAD_TOKEN environment variable if set.

  -ca-cert=<path>, -ca-path=<path>, -client-cert=<path>, -client-key=<path>
    TLS files, as for the nomad command (NOMAD_CACERT, NOMAD_CAPATH,
    NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY).

  -tls-server-name=<value>
    The server name to use as the SNI host when connecting via TLS
    (NOMAD_TLS_SERVER_NAME).

  -tls-skip-verify
    Do not verify TLS certificates. This is highly not recommended
    (NOMAD_SKIP_VERIFY).

  -request-timeout=<duration>
    How long a request to Nomad, Consul or Prometheus waits for its answer,
    and an answer for its next bytes, before it is given up with one line
    naming the address; a read is tried three times. Blocking queries wait
    their wait (and the server's jitter) on top; Nomad's event stream is
    reconnected when it stays silent well past Nomad's heartbeat; an
    in-place restart's answer, which comes once the tasks stopped, is
    bounded by the healthy deadline. Overrides the
    NOMAD_RESTART_REQUEST_TIMEOUT environment variable if set. Default = 10s

  -state=<auto|nomad|local>
    Where restart records live. "nomad" keeps them in Nomad Variables under
    nomad-restart/<job>/<id> in the job's namespace, so any machine can
    attach, steer or resume them; "local" keeps them in a file on this
    machine; "auto" (the default) uses Nomad Variables where the token may
    write them, else the local store.

  -log-level=<debug|info|warn|error>
    Write debug logs to stderr. Off by default.
`

// clientFlags are Nomad's general client options (command/meta.go FlagSetClient). Empty
// values fall back to the NOMAD_* environment, as Nomad's CLI does.
type clientFlags struct {
	address, region, namespace, token string
	tlsFiles
	caPath, tlsServerName string
	insecure              bool
	logLevel              string
	// requestTimeout is -request-timeout as given (0: not given); timeout is it or
	// NOMAD_RESTART_REQUEST_TIMEOUT or the default, filled by withEnv, and timeoutErr a
	// bad value of the variable, reported when a session opens.
	requestTimeout time.Duration
	// xdgStateHome and home are the environment's XDG_STATE_HOME and HOME, filled by
	// withEnv: where the local store lives unless told otherwise (localstore.DefaultDir).
	xdgStateHome, home string
	timeout            time.Duration
	timeoutErr         error
	// consul holds the -consul-* flags (run only); consulConfig is them filled from the
	// CONSUL_* environment by withEnv.
	consul       consulFlags
	consulConfig health.ConsulConfig
	// prometheus holds the -prometheus-* flags (run, agent); prometheusConfig is them
	// filled from the NOMAD_RESTART_PROMETHEUS_* environment by withEnv.
	prometheus       prometheusFlags
	prometheusConfig prometheus.Config
}

// newFlagSet returns a flag set that reports errors to the caller instead of printing them,
// so that every bad input gives exactly one line on stderr.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseClientFlags parses the options of cmd: Nomad's client options into client, as given
// (withEnv fills them from the environment), and those that extra registers (nil: none).
// It returns the arguments after the options.
func parseClientFlags(cmd string, client *clientFlags, args []string, extra func(fs *flag.FlagSet)) ([]string, error) {
	fs := newFlagSet(cmd)
	client.add(fs)
	if extra != nil {
		extra(fs)
	}
	if err := parseFlags(fs, cmd, args); err != nil {
		return nil, err
	}
	return fs.Args(), nil
}

// addClientFlags registers Nomad's client options on fs.
func (c *clientFlags) add(fs *flag.FlagSet) {
	addTextOptions(fs, c.texts())
	fs.BoolVar(&c.insecure, "tls-skip-verify", false, "")
	fs.BoolVar(&c.insecure, "insecure", false, "")
	fs.Func("request-timeout", "", func(v string) error {
		d, err := parseRequestTimeout(v)
		c.requestTimeout = d
		return err
	})
}

// texts are Nomad's client options given as text, with the NOMAD_* variables that stand
// in for them.
func (c *clientFlags) texts() []textOption {
	return append(c.tlsFiles.options("", "NOMAD_"),
		textOption{"address", "NOMAD_ADDR", &c.address},
		textOption{"region", "NOMAD_REGION", &c.region},
		textOption{"namespace", "NOMAD_NAMESPACE", &c.namespace},
		textOption{"token", "NOMAD_TOKEN", &c.token},
		textOption{"ca-path", "NOMAD_CAPATH", &c.caPath},
		textOption{"tls-server-name", "NOMAD_TLS_SERVER_NAME", &c.tlsServerName},
		textOption{"log-level", "NOMAD_RESTART_LOG_LEVEL", &c.logLevel})
}

// textOption is an option given as text: by its flag, else, when the flag is not given
// (empty), by its environment variable, as Nomad's and Consul's CLIs read theirs.
type textOption struct {
	flag, env string
	v         *string
}

// addTextOptions registers each option's flag on fs, empty (not given) by default.
func addTextOptions(fs *flag.FlagSet, opts []textOption) {
	for _, o := range opts {
		fs.StringVar(o.v, o.flag, "", "")
	}
}

// fillFromEnv sets each option whose flag was not given to its variable's value in env,
// trimmed.
func fillFromEnv(opts []textOption, env func(string) string) {
	for _, o := range opts {
		if *o.v == "" {
			*o.v = strings.TrimSpace(env(o.env))
		}
	}
}

// tlsFiles are the files of a TLS client (of Nomad, Consul or Prometheus): the CA
// certificate to verify the server with, and the client's own certificate and key.
type tlsFiles struct{ caCert, clientCert, clientKey string }

// options are the files' options: flags -<prefix>ca-cert, -<prefix>client-cert and
// -<prefix>client-key, and the variables <env>CACERT, <env>CLIENT_CERT and
// <env>CLIENT_KEY, as Nomad and Consul name theirs.
func (f *tlsFiles) options(prefix, env string) []textOption {
	return []textOption{
		{prefix + "ca-cert", env + "CACERT", &f.caCert},
		{prefix + "client-cert", env + "CLIENT_CERT", &f.clientCert},
		{prefix + "client-key", env + "CLIENT_KEY", &f.clientKey},
	}
}

// validate refuses a client certificate without its key, or a key without its
// certificate, given by the options of flag prefix.
func (f tlsFiles) validate(prefix string) error {
	if (f.clientCert == "") != (f.clientKey == "") {
		return usageErrorf("-%[1]sclient-cert and -%[1]sclient-key go together: give both, or neither", prefix)
	}
	return nil
}

// parseRequestTimeout reads a request timeout: a positive duration.
func parseRequestTimeout(v string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("want a positive duration, like %s", upstream.DefaultTimeout)
	}
	return d, nil
}

// withEnv fills the options not given as flags from the NOMAD_* environment (flags win, as
// in Nomad's Meta.clientConfig).
func (c clientFlags) withEnv(env func(string) string) clientFlags {
	fillFromEnv(c.texts(), env)
	if !c.insecure {
		switch strings.ToLower(strings.TrimSpace(env("NOMAD_SKIP_VERIFY"))) {
		case "1", "true", "t", "yes":
			c.insecure = true
		}
	}
	c.xdgStateHome, c.home = strings.TrimSpace(env("XDG_STATE_HOME")), strings.TrimSpace(env("HOME"))
	c.timeout, c.timeoutErr = c.requestTimeout, nil
	if c.timeout == 0 {
		c.timeout = upstream.DefaultTimeout
		if v := strings.TrimSpace(env("NOMAD_RESTART_REQUEST_TIMEOUT")); v != "" {
			if d, err := parseRequestTimeout(v); err != nil {
				c.timeoutErr = usageErrorf("invalid NOMAD_RESTART_REQUEST_TIMEOUT %q: %s, or unset it for %s", v, err, upstream.DefaultTimeout)
			} else {
				c.timeout = d
			}
		}
	}
	c.consulConfig = c.consul.config(env)
	c.consulConfig.RequestTimeout = c.timeout
	c.prometheusConfig = c.prometheus.config(env)
	c.prometheusConfig.Timeout = c.timeout
	if c.address == "" {
		c.address = "http://127.0.0.1:4646"
	}
	return c
}

// parseFlags parses args and turns the flag package's errors into one actionable line.
// It returns flag.ErrHelp unchanged.
func parseFlags(fs *flag.FlagSet, cmd string, args []string) error {
	err := fs.Parse(args)
	if err == nil {
		return refuseEmpty(fs, cmd)
	}
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "flag provided but not defined: "):
		name := strings.TrimPrefix(msg, "flag provided but not defined: ")
		return usageErrorf("unknown option %s for %q; see `nomad-restart %s -help` for the options", name, cmd, cmd)
	case strings.HasPrefix(msg, "flag needs an argument: "):
		name := strings.TrimPrefix(msg, "flag needs an argument: ")
		return usageErrorf("option %s needs a value, like %s=<value>; see `nomad-restart %s -help`", name, name, cmd)
	default:
		// "invalid boolean value ..." and the like: the flag package names the flag.
		return usageErrorf("%s; see `nomad-restart %s -help`", firstLine(msg), cmd)
	}
}

// emptyHint says what to give for the command options whose empty value would be most
// harmful to take for "not given": a script's unset variable must not restart a job now
// (-at, -every) or select every job (-jobs). A restart's own options (-filter, -node, ...)
// are refused empty by restart.Options.Resolve, in its words.
func emptyHint(name string) (string, bool) {
	switch name {
	case "at":
		return `give a time like "03:00" or "2026-12-24T03:00", or drop -at to restart now`, true
	case "every":
		return `give a cron expression like "0 3 * * *", or drop -every to restart now`, true
	case "jobs":
		return `give a filter on jobs like 'Name matches "^web"', or drop -jobs and give one job`, true
	case "token":
		return "give a token, or drop -token to use NOMAD_TOKEN", true
	case "address":
		return "give Nomad's address like http://127.0.0.1:4646, or drop -address to use NOMAD_ADDR", true
	case "region":
		return "give a region, or drop -region to use the agent's", true
	case "namespace":
		return "give a namespace, or drop -namespace to use NOMAD_NAMESPACE (else \"default\")", true
	}
	return "", false
}

// refuseEmpty refuses an option given an empty (or blank) value: it is most often a
// script's unset variable, and taking it for "not given" would do what the user did not
// ask (restart now instead of at -at's time, every allocation instead of -filter's). Boolean
// options have no empty value.
func refuseEmpty(fs *flag.FlagSet, cmd string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		switch {
		case err != nil || isBoolFlag(f):
			return
		case slices.Contains(restart.OptionFlags(), f.Name):
			return // a restart's options are checked by restart.Options.Resolve, empty or not
		case f.Name == "http-addr":
			return // documented: "" turns the agent's listener off
		}
		for _, v := range flagValues(f) {
			if strings.TrimSpace(v) != "" {
				continue
			}
			hint, ok := emptyHint(f.Name)
			if !ok {
				hint = "give a value, or drop -" + f.Name + "; see `nomad-restart " + cmd + " -help`"
			}
			err = usageErrorf("Invalid -%s value %q: it is empty; %s", f.Name, v, hint)
			return
		}
	})
	return err
}

// flagValues is every value a flag was given, where the flag keeps them as text (a
// flag.Func checks its own value when it is set, and shows none).
func flagValues(f *flag.Flag) []string {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return nil
	}
	switch v := g.Get().(type) {
	case string:
		return []string{v}
	case []string:
		return v
	}
	return nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// usageError is an error caused by the command line: one line that names the problem and
// the fix. Nothing has been done in the cluster when it is returned.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// firstLine keeps the first line of s: every error goes to stderr as one line.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	return s
}
