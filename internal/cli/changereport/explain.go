package changereport

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// PrintExplain shows, group by group, what the agent would watch and do for job, then the
// last change of each source and the job's last rollout, and ends with one line saying what
// would happen on a change.
func PrintExplain(w io.Writer, job *onchange.JobSpec, wj WatchedJob) {
	e := wj.Explain
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintf(tw, "Job ID\t= %s\n", e.JobID)
	fmt.Fprintf(tw, "Namespace\t= %s\n", e.Namespace)
	fmt.Fprintf(tw, "Opted In\t= %s\n", yesOrNo(e.OptedIn()))
	_ = tw.Flush()
	for _, g := range e.Groups {
		fmt.Fprintf(w, "\nGroup %q\n", g.Name)
		printGroupOptions(w, job, g)
		printWatched(w, g)
		printNotWatched(w, g)
		printFollowed(w, g)
		printNotFollowed(w, g.NotFollowed)
		printNotes(w, "Not Revertible (a failed rollout of these stops)", g.NotRevertible)
		printNotes(w, "Warnings", g.Warnings)
		// What a rollout's restarts cost the service's clients, as run's plan says it.
		spec := g.Spec
		spec.Drain = engine.ExpectedDrain(job, []string{g.Name}, spec)
		printNotes(w, "Requests at Risk", engine.TrafficWarnings(job, []string{g.Name}, spec))
		printNotes(w, "Problems (no rollout until they are fixed)", problemLines(g.Problems))
	}
	printLastFacts(w, wj)
	fmt.Fprintf(w, "\n%s\n", explainOutcome(job, e))
}

