package cli

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/notify"
	"github.com/nomad-restart/nomad-restart/internal/notify/deliver"
)

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
	rest, err := parseClientFlags("notify", &cf, args, func(fs *flag.FlagSet) {
		fs.Var(&nf.sinks, "notify", "")
		fs.BoolVar(&jsonOut, "json", false, "")
	})
	if err != nil {
		return err
	}
	if len(rest) == 0 || rest[0] != "test" {
		return usageErrorf("notify takes the subcommand test, as in `nomad-restart notify test -notify ops=https://... ops`")
	}
	rest, err = parseClientFlags("notify test", &cf, rest[1:], func(fs *flag.FlagSet) {
		fs.Var(&nf.sinks, "notify", "")
		fs.BoolVar(&jsonOut, "json", false, "")
	})
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
