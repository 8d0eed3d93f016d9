package cli

// Notifications on the command line: the -notify flags of run and the agent, the sinks
// they name (a nomadvar:// URL read from Nomad), and `nomad-restart notify test`.

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/notify"
	"github.com/nomad-restart/nomad-restart/internal/notify/deliver"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// notifyEnvPrefix names a sink in the environment: NOMAD_RESTART_NOTIFY_<NAME>=<URL>.
const notifyEnvPrefix = "NOMAD_RESTART_NOTIFY_"

// notifyFlags are -notify, -notify-on and -notify-min (run, agent).
type notifyFlags struct {
	sinks, on    stringsFlag
	min, pageURL string
}

func (n *notifyFlags) add(fs *flag.FlagSet) {
	fs.Var(&n.sinks, "notify", "")
	fs.Var(&n.on, "notify-on", "")
	fs.StringVar(&n.min, "notify-min", "info", "")
	fs.StringVar(&n.pageURL, "notify-page-url", "", "")
}

// notifySetup is what the flags and the environment ask to notify: the sinks' URLs by
// name (maybe nomadvar:// references, resolved when the session opens) and the config.
type notifySetup struct {
	urls map[string]string
	cfg  notify.Config
}

func (s notifySetup) any() bool { return len(s.urls) > 0 }

