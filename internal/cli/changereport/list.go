package changereport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
)

// OptedInJobs reads every job of namespace and keeps those that opt in. Jobs launched from
// a periodic or parameterized job are left out: they carry their parent's specification,
// and the parent is listed. A job gone between the list and its read is skipped.
func OptedInJobs(ctx context.Context, nomad *cluster.Nomad, namespace string) ([]onchange.Explain, error) {
	refs, err := nomad.ListJobs(ctx, namespace)
	if err != nil {
		if errors.Is(err, cluster.ErrPermissionDenied) {
			return nil, fmt.Errorf("%s; the token needs list-jobs and read-job in the namespace", output.OneLine(err.Error()))
		}
		return nil, fmt.Errorf("%s; check -address and -namespace", output.OneLine(err.Error()))
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
		job := *spec
		if job.Namespace == "" {
			job.Namespace = ref.Namespace
		}
		if e := onchange.Analyze(job); e.OptedIn() {
			out = append(out, e)
		}
	}
	return out, nil
}

// PrintWatchList prints one row per source of each opted-in group: the sources it watches,
// then what it does not watch with the reason; a group with invalid meta gets one row that
// says so. Every row of a job shows the job's last rollout.
func PrintWatchList(w io.Writer, list []WatchedJob) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Job\tNamespace\tGroup\tSource\tWatched\tLast Change\tLast Rollout")
	for _, j := range list {
		for _, g := range j.Groups {
			if g.OptedIn() {
				printGroupRows(tw, j, g)
			}
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nLast Change is the newest modify index of what a source covers (and its time, for Nomad")
	fmt.Fprintln(w, "variables), read from Nomad's variable listings and Consul; Last Rollout is the job's newest")
	fmt.Fprintln(w, "config-change rollout (see `nomad-restart status <id>`). A template followed by its re-renders")
	fmt.Fprintln(w, "rolls the allocations that run it stale (see `nomad-restart stale`).")
}

// printGroupRows prints the rows of one opted-in group.
func printGroupRows(tw io.Writer, j WatchedJob, g onchange.Group) {
	rollout := j.rolloutText()
	row := func(source, watched, change string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.JobID, j.Namespace, g.Name, source, watched, change, rollout)
	}
	invalid := fmt.Sprintf("no: invalid meta (see `nomad-restart watches -explain %s`)", j.JobID)
	for _, wt := range g.Watched {
		watched := "yes"
		if len(g.Problems) > 0 {
			watched = invalid
		}
		change := "-"
		if f, ok := j.sourceFactOf(wt.Source); ok {
			change = changeText(f)
		}
		row(wt.Source.String(), watched, change)
	}
	if len(g.Watched) == 0 && len(g.Followed) == 0 {
		why := "no: nothing the agent can watch"
		if len(g.Problems) > 0 {
			why = invalid
		}
		row("-", why, "-")
	}
	for _, n := range g.NotWatched {
		row(output.OneLine(n.What), "no: "+notWatchedReason(g, n), "-")
	}
	for _, f := range g.Followed {
		followed := "yes: by its re-renders, " + followedByText(f)
		if len(g.Problems) > 0 {
			followed = invalid
		}
		change := "-"
		if f.By == onchange.FollowFile && j.FileAccess != "" && j.FileAccess != filesReadable {
			change = j.FileAccess + ": " + j.FileAccessNote
		}
		row(templateRef(f.Task, f.Template, f.Destination), followed, change)
	}
	for _, n := range g.NotFollowed {
		row(templateRef(n.Task, n.Template, n.Destination), "no: its re-renders are not followed: "+n.Reason, "-")
	}
}

// templateRef names a template in a row of the listing: "template local/app.env (task
// main)"; a destination may be absolute, so it is not joined to the task's name.
func templateRef(task string, index int, dest string) string {
	return fmt.Sprintf("template %s (task %s)", templateText(index, dest), task)
}