// printLastFacts shows the last change of each source the groups watch (or would watch)
// and the job's last config-change rollout.
func printLastFacts(w io.Writer, wj WatchedJob) {
	fmt.Fprintln(w, "\nLast Changes")
	if len(wj.Sources) == 0 {
		fmt.Fprintln(w, "None (no source to watch)")
	} else {
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "Source\tLast Change")
		for _, f := range wj.Sources {
			fmt.Fprintf(tw, "%s\t%s\n", f.Source, changeText(f))
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\nLast Rollout = %s\n", wj.rolloutText())
	if wj.FileAccess != "" {
		fmt.Fprintf(w, "Allocation Files = %s\n", wj.fileAccessText())
	}
}

func yesOrNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// printGroupOptions shows the group's consent and the options a rollout would use.
func printGroupOptions(w io.Writer, job *onchange.JobSpec, g onchange.Group) {
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	field := func(k, v string) { fmt.Fprintf(tw, "%s\t= %s\n", k, v) }
	field("Consent", consentText(job, g))
	if len(g.Problems) > 0 {
		field("Options", "not read until the problems below are fixed")
		_ = tw.Flush()
		return
	}
	s := g.Spec
	mode, minHealthy, deadline := rolloutHealth(job, g)
	field("Batch Size", restart.FormatBatchSizes(s.BatchSizes))
	field("Batch Wait", batchWaitText(s))
	field("Health", healthText(s.Health, mode))
	if mode != restart.HealthNone {
		field("Min Healthy Time", minHealthy.String())
		field("Healthy Deadline", deadline.String())
	}
	field("Max Unavailable", maxUnavailableText(s.MaxUnavailable))
	field("Surge", fmt.Sprint(s.Surge))
	field("On Error", string(s.OnError))
	field("Debounce", g.Debounce.String())
	field("On Failure", onFailureText(g))
	if len(g.Followed) > 0 || g.Consent == onchange.ConsentRendered {
		field("Render Interval", g.RenderInterval.String())
	}
	_ = tw.Flush()
}

// consentText says whether the group opted in, with which value and at which level.
func consentText(job *onchange.JobSpec, g onchange.Group) string {
	level := consentLevel(job, g.Name)
	switch g.Consent {
	case onchange.ConsentAuto:
		return fmt.Sprintf("yes: %s = %q in the %s meta", onchange.KeyOnChange, g.OnChange, level)
	case onchange.ConsentExplicit:
		return fmt.Sprintf("yes, to the sources named in %s = %q in the %s meta", onchange.KeyOnChange, g.OnChange, level)
	case onchange.ConsentRendered:
		return fmt.Sprintf("yes, to Nomad's re-renders of its templates: %s = %q in the %s meta", onchange.KeyOnChange, g.OnChange, level)
	case onchange.ConsentOff:
		return fmt.Sprintf("no: opted out with %s = \"off\" in the %s meta", onchange.KeyOnChange, level)
	}
	return fmt.Sprintf("no: neither the job's nor the group's meta sets %s", onchange.KeyOnChange)
}

// consentLevel is where the group's nomad-restart.on-change is written: the group's meta
// wins over the job's, as onchange reads them.
func consentLevel(job *onchange.JobSpec, group string) string {
	if tg, ok := job.Group(group); ok {
		if _, ok := tg.Meta[onchange.KeyOnChange]; ok {
			return "group's"
		}
	}
	return "job's"
}

// rolloutHealth is the gate a rollout of the group would use and its times, resolved as
// the engine resolves them when it plans: -health auto becomes checks where the group
// defines checks, and the times not set in the meta come from the update block, else
// Nomad's defaults (with no checks, the min-healthy time is only the meta's).
func rolloutHealth(job *onchange.JobSpec, g onchange.Group) (restart.HealthMode, time.Duration, time.Duration) {
	s := g.Spec
	spec := job
	mode := s.Health
	if mode == restart.HealthAuto || mode == "" {
		mode = health.ResolveMode(restart.HealthAuto, spec, []string{g.Name})
	}
	minHealthy, deadline, _ := health.Defaults(spec, g.Name)
	if mode != restart.HealthChecks {
		minHealthy = s.MinHealthyTime
	}
	if s.MinHealthyTimeGiven {
		minHealthy = s.MinHealthyTime
	}
	if s.HealthyDeadlineGiven {
		deadline = s.HealthyDeadline
	}
	return mode, minHealthy, deadline
}

func healthText(asked, resolved restart.HealthMode) string {
	if asked == restart.HealthAuto || asked == "" {
		return fmt.Sprintf("auto, which is %q for this group", resolved)
	}
	return string(asked)
}

func batchWaitText(s restart.Spec) string {
	if s.BatchWaitAsk {
		return "ask (answered with `nomad-restart answer`)"
	}
	return s.BatchWait.String()
}

func maxUnavailableText(mu *restart.BatchSize) string {
	if mu == nil {
		return "the batch size"
	}
	return restart.FormatBatchSizes([]restart.BatchSize{*mu})
}

// printWatched lists the sources a change of which rolls the group, one line per template
// that reads each. For a group that has not opted in they are what "auto" would watch.
func printWatched(w io.Writer, g onchange.Group) {
	title := "Watched Sources"
	if !g.OptedIn() {
		title = fmt.Sprintf("Sources %s = \"auto\" Would Watch", onchange.KeyOnChange)
	}
	if len(g.Watched) == 0 {
		fmt.Fprintf(w, "\n%s\nNone\n", title)
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Kind\tPath\tWhere\tTask\tTemplate\tFunction\tChange Mode")
	for _, wt := range g.Watched {
		src := wt.Source
		lead := fmt.Sprintf("%s\t%s\t%s", kindText(src.Kind), output.OrDash(src.Path), whereText(src))
		if len(wt.Reads) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\n", lead)
			continue
		}
		for _, r := range wt.Reads {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", lead, r.Task, templateText(r.Template, r.Destination), r.Function, r.ChangeMode)
		}
	}
	_ = tw.Flush()
}

func kindText(k onchange.SourceKind) string {
	switch k {
	case onchange.NomadVariable:
		return "Nomad variable"
	case onchange.NomadPrefix:
		return "Nomad variables under"
	case onchange.ConsulKey:
		return "Consul key"
	case onchange.ConsulPrefix:
		return "Consul keys under"
	}
	return string(k)
}

// whereText is where a source lives: a variable's namespace and region, a key's
// datacenter, namespace and partition (unset: those of the Consul agent each client reads).
func whereText(s onchange.Source) string {
	var parts []string
	add := func(name, v string) {
		if v != "" {
			parts = append(parts, name+" "+v)
		}
	}
	if s.Kind.Nomad() {
		add("namespace", s.Namespace)
		add("region", s.Region)
	} else {
		add("datacenter", s.Datacenter)
		add("namespace", s.Namespace)
		add("partition", s.Partition)
		if len(parts) == 0 {
			return "the client's Consul"
		}
	}
	return output.OrDash(strings.Join(parts, ", "))
}

// templateText names a template by its destination, else its index among the task's.
func templateText(index int, dest string) string {
	if dest != "" {
		return dest
	}
	return fmt.Sprintf("#%d", index)
}

// printNotWatched lists what templates read that the agent does not watch, with why.
func printNotWatched(w io.Writer, g onchange.Group) {
	_ = output.WriteSection(w, "Not Watched", g.NotWatched, "Task\tTemplate\tWhat\tReason", func(n onchange.NotWatched) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s", n.Task, templateText(n.Template, n.Destination), output.OneLine(n.What), notWatchedReason(g, n))
	})
}

