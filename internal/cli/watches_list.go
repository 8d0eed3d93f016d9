package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// notYet is what the listing shows for the last change seen and the last rollout until the
// agent's watcher records them.
const notYet = "n/a"

// listWatches lists the jobs of the namespace (every one with -namespace '*') whose meta
// opts in, with each source of each opted-in group, watched or not and why. It reads every
// job's specification: Nomad's job list carries no group meta nor templates.
func (a *app) listWatches(ctx context.Context, o watchesOptions) error {
	nomad, err := a.jobsOf(ctx, o.client)
	if err != nil {
		return err
	}
	list, err := optedInJobs(ctx, nomad, o.client.namespace)
	if err != nil {
		return err
	}
	if o.json {
		if list == nil {
			list = []onchange.Explain{}
		}
		return writeJSON(a.stdout, list)
	}
	if len(list) == 0 {
		fmt.Fprintf(a.stdout, "No jobs opt in to config-change rollouts in namespace %q (see `nomad-restart watches -explain <job>`)\n", namespaceName(o.client.namespace))
		return nil
	}
	printWatchList(a.stdout, list)
	return nil
}

// optedInJobs reads every job of namespace and keeps those that opt in. Jobs launched from
// a periodic or parameterized job are left out: they carry their parent's specification,
// and the parent is listed. A job gone between the list and its read is skipped.
func optedInJobs(ctx context.Context, nomad *cluster.Nomad, namespace string) ([]onchange.Explain, error) {
	refs, err := nomad.ListJobs(ctx, namespace)
	if err != nil {
		if errors.Is(err, cluster.ErrPermissionDenied) {
			return nil, fmt.Errorf("%s; the token needs list-jobs and read-job in the namespace", oneLine(err.Error()))
		}
		return nil, fmt.Errorf("%s; check -address and -namespace", oneLine(err.Error()))
	}
	var out []onchange.Explain
	for _, ref := range refs {
		if ref.ParentID != "" {
			continue
		}
		spec, err := nomad.JobSpec(ctx, ref.Namespace, ref.ID)
		if errors.Is(err, cluster.ErrJobNotFound) {
			continue
		}
		if err != nil {
			return nil, jobLookupError(ref.ID, ref.Namespace, err)
		}
		job := spec.API()
		if job.Namespace == nil || *job.Namespace == "" {
			job.Namespace = &ref.Namespace
		}
		if e := onchange.Analyze(job); e.OptedIn() {
			out = append(out, e)
		}
	}
	return out, nil
}

// printWatchList prints one row per source of each opted-in group: the sources it watches,
// then what it does not watch with the reason; a group with invalid meta gets one row that
// says so.
func printWatchList(w io.Writer, list []onchange.Explain) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Job\tNamespace\tGroup\tSource\tWatched\tLast Change\tLast Rollout")
	for _, e := range list {
		for _, g := range e.Groups {
			if !g.OptedIn() {
				continue
			}
			row := func(source, watched string) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.JobID, e.Namespace, g.Name, source, watched, notYet, notYet)
			}
			for _, wt := range g.Watched {
				watched := "yes"
				if len(g.Problems) > 0 {
					watched = fmt.Sprintf("no: invalid meta (see `nomad-restart watches -explain %s`)", e.JobID)
				}
				row(wt.Source.String(), watched)
			}
			if len(g.Watched) == 0 {
				why := "no: nothing the agent can watch"
				if len(g.Problems) > 0 {
					why = fmt.Sprintf("no: invalid meta (see `nomad-restart watches -explain %s`)", e.JobID)
				}
				row("-", why)
			}
			for _, n := range g.NotWatched {
				row(oneLine(n.What), "no: "+n.Reason)
			}
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nLast change and last rollout need the agent's watcher, which is not yet available; %q means not available.\n", notYet)
}
