package changereport

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
)

// PrintStale prints, per job with stale allocations, a table of their re-rendered
// templates; then the templates whose re-renders cannot be seen; then a summary and the
// commands that restart only the stale allocations. namespace is -namespace as given: the
// commands name a job's namespace where it differs. named says the jobs were named on the
// command line (a job without templates is then worth a word).
func PrintStale(w io.Writer, list []StaleJob, namespace string, named, verbose bool) {
	if len(list) == 0 {
		fmt.Fprintf(w, "No job with templates in namespace %q: nothing can run with a stale render\n", NamespaceName(namespace))
		return
	}
	allocs, jobs := 0, 0
	for _, j := range list {
		if len(j.Allocs) == 0 {
			continue
		}
		allocs += len(j.Allocs)
		jobs++
		fmt.Fprintf(w, "Job %q (namespace %q)\n", j.JobID, j.Namespace)
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "Alloc ID\tGroup\tTask\tTemplate\tBy\tRendered At\tTask Started\tStale For")
		for _, a := range j.Allocs {
			for _, t := range a.Templates {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", output.ShortID(a.ID, verbose), a.Group, t.Task, t.Destination, t.By,
					output.FormatTime(t.RenderedAt), output.FormatTime(t.TaskStartedAt), output.RoundDuration(a.StaleFor))
			}
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	printStaleNotFollowed(w, list, named)
	if allocs == 0 {
		fmt.Fprintf(w, "No stale allocations: no running allocation of the %s read has a template re-rendered after its tasks started.\n",
			output.Plural(len(list), "job", "jobs"))
		return
	}
	fmt.Fprintf(w, "%s of %s run with templates re-rendered after their tasks started. Restart only those with:\n",
		output.Plural(allocs, "allocation", "allocations"), output.Plural(jobs, "job", "jobs"))
	for _, j := range list {
		if len(j.Allocs) > 0 {
			fmt.Fprintf(w, "    %s\n", staleOnlyCommand(j, namespace))
		}
	}
}

// staleOnlyCommand is the command that restarts a job's stale allocations, naming its
// namespace where -namespace did not.
func staleOnlyCommand(j StaleJob, namespace string) string {
	if j.Namespace != NamespaceName(namespace) {
		return fmt.Sprintf("nomad-restart run -stale-only -namespace %s %s", j.Namespace, j.JobID)
	}
	return "nomad-restart run -stale-only " + j.JobID
}

// printStaleNotFollowed lists, briefly, the templates whose re-renders cannot be seen (the
// first clause of the reason; -json has it whole), and the named jobs that have no
// template at all.
func printStaleNotFollowed(w io.Writer, list []StaleJob, named bool) {
	var rows []string
	for _, j := range list {
		for _, n := range j.NotFollowed {
			rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%s", j.JobID, n.Group, n.Task, templateText(n.Template, n.Destination), briefReason(n.Reason)))
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(w, "Not Followed (Nomad's re-renders of these templates cannot be seen)")
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "Job\tGroup\tTask\tTemplate\tReason")
		for _, r := range rows {
			fmt.Fprintln(tw, r)
		}
		_ = tw.Flush()
		fmt.Fprintln(w)
	}
	if !named {
		return
	}
	for _, j := range list {
		if len(j.NotFollowed) == 0 && len(j.Allocs) == 0 && !j.hasFollowed() {
			fmt.Fprintf(w, "Job %q has no template: nothing in it can run with a stale render.\n\n", j.JobID)
		}
	}
}

// briefReason is the first clause of a reason why a template is not followed
// ("change_mode restart: Nomad restarts ..." is "change_mode restart").
func briefReason(reason string) string {
	brief, _, _ := strings.Cut(reason, ": ")
	return brief
}