// notWatchedReason is why n is not watched, and that its template's re-renders are
// followed where they are: what a template reads may escape the watch while its renders
// do not.
func notWatchedReason(g onchange.Group, n onchange.NotWatched) string {
	for _, f := range g.Followed {
		if f.Task == n.Task && f.Template == n.Template {
			return n.Reason + " (its template's re-renders are followed)"
		}
	}
	return n.Reason
}

// printFollowed lists the templates whose re-renders roll the group (would, before it
// opts in), each with how the agent sees a re-render.
func printFollowed(w io.Writer, g onchange.Group) {
	title := fmt.Sprintf("Followed by Renders (files read every %s)", g.RenderInterval)
	if !g.OptedIn() {
		title = fmt.Sprintf("Templates %s = \"auto\" Would Follow by Their Renders", onchange.KeyOnChange)
	}
	if len(g.Followed) == 0 {
		fmt.Fprintf(w, "\n%s\nNone (%q follows only the templates that read what cannot be watched by path; %q follows them all)\n",
			title, onchange.ConsentAuto, onchange.ConsentRendered)
		return
	}
	_ = output.WriteSection(w, title, g.Followed, "Task\tTemplate\tChange Mode\tFollowed By", func(f onchange.Followed) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s", f.Task, templateText(f.Template, f.Destination), f.ChangeMode, followedByText(f))
	})
}

// followedByText says how a re-render of f is seen.
func followedByText(f onchange.Followed) string {
	if f.By == onchange.FollowEvents {
		return fmt.Sprintf("task events (change_mode %s)", f.ChangeMode)
	}
	return fmt.Sprintf("file %s (its modification time)", f.Path)
}

// printNotFollowed lists the templates whose re-renders cannot be followed, with why.
func printNotFollowed(w io.Writer, list []onchange.NotFollowed) {
	_ = output.WriteSection(w, "Not Followed", list, "Task\tTemplate\tReason", func(n onchange.NotFollowed) string {
		return fmt.Sprintf("%s\t%s\t%s", n.Task, templateText(n.Template, n.Destination), n.Reason)
	})
}

// onFailureText says what a failed rollout of the group does.
func onFailureText(g onchange.Group) string {
	if g.OnFailure == onchange.OnFailureRevert {
		return "revert (the kept previous value of a variable or key is written back, and the allocations restarted onto the new one restarted again)"
	}
	return "stop"
}

// printNotes prints a titled list of sentences, when there are any.
func printNotes(w io.Writer, title string, notes []string) {
	if len(notes) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\n", title)
	for _, n := range notes {
		fmt.Fprintf(w, "  * %s\n", n)
	}
}

func problemLines(problems []onchange.Problem) []string {
	out := make([]string, 0, len(problems))
	for _, p := range problems {
		out = append(out, p.String())
	}
	return out
}

