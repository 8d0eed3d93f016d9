package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

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

// cmdWatches is `nomad-restart watches [options]` (the opted-in jobs and their sources) and
// `nomad-restart watches -explain [options] <job>` (what the agent would watch and do for
// one job). Both only read (jobs, the variables' metadata, Consul keys and the restart
// records): nothing is written anywhere.
func (a *app) cmdWatches(ctx context.Context, args []string) error {
	var o watchesOptions
	fs := newFlagSet("watches")
	o.client.add(fs)
	o.client.consul.add(fs)
	fs.BoolVar(&o.explain, "explain", false, "")
	fs.BoolVar(&o.json, "json", false, "")
	if err := parseFlags(fs, "watches", args); err != nil {
		return err
	}
	if err := o.client.consul.validate(); err != nil {
		return err
	}
	o.client = o.client.withEnv(a.env)
	rest := fs.Args()
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

// watchSession is what watches needs of a session: its Nomad, through which jobs are
// read, and a hub of sourcewatch on it, through which the sources are read as the agent
// reads them.
type watchSession interface {
	session
	jobCluster() *cluster.Nomad
	sourceHub(sourcewatch.Options) *sourcewatch.Hub
}

// openWatches connects and prepares the reader of the listing's facts: the sources through
// sourcewatch (Consul's from the -consul-* flags and the CONSUL_* environment), the
// rollouts from the stores `status` reads (Nomad's, and this machine's records of the
// cluster).
func (a *app) openWatches(ctx context.Context, o watchesOptions) (*cluster.Nomad, watchFacts, error) {
	ses, err := a.connect(ctx, o.client)
	if err != nil {
		return nil, watchFacts{}, err
	}
	ws, ok := ses.(watchSession)
	if !ok {
		return nil, watchFacts{}, errors.New("watches reads job specifications, and this session has no Nomad client")
	}
	stores, err := a.stores(ctx, ses, stateAuto)
	if err != nil {
		return nil, watchFacts{}, err
	}
	log, err := a.logger(o.client.logLevel)
	if err != nil {
		return nil, watchFacts{}, err
	}
	hub := ws.sourceHub(sourcewatch.Options{Logger: log, Consul: o.client.consulConfig.SharedClient(false)})
	return ws.jobCluster(), watchFacts{sources: hub, stores: stores, files: ws.jobCluster()}, nil
}

// explainWatches resolves job as run does (ID or unique prefix, -namespace), reads its full
// specification and shows what the agent would watch and do for it, with the last change
// of each source and the job's last rollout.
func (a *app) explainWatches(ctx context.Context, o watchesOptions, prefix string) error {
	nomad, facts, err := a.openWatches(ctx, o)
	if err != nil {
		return err
	}
	job, err := resolveJobSpec(ctx, nomad, o.client.namespace, prefix)
	if err != nil {
		return err
	}
	w := facts.jobs(ctx, []onchange.Explain{onchange.Analyze(jobOnChange(job))})[0]
	if o.json {
		return writeJSON(a.stdout, w)
	}
	printExplain(a.stdout, job.spec, w)
	return nil
}

// resolveJobSpec finds the job by ID or unique prefix and reads its full specification.
func resolveJobSpec(ctx context.Context, nomad *cluster.Nomad, namespace, prefix string) (resolvedJob, error) {
	found, err := nomad.ResolveJob(ctx, namespace, prefix)
	if err != nil {
		return resolvedJob{}, jobLookupError(prefix, namespace, err)
	}
	spec, err := nomad.JobSpec(ctx, found.Namespace, found.ID)
	if err != nil {
		return resolvedJob{}, jobLookupError(found.ID, found.Namespace, err)
	}
	return resolvedJob{spec: spec, namespace: found.Namespace}, nil
}

// resolvedJob is a job's specification and the namespace it was found in (a specification
// may name none).
type resolvedJob struct {
	spec      *onchange.JobSpec
	namespace string
}

// jobOnChange is the job as config-change rollouts read it, in the namespace it was found in.
func jobOnChange(job resolvedJob) onchange.JobSpec {
	oc := *job.spec
	if oc.Namespace == "" {
		oc.Namespace = job.namespace
	}
	return oc
}

// jobLookupError turns a failed lookup into one line that says what to do, in the words
// `run` uses for the same failures.
func jobLookupError(job, namespace string, err error) error {
	var amb *cluster.AmbiguousJobError
	switch {
	case errors.As(err, &amb):
		return fmt.Errorf("job prefix %q matched multiple jobs (%s); give the full job ID, or -namespace to pick one", job, strings.Join(amb.Matches, ", "))
	case errors.Is(err, cluster.ErrJobNotFound):
		//lint:ignore ST1005 Nomad's own wording, as run says it
		return fmt.Errorf("No job(s) with prefix or ID %q found in namespace %q; check the job ID and -namespace", job, namespaceName(namespace))
	case errors.Is(err, cluster.ErrPermissionDenied):
		return fmt.Errorf("reading job %q: %s; the token needs read-job (and list-jobs for a prefix) in the namespace", job, oneLine(err.Error()))
	}
	return fmt.Errorf("reading job %q: %w", job, flat(err))
}

// namespaceName names a namespace in messages: the client's default is "default".
func namespaceName(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
