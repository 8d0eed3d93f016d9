package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/changereport"
	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
)

// watchesOptions are the options of `nomad-restart watches`.
type watchesOptions struct {
	client  clientFlags
	explain bool
	json    bool
}

// watchesCommand is `nomad-restart watches`.
type watchesCommand struct{}

// Run is `nomad-restart watches [options]` (the opted-in jobs and their sources) and
// `nomad-restart watches -explain [options] <job>` (what the agent would watch and do for
// one job). Both only read (jobs, the variables' metadata, Consul keys and the restart
// records): nothing is written anywhere.
func (watchesCommand) Run(ctx context.Context, a *app, args []string) error {
	var o watchesOptions
	rest, err := parseClientFlags("watches", &o.client, args, func(fs *flag.FlagSet) {
		o.client.consul.add(fs)
		fs.BoolVar(&o.explain, "explain", false, "")
		fs.BoolVar(&o.json, "json", false, "")
	})
	if err != nil {
		return err
	}
	if err := o.client.consul.validate(); err != nil {
		return err
	}
	o.client = o.client.withEnv(a.env)
	if !o.explain {
		if len(rest) > 0 {
			return usageErrorf("unexpected arguments %q: to explain one job, use `nomad-restart watches -explain %s` (options go before the job)", strings.Join(rest, " "), rest[0])
		}
		return a.listWatches(ctx, o)
	}
	job, err := oneJob(rest)
	if err != nil {
		return err
	}
	return a.explainWatches(ctx, o, job)
}

// Help is `nomad-restart watches -help`.
func (watchesCommand) Help() string {
	return `Usage: nomad-restart watches [options]
       nomad-restart watches -explain [options] <job>

  Config-change rollouts: a job opts in with meta "nomad-restart.on-change"
  ("auto", or a comma-separated list of sources) at job or group level, and
  the agent restarts its allocations in health-gated batches when a Nomad
  variable or Consul key that its templates read changes. A template is also
  followed by its re-renders ("rendered": every template; "auto": those that
  read what cannot be watched by path, such as a Vault secret): when Nomad
  re-renders it after a task started, the allocations that run it stale are
  restarted ("nomad-restart stale" lists them). change_mode noop templates
  are followed by their file's modification time, read every
  "nomad-restart.render-interval" (default 30s, at least 5s); signal and
  script ones by their task events; restart ones are not followed. The options of
  "run" are read from the same meta under their flag's name
  ("nomad-restart.batch-size", ".health", ".max-unavailable", ".surge",
  ".batch-wait", ".on-error" (default fail), ".min-healthy-time",
  ".healthy-deadline"), plus "nomad-restart.debounce" (default 10s), and
  metric gates as "nomad-restart.gate.<name>" = "<PromQL> <op> <number>"
  (judged after each batch as run's -gate is, on the Prometheus of the
  agent's -prometheus-address).

  Without -explain, list the jobs of the namespace (every namespace with
  -namespace '*') that opt in, with each source of each opted-in group,
  watched or not and why. Jobs launched from a periodic or parameterized job
  are listed through their parent. Last Change is the newest modify index
  of what the source covers, and its time for Nomad variables: read from
  Nomad's variable listing (metadata only: no read of a secret is needed),
  where a variable missing and one the token may not list look alike ("none
  (missing, or not listable by this token)"), or from Consul (with no
  Consul address given, "unknown (no Consul configured)"). Last Rollout is
  the job's newest config-change rollout, its ID and status, from the
  records "nomad-restart status" lists.

  With -explain, show for one job (an ID or a unique prefix), before it opts
  in, what the agent would do: per group, whether it opted in and where, the
  options a rollout would use, each source it would watch (Nomad variable or
  Consul key or prefix, where it lives, and the task, template, function and
  change_mode that read it), what it would not watch and why, warnings (a
  template with change_mode restart, signal or script makes Nomad act on
  every allocation at once: use change_mode = "noop") and problems (invalid
  meta values: no rollout until they are fixed), the templates followed by
  their re-renders and how (file or task events), and those that cannot be
  and why. The last line says what a change would do. Problems are part of
  the explanation: the command still exits 0; it exits 1 only when the job
  cannot be read. Before that line, the last change of each source, the
  job's last rollout and, where a template is followed by its file, whether
  this token may read the allocations' files (tried once on one running
  allocation; the read-fs capability, which the agent's token needs too).

  Nothing is written: both forms only read jobs, variables' metadata,
  Consul keys and restart records.

General Options: Nomad's -address, -region, -namespace, -token and TLS
options, -request-timeout and -log-level (see "nomad-restart run -help").

Watches Options:

  -explain
    Explain one job instead of listing the opted-in jobs.

  -json
    Output the explanation (or the list of explanations of the opted-in
    jobs) in its JSON format, with per job Sources (each Source with its
    LastChange, {Index, Time} or null, and a Note saying why when null),
    LastRollout ({ID, Status} or null) and, where a template is followed
    by its file, FileAccess ("readable", "denied" or "unknown") and
    FileAccessNote; per group Followed, NotFollowed and RenderInterval.

  -consul-address=<addr>, -consul-token=<token>, -consul-ca-cert=<path>,
  -consul-client-cert=<path>, -consul-client-key=<path>,
  -consul-tls-server-name=<name>, -consul-tls-skip-verify
    Where Consul is, for the last change of Consul keys; unset values come
    from CONSUL_HTTP_ADDR and the other CONSUL_* variables, as for "run".
`
}

