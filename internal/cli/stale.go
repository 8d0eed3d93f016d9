package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/changereport"
	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// staleOptions are the options of `nomad-restart stale`.
type staleOptions struct {
	client  clientFlags
	json    bool
	verbose bool
}

// staleCommand is `nomad-restart stale`.
type staleCommand struct{}

// Run is `nomad-restart stale [options] [job...]`: the running allocations with a
// template that Nomad re-rendered after their tasks last started, which therefore run with
// what the template held before (an environment file, a file read once at start). It only
// reads: jobs, their allocations and, for change_mode noop templates, the modification
// time of each destination file through Nomad's allocation filesystem API.
func (staleCommand) Run(ctx context.Context, a *app, args []string) error {
	var o staleOptions
	rest, err := parseClientFlags("stale", &o.client, args, func(fs *flag.FlagSet) {
		fs.BoolVar(&o.json, "json", false, "")
		fs.BoolVar(&o.verbose, "verbose", false, "")
	})
	if err != nil {
		return err
	}
	o.client = o.client.withEnv(a.env)
	jobs, err := jobArgs(rest)
	if err != nil {
		return err
	}
	nomad, err := a.openJobs(ctx, o.client)
	if err != nil {
		return err
	}
	specs, err := changereport.StaleSpecs(ctx, nomad, o.client.namespace, jobs)
	if err != nil {
		return err
	}
	list, err := changereport.ReadStaleJobs(ctx, nomad, specs, a.now())
	if err != nil {
		return err
	}
	if err := changereport.AllFilesDenied(list); err != nil {
		return err
	}
	for _, j := range list {
		if j.FilesDenied {
			fmt.Fprintf(a.stderr, "Warning: %s\n", changereport.FilesDeniedText(j))
		}
	}
	if o.json {
		return output.WriteJSON(a.stdout, list)
	}
	changereport.PrintStale(a.stdout, list, o.client.namespace, len(jobs) > 0, o.verbose)
	return nil
}

// Help is `nomad-restart stale -help`.
func (staleCommand) Help() string {
	return `Usage: nomad-restart stale [options] [job...]

  List the running allocations that run with a stale render: Nomad re-rendered
  one of their templates after their tasks last started, so the tasks still
  run with what the template held before (the environment of an env = true
  template, a file the application reads once at its start). Each is listed
  with the template, when it was re-rendered, when its task started, and for
  how long it has been stale (by this machine's clock). Restart exactly those
  allocations with "nomad-restart run -stale-only <job>".

  Without jobs, every job of the namespace that has a template is read (every
  namespace the token may list with -namespace '*'); otherwise the jobs named,
  each an ID or a unique prefix, as "run" takes them. Every template is judged
  whatever the job's meta says:

    - change_mode noop: by its destination file's modification time, read
      through Nomad's allocation filesystem API (one listing per allocation
      and template directory). Nomad writes the file only when its content
      changed.
    - change_mode signal or script: by the task events Nomad records after
      the re-render.
    - change_mode restart is not followed: Nomad restarts the task itself at
      each re-render. Nor is a destination outside the allocation directory,
      which the filesystem API cannot read. Both are listed as not followed.

  Reading the files needs the namespace's read-fs capability. When the token
  lacks it everywhere it was needed, stale says so in one line and exits 1
  rather than call the allocations up to date; when some jobs' files were
  read, the others are named in a warning on stderr (and FilesDenied in
  -json) and the command goes on.

  Exits 0 whether or not allocations are stale (count them with -json); 1
  when a job cannot be read or found, or on bad input. Nothing is written.

General Options: Nomad's -address, -region, -namespace, -token and TLS
options, -request-timeout and -log-level (see "nomad-restart run -help").

Stale Options:

  -json
    Output an array of the jobs read, each with its Namespace, JobID, Allocs
    (each stale allocation's ID, Name, Group, StaleSince, StaleFor in
    nanoseconds, and Templates: Task, Destination, By "file" or "events",
    RenderedAt, TaskStartedAt), NotFollowed (Group, Task, Template,
    Destination, Reason) and FilesDenied. See docs/json.md.

  -verbose
    Full allocation IDs.
`
}

func (staleCommand) Synopsis() string {
	return "List allocations running with templates re-rendered since they started"
}

// jobArgs takes the job IDs or prefixes stale reads, each once, in order; none means every
// job of the namespace.
func jobArgs(args []string) ([]string, error) {
	var out []string
	for _, arg := range args {
		job := strings.TrimSpace(arg)
		if job == "" {
			return nil, usageErrorf("empty job ID: give job IDs or unique prefixes (options go before them), or none for every job of the namespace")
		}
		if !slices.Contains(out, job) {
			out = append(out, job)
		}
	}
	return out, nil
}

// openJobs connects and returns the session's Nomad.
func (a *app) openJobs(ctx context.Context, cf clientFlags) (*cluster.Nomad, error) {
	ses, err := a.connect(ctx, cf)
	if err != nil {
		return nil, err
	}
	nomad := ses.jobCluster()
	if nomad == nil {
		return nil, errors.New("reading jobs' allocations and files needs Nomad's client, and this session has none")
	}
	return nomad, nil
}

// selectStale is run -stale-only's selection: the job's stale allocations, read as
// `stale` reads them, become the spec's OnlyAllocs (empty, not nil, when none is stale,
// so that the plan keeps none); o.job and the namespace become the job found, so that the
// plan reads the job that was read.
func (a *app) selectStale(ctx context.Context, p *output.Printer, ses session, o *runOptions) error {
	nomad := ses.jobCluster()
	if nomad == nil {
		return errors.New("-stale-only reads the allocations' template files, and this session has no Nomad client")
	}
	job, err := changereport.ResolveJob(ctx, nomad, o.client.namespace, o.job)
	if err != nil {
		return err
	}
	j, err := changereport.ReadStale(ctx, nomad, job.OnChange(), a.now())
	if err != nil {
		return err
	}
	if j.FilesDenied {
		// Some stale allocations would go unseen: restarting the others only would look
		// complete and is not.
		return fmt.Errorf("the token may not read the allocation files of job %q in namespace %q, so -stale-only cannot tell which allocations run a change_mode noop template stale: grant it the read-fs capability on the namespace (see docs/acl.md), or restart every allocation without -stale-only",
			j.JobID, j.Namespace)
	}
	o.job, o.client.namespace = j.JobID, j.Namespace
	o.spec.OnlyAllocs = make([]string, 0, len(j.Allocs))
	for _, s := range j.Allocs {
		o.spec.OnlyAllocs = append(o.spec.OnlyAllocs, s.ID)
	}
	if len(j.Allocs) == 0 || o.json {
		return nil
	}
	p.Header(a.now(), fmt.Sprintf("Found %s of job %q running with templates re-rendered after their tasks started",
		output.Plural(len(j.Allocs), "allocation", "allocations"), j.JobID))
	if o.verbose {
		for _, s := range j.Allocs {
			var refs []string
			for _, t := range s.Templates {
				refs = append(refs, fmt.Sprintf("%s/%s re-rendered at %s", t.Task, t.Destination, output.FormatTime(t.RenderedAt)))
			}
			p.Detail(a.now(), fmt.Sprintf("Allocation %q: %s", output.ShortID(s.ID, true), strings.Join(refs, ", ")))
		}
	}
	return nil
}