var sinkName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// setup checks the flags and reads the sinks the environment names. Every refusal is one
// line naming the flag and the fix; a URL is never in it whole.
func (n notifyFlags) setup(environ []string) (notifySetup, error) {
	s := notifySetup{urls: map[string]string{}}
	for _, v := range n.sinks {
		name, u, ok := strings.Cut(v, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		if strings.Contains(name, "://") || (!ok && strings.Contains(v, "://")) {
			// A URL given without a name: quoting it would print its secret.
			return s, usageErrorf("invalid -notify %s: name the sink before its URL, as in -notify ops=https://hooks.example.com/...", deliver.Redact(v))
		}
		if !ok || strings.TrimSpace(u) == "" {
			return s, usageErrorf("invalid -notify %q: use NAME=URL, as in -notify ops=https://hooks.example.com/...", name)
		}
		if !sinkName.MatchString(name) {
			return s, usageErrorf("invalid -notify name %q: use lower-case letters, digits, - and _", name)
		}
		if _, dup := s.urls[name]; dup {
			return s, usageErrorf("-notify names sink %q twice: give each sink one URL", name)
		}
		s.urls[name] = strings.TrimSpace(u)
	}
	for _, kv := range environ {
		k, u, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(k, notifyEnvPrefix)
		if !ok || rest == "" || strings.TrimSpace(u) == "" {
			continue
		}
		name := strings.ToLower(rest)
		if _, given := s.urls[name]; given || !sinkName.MatchString(name) {
			continue // a flag wins over the environment
		}
		s.urls[name] = strings.TrimSpace(u)
	}
	for name, u := range s.urls {
		if strings.HasPrefix(u, "nomadvar://") {
			if _, _, err := parseNomadVarURL(u); err != nil {
				return s, usageErrorf("sink %q: %v", name, err)
			}
			continue
		}
		if _, err := deliver.NewSink(u, http.DefaultClient, 0); err != nil {
			return s, usageErrorf("sink %q: %v", name, err)
		}
	}
	on, err := notify.ParseOn(n.on)
	if err != nil {
		return s, usageErrorf("%v", err)
	}
	min, err := notify.ParseSeverity(n.min)
	if err != nil {
		return s, usageErrorf("%v", err)
	}
	for name := range s.urls {
		s.cfg.Sinks = append(s.cfg.Sinks, name)
	}
	slices.Sort(s.cfg.Sinks)
	s.cfg.On, s.cfg.Min = on, min
	if n.pageURL != "" {
		if u, err := url.Parse(n.pageURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return s, usageErrorf("invalid -notify-page-url %q: give the agent's page as people reach it, as in https://nomad-restart.example.com", n.pageURL)
		}
		s.cfg.PageURL = n.pageURL
	}
	return s, nil
}

// onlyItsSinks refuses a -notify-on that names a sink this process does not have. The
// agent checks it: its defaults are all it has, and a typo there would leave the sink meant
// hearing every trigger and the name given hearing nothing. (run may name an agent's sinks:
// they are kept in the record for the agent that adopts the restart.)
func (s notifySetup) onlyItsSinks() error {
	names := slices.Sorted(maps.Keys(s.cfg.On))
	for _, name := range names {
		if _, ok := s.urls[name]; !ok {
			return usageErrorf("-notify-on names sink %q, which no -notify gives: add -notify %s=<url> (or NOMAD_RESTART_NOTIFY_%s), or fix the name", name, name, strings.ToUpper(name))
		}
	}
	return nil
}

// parseNomadVarURL reads nomadvar://<path>#<key>[?namespace=<ns>]: the Nomad Variable
// that holds a sink's URL, so that the secret stays in the cluster.
func parseNomadVarURL(raw string) (path, key string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Fragment == "" || u.Host+u.Path == "" {
		return "", "", fmt.Errorf("invalid nomadvar URL: use nomadvar://<variable path>#<key>, as in nomadvar://nomad-restart/notify#slack")
	}
	return strings.Trim(u.Host+u.Path, "/"), u.Fragment, nil
}

// resolveSinkURL reads a nomadvar:// URL's secret from Nomad Variables (a plain URL is
// itself). The error names the variable and key, never the value.
func resolveSinkURL(ctx context.Context, vars *nomadvars.Client, namespace, name, raw string) (string, error) {
	if !strings.HasPrefix(raw, "nomadvar://") {
		return raw, nil
	}
	path, key, err := parseNomadVarURL(raw)
	if err != nil {
		return "", err
	}
	ns := namespace
	if u, _ := url.Parse(raw); u != nil && u.Query().Get("namespace") != "" {
		ns = u.Query().Get("namespace")
	}
	if ns == "" || ns == "*" {
		ns = "default"
	}
	v, err := vars.Read(ctx, ns, path)
	if err != nil {
		return "", fmt.Errorf("sink %q: reading Nomad variable %s in namespace %s: %w; the token needs read on that path (docs/notifications.md)", name, path, ns, err)
	}
	val, ok := v.Items[key]
	if !ok || strings.TrimSpace(val) == "" {
		return "", fmt.Errorf("sink %q: Nomad variable %s in namespace %s has no key %q; put the sink's URL there", name, path, ns, key)
	}
	return strings.TrimSpace(val), nil
}

// buildSinks resolves and builds the setup's sinks.
func buildSinks(ctx context.Context, s notifySetup, vars *nomadvars.Client, namespace string) (map[string]deliver.Sink, error) {
	client := &http.Client{Timeout: deliver.DefaultTimeout}
	sinks := map[string]deliver.Sink{}
	for _, name := range s.cfg.Sinks {
		u, err := resolveSinkURL(ctx, vars, namespace, name, s.urls[name])
		if err != nil {
			return nil, err
		}
		sink, err := deliver.NewSink(u, client, deliver.DefaultTimeout)
		if err != nil {
			return nil, fmt.Errorf("sink %q: %w", name, err)
		}
		sinks[name] = sink
	}
	return sinks, nil
}

// sinkList names the sinks with where each sends, redacted, for a log line.
func sinkList(sinks map[string]deliver.Sink) string {
	var out []string
	for name, s := range sinks {
		out = append(out, name+"="+s.Where())
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// outboxSlot hands the engine the outbox a command starts once it knows its sinks: the
// engine is built with the session, before the command's flags are read.
type outboxSlot struct {
	box atomic.Pointer[deliver.Outbox]
}

func (s *outboxSlot) Stored(namespace, id string, events []restart.Event) {
	if s == nil {
		return
	}
	s.box.Load().Stored(namespace, id, events)
}

func (s *outboxSlot) StoredFleet(namespace, id string) {
	if s == nil {
		return
	}
	s.box.Load().StoredFleet(namespace, id)
}

func (s *outboxSlot) set(o *deliver.Outbox) {
	if s != nil {
		s.box.Store(o)
	}
}

// notifyFlushWait bounds how long a command that drove a restart waits, at its end, for its
// last notifications: a healthy sink answers in well under a second, and one that fails or
// hangs must not hold a pipeline's step for a minute of retries.
const notifyFlushWait = 5 * time.Second

// flushNotifications gives the notifications of a command's last events a bounded time
// before it exits; what stays unsent is in its record, and the command says so on stderr
// (else a sink that fails looks, to whoever reads the output, like one that was told).
func (a *app) flushNotifications(ctx context.Context, o *deliver.Outbox) {
	if o == nil || ctx.Err() != nil {
		return // detached or stopped: the records keep what is owed
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyFlushWait)
	defer cancel()
	if err := o.Flush(fctx); err != nil {
		fmt.Fprintf(a.stderr, "Warning: after waiting %s, %v; they stay owed in the record (check a sink with `nomad-restart notify test <name>`)\n", notifyFlushWait, err)
	}
}

// notifyCommand is `nomad-restart notify test`.
type notifyCommand struct{}

// Help is `nomad-restart notify -help`.
func (notifyCommand) Help() string {
	return `Usage: nomad-restart notify test [options] <name>

  Send a test notification to the sink <name>, as the agent and run would send
  one, and say whether it was delivered: check a Slack, Teams or webhook URL,
  or a Nomad Variable holding one, before a restart needs it. The sink is
  named by -notify or by NOMAD_RESTART_NOTIFY_<NAME> in the environment (see
  docs/notifications.md). Its URL is never printed whole.

General Options:

  -address, -region, -namespace, -token and the TLS options, as for
  "nomad-restart run": used only to read a nomadvar:// URL.

Notify Options:

  -notify=<name>=<url>
    The sink, as run and agent take it: http(s) (a generic webhook with the
    documented JSON body), slack+https, teams+https, a shoutrrr service URL
    (discord://, telegram://, ntfy://, smtp://, ...), or
    nomadvar://<path>#<key> naming the Nomad Variable that holds the URL.
    Repeatable.

  -json
    Print the message sent, as the generic webhook's JSON body.
`
}

func (notifyCommand) Synopsis() string { return "Send a test notification to a sink" }

func (notifyCommand) Run(ctx context.Context, a *app, args []string) error {
	var cf clientFlags
	var nf notifyFlags
	var jsonOut bool
	// notify and notify test take the same flags, before and after the subcommand.
	flags := func(fs *flag.FlagSet) {
		fs.Var(&nf.sinks, "notify", "")
		fs.BoolVar(&jsonOut, "json", false, "")
	}
	rest, err := parseClientFlags("notify", &cf, args, flags)
	if err != nil {
		return err
	}
	if len(rest) == 0 || rest[0] != "test" {
		return usageErrorf("notify takes the subcommand test, as in `nomad-restart notify test -notify ops=https://... ops`")
	}
	rest, err = parseClientFlags("notify test", &cf, rest[1:], flags)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageErrorf("notify test takes one sink name, as in `nomad-restart notify test ops`")
	}
	name := strings.ToLower(rest[0])
	setup, err := nf.setup(a.environment())
	if err != nil {
		return err
	}
	raw, ok := setup.urls[name]
	if !ok {
		return usageErrorf("no sink named %q: give it with -notify %s=<url> or NOMAD_RESTART_NOTIFY_%s", name, name, strings.ToUpper(name))
	}
	setup.cfg.Sinks = []string{name}
	setup.urls = map[string]string{name: raw}
	var sinks map[string]deliver.Sink
	if strings.HasPrefix(raw, "nomadvar://") {
		// Only a URL kept in a Nomad Variable needs Nomad.
		ses, err := a.connect(ctx, cf)
		if err != nil {
			return err
		}
		sinks, err = ses.notifySinks(ctx, setup)
		if err != nil {
			return output.Flat(err)
		}
	} else if sinks, err = buildSinks(ctx, setup, nil, ""); err != nil {
		return err
	}
	sink := sinks[name]
	if sink == nil {
		return fmt.Errorf("sink %q could not be built", name)
	}
	m := notify.TestMessage(name, a.now())
	if err := sink.Send(ctx, m); err != nil {
		return fmt.Errorf("the test notification to %q was not delivered: %w", name, err)
	}
	if jsonOut {
		return output.WriteJSON(a.stdout, m)
	}
	fmt.Fprintf(a.stdout, "Sent a test notification to %s (%s)\n", name, sink.Where())
	return nil
}