func (watchesCommand) Synopsis() string {
	return "List jobs opted in to config-change rollouts, or explain one"
}

// oneJob takes exactly one job ID or prefix from args.
func oneJob(args []string) (string, error) {
	switch {
	case len(args) == 0:
		return "", usageErrorf("missing job: give a job ID or a unique prefix, as in `nomad-restart watches -explain <job>`")
	case len(args) > 1:
		return "", usageErrorf("too many arguments %q: watches -explain takes one job (options go before it)", strings.Join(args, " "))
	}
	job := strings.TrimSpace(args[0])
	if job == "" {
		return "", usageErrorf("empty job ID: give a job ID or a unique prefix")
	}
	return job, nil
}

// openWatches connects and prepares the reader of the listing's facts: the sources through
// sourcewatch (Consul's from the -consul-* flags and the CONSUL_* environment), the
// rollouts from the stores `status` reads (Nomad's, and this machine's records of the
// cluster).
func (a *app) openWatches(ctx context.Context, o watchesOptions) (*cluster.Nomad, changereport.Facts, error) {
	ses, err := a.connect(ctx, o.client)
	if err != nil {
		return nil, changereport.Facts{}, err
	}
	nomad := ses.jobCluster()
	if nomad == nil {
		return nil, changereport.Facts{}, errors.New("watches reads job specifications, and this session has no Nomad client")
	}
	stores, err := a.stores(ctx, ses, stateAuto)
	if err != nil {
		return nil, changereport.Facts{}, err
	}
	log, err := a.logger(o.client.logLevel)
	if err != nil {
		return nil, changereport.Facts{}, err
	}
	hub := ses.sourceHub(sourcewatch.Options{Logger: log, Consul: o.client.consulConfig.SharedClient(false)})
	return nomad, changereport.Facts{Sources: hub, Stores: stores, Files: nomad}, nil
}

// explainWatches resolves job as run does (ID or unique prefix, -namespace), reads its full
// specification and shows what the agent would watch and do for it, with the last change
// of each source and the job's last rollout.
func (a *app) explainWatches(ctx context.Context, o watchesOptions, prefix string) error {
	nomad, facts, err := a.openWatches(ctx, o)
	if err != nil {
		return err
	}
	job, err := changereport.ResolveJob(ctx, nomad, o.client.namespace, prefix)
	if err != nil {
		return err
	}
	w := facts.Jobs(ctx, []onchange.Explain{onchange.Analyze(job.OnChange())})[0]
	if o.json {
		return output.WriteJSON(a.stdout, w)
	}
	changereport.PrintExplain(a.stdout, job.Spec, w)
	return nil
}

// listWatches lists the jobs of the namespace (every one with -namespace '*') whose meta
// opts in, with each source of each opted-in group, watched or not and why, its last
// change and the job's last rollout. It reads every job's specification: Nomad's job list
// carries no group meta nor templates.
func (a *app) listWatches(ctx context.Context, o watchesOptions) error {
	nomad, facts, err := a.openWatches(ctx, o)
	if err != nil {
		return err
	}
	explained, err := changereport.OptedInJobs(ctx, nomad, o.client.namespace)
	if err != nil {
		return err
	}
	list := facts.Jobs(ctx, explained)
	if o.json {
		return output.WriteJSON(a.stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintf(a.stdout, "No jobs opt in to config-change rollouts in namespace %q (see `nomad-restart watches -explain <job>`)\n", changereport.NamespaceName(o.client.namespace))
		return nil
	}
	changereport.PrintWatchList(a.stdout, list)
	return nil
}