// explainOutcome is the one line that says what a change would do: which groups the agent
// restarts and how, and why the others are left alone; or that nothing would be watched.
func explainOutcome(job *onchange.JobSpec, e onchange.Explain) string {
	var rolls, idle []string
	for _, g := range e.Groups {
		if g.Rolls() {
			rolls = append(rolls, rolloutText(job, g))
		} else {
			idle = append(idle, fmt.Sprintf("group %q %s", g.Name, idleReason(g)))
		}
	}
	if len(rolls) == 0 {
		if len(idle) == 0 {
			return "Nothing would happen on a change: the job has no task groups."
		}
		return "Nothing would happen on a change: " + strings.Join(idle, "; ") + "."
	}
	out := "On a change of a source a group watches, the agent restarts " + strings.Join(rolls, "; ") + "."
	if followsRenders(e) {
		out = "On a change of a source a group watches, or a re-render of a template it follows, the agent restarts " + strings.Join(rolls, "; ") + "."
	}
	if len(idle) > 0 {
		out += " Not rolled: " + strings.Join(idle, "; ") + "."
	}
	return out
}

// followsRenders reports whether a group that rolls follows templates by their renders.
func followsRenders(e onchange.Explain) bool {
	for _, g := range e.Groups {
		if g.RollsOnRenders() {
			return true
		}
	}
	return false
}

// rolloutText says how the agent would restart a group that rolls: on a change of a
// source, every allocation; on a re-render, only those that run the template stale.
func rolloutText(job *onchange.JobSpec, g onchange.Group) string {
	onRenders := ""
	if g.RollsOnRenders() {
		onRenders = fmt.Sprintf("the allocations of group %q running a template re-rendered after their tasks started (%s)", g.Name, renderReading(g))
	}
	if len(g.Watched) == 0 {
		return fmt.Sprintf("%s, in batches of %s (%s, on error %s), %s after the newest re-render",
			onRenders, restart.FormatBatchSizes(g.Spec.BatchSizes), rolloutGate(job, g), g.Spec.OnError, g.Debounce)
	}
	out := changeRolloutText(job, g)
	if onRenders != "" {
		out += ", and on a re-render only " + onRenders
	}
	return out
}

// renderReading says how the group's re-renders are read.
func renderReading(g onchange.Group) string {
	if len(onchange.FilePaths(g.Followed)) > 0 {
		return fmt.Sprintf("files read every %s", g.RenderInterval)
	}
	return "seen in task events"
}

// changeRolloutText says how the agent would restart a group on a change of a source.
func changeRolloutText(job *onchange.JobSpec, g onchange.Group) string {
	return fmt.Sprintf("%s in batches of %s (%s, on error %s), %s after the last change of a burst",
		groupAllocs(job, g.Name), restart.FormatBatchSizes(g.Spec.BatchSizes), rolloutGate(job, g), g.Spec.OnError, g.Debounce)
}

// rolloutGate names the health gate a rollout of the group would use.
func rolloutGate(job *onchange.JobSpec, g onchange.Group) string {
	mode, _, _ := rolloutHealth(job, g)
	gate := map[restart.HealthMode]string{
		restart.HealthChecks:  "health checks",
		restart.HealthRunning: "tasks running",
		restart.HealthNone:    "no health gate",
	}[mode]
	if gate == "" {
		gate = "health " + string(mode)
	}
	return gate
}

// groupAllocs names the allocations of a group: its count, or every one of a system job.
func groupAllocs(job *onchange.JobSpec, group string) string {
	if restart.SystemLike(job.Type) {
		return fmt.Sprintf("every allocation of group %q", group)
	}
	count := 1 // Nomad's default count
	if tg, ok := job.Group(group); ok {
		count = tg.Count
	}
	noun := "allocations"
	if count == 1 {
		noun = "allocation"
	}
	return fmt.Sprintf("group %q's %d %s", group, count, noun)
}

// idleReason says why a change would not roll the group.
func idleReason(g onchange.Group) string {
	switch {
	case g.Consent == onchange.ConsentOff:
		return "opted out"
	case !g.OptedIn():
		return fmt.Sprintf("has not opted in (add %q = \"auto\" to its meta or the job's)", onchange.KeyOnChange)
	case len(g.Problems) > 0:
		return "has invalid meta (see Problems)"
	case g.Consent == onchange.ConsentRendered:
		return "has no template whose re-renders the agent can follow (see Not Followed)"
	}
	return "reads no Nomad variable or Consul key the agent can watch"
}
