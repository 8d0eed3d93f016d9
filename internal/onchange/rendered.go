package onchange

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Rollouts on re-renders: what a template reads cannot always be watched by path (a Vault
// secret, a catalog lookup, a path computed at render time), but Nomad's client renders it
// anyway, and an allocation whose template was re-rendered after its tasks last started
// runs with what the template held before. The signal comes from Nomad, not from the
// source, so the agent needs no Vault token and covers every source alike.

// FollowBy says how the agent learns that Nomad re-rendered a template.
type FollowBy string

const (
	// FollowFile reads the destination's modification time through Nomad's allocation
	// filesystem API (one listing of its directory), every render-interval.
	// consul-template writes a destination only when its content changed, atomically
	// (renderer.Render: bytes.Equal, then AtomicWrite), so the time moves with a re-render
	// that changed something and with nothing else. For change_mode noop, which leaves no
	// other trace.
	FollowFile FollowBy = "file"
	// FollowEvents reads the task events Nomad records after a re-render: "Signaling"
	// ("Template re-rendered") for change_mode signal, "Task hook message" or "Task hook
	// failed" (the change script ran) for change_mode script. They come with the
	// allocations, at no cost of their own.
	FollowEvents FollowBy = "events"
)

// Followed is a template whose re-renders roll its group.
type Followed struct {
	Group       string
	Task        string
	Template    int
	Destination string
	ChangeMode  string
	By          FollowBy
	// Path is the destination relative to the allocation directory, as the filesystem
	// API names it (task "web", "local/app.conf": "web/local/app.conf"); FollowFile only.
	Path string `json:",omitempty"`
}

// Ref names the template as a trigger does: task "web" template "local/app.conf".
func (f Followed) Ref() string { return f.Task + "/" + f.Destination }

// NotFollowed is a template whose re-renders do not roll its group, and why.
type NotFollowed struct {
	Task        string
	Template    int
	Destination string `json:",omitempty"`
	Reason      string
}

func (n NotFollowed) String() string {
	return fmt.Sprintf("task %q template %s: %s", n.Task, templateName(n.Template, n.Destination), n.Reason)
}

// followTemplates says which of the group's templates are followed by their renders:
// with "rendered", all of them; with "auto" (and, to explain a job before it opts in,
// with no consent), those that read something that cannot be watched by path (dynamic).
func followTemplates(tg GroupSpec, consent Consent, dynamic map[string]bool) ([]Followed, []NotFollowed) {
	if consent != ConsentAuto && consent != ConsentRendered && consent != ConsentNone {
		return nil, nil
	}
	var followed []Followed
	var not []NotFollowed
	for _, task := range tg.Tasks {
		for i, t := range task.Templates {
			if consent != ConsentRendered && !dynamic[templateKey(task.Name, i)] {
				continue
			}
			f, reason := follow(tg.Name, task.Name, i, t)
			if reason != "" {
				not = append(not, NotFollowed{Task: task.Name, Template: i, Destination: t.DestPath, Reason: reason})
				continue
			}
			followed = append(followed, f)
		}
	}
	return followed, not
}

// AllTemplates lists every template of the job as "rendered" would follow it, whatever
// its meta says: what `stale` reads, for jobs opted in or not.
func AllTemplates(job JobSpec) ([]Followed, []NotFollowed) {
	var followed []Followed
	var not []NotFollowed
	for _, tg := range job.Groups {
		f, n := followTemplates(tg, ConsentRendered, nil)
		followed = append(followed, f...)
		not = append(not, n...)
	}
	return followed, not
}

func templateKey(task string, index int) string { return fmt.Sprintf("%s\x00%d", task, index) }

// follow says how one template is followed, or why it cannot be.
func follow(group, task string, index int, t TemplateSpec) (Followed, string) {
	f := Followed{Group: group, Task: task, Template: index, Destination: t.DestPath, ChangeMode: changeMode(t)}
	switch f.ChangeMode {
	case "restart":
		return f, "change_mode restart: Nomad restarts the task itself at each re-render, in every allocation within its splay; set change_mode = \"noop\" to have re-renders rolled in batches"
	case "signal", "script":
		f.By = FollowEvents
		return f, ""
	}
	p, err := AllocPath(task, t.DestPath)
	if err != nil {
		return f, err.Error()
	}
	f.By, f.Path = FollowFile, p
	return f, ""
}

// AllocPath is a template destination's path relative to the allocation directory, as
// Nomad's client resolves it (taskenv.ClientPath: relative to the task's directory, after
// interpolating the task's directories' variables).
func AllocPath(task, dest string) (string, error) {
	if strings.TrimSpace(dest) == "" {
		return "", fmt.Errorf("it has no destination")
	}
	if task == "" || strings.ContainsAny(task, "/\x00") {
		// Nomad refuses such a task name; joined to the destination, it would name a path
		// outside the task's directory ("" + "/x" is absolute).
		return "", fmt.Errorf("its task name %q is not one Nomad accepts", task)
	}
	r := strings.NewReplacer(
		"${NOMAD_TASK_DIR}", "local", "${NOMAD_SECRETS_DIR}", "secrets", "${NOMAD_ALLOC_DIR}", "../alloc",
		"${env[\"NOMAD_TASK_DIR\"]}", "local", "${env[\"NOMAD_SECRETS_DIR\"]}", "secrets", "${env[\"NOMAD_ALLOC_DIR\"]}", "../alloc",
	)
	d := r.Replace(dest)
	if strings.Contains(d, "${") || strings.Contains(d, "$NOMAD") {
		return "", fmt.Errorf("its destination %q uses a variable known only on the client", dest)
	}
	if path.IsAbs(d) {
		return "", fmt.Errorf("its destination %q is outside the allocation directory, which the filesystem API reads", dest)
	}
	p := path.Clean(task + "/" + d)
	if p == ".." || strings.HasPrefix(p, "../") || p == task || p == "." {
		return "", fmt.Errorf("its destination %q is outside the allocation directory, which the filesystem API reads", dest)
	}
	return p, nil
}

// FilePaths are the distinct paths of the templates followed by their files.
func FilePaths(followed []Followed) []string {
	var out []string
	for _, f := range followed {
		if f.By == FollowFile && !slices.Contains(out, f.Path) {
			out = append(out, f.Path)
		}
	}
	return out
}

// Renders are the modification times read of followed templates' files: by allocation ID,
// then by path (Followed.Path). A file not read, or missing, has no entry.
type Renders map[string]map[string]time.Time

// EventRender is when the task's events last show a re-render of a template with change
// mode mode (signal or script), zero when none shows. Nomad keeps a task's last 10
// events; a re-render older than those has been followed by a restart or by newer events.
func EventRender(ts restart.TaskState, mode string) time.Time {
	var at time.Time
	for _, e := range ts.Events {
		if rerenderEvent(e, mode) && e.Time.After(at) {
			at = e.Time
		}
	}
	return at
}

// rerenderEvent reports whether e is what Nomad records after a re-render with the change
// mode (taskrunner/template/template.go: handleChangeModeSignal, processScript).
func rerenderEvent(e restart.TaskEvent, mode string) bool {
	switch mode {
	case "signal":
		return e.Type == "Signaling" && e.Message == "Template re-rendered"
	case "script":
		return e.Type == "Task hook message" && strings.HasPrefix(e.Message, "Template successfully ran script") ||
			e.Type == "Task hook failed" && (strings.HasPrefix(e.Message, "Template failed to run script") ||
				strings.HasPrefix(e.Message, "Template ran script"))
	}
	return false
}

// StaleTemplate is one template re-rendered after its task last started.
type StaleTemplate struct {
	Task        string
	Destination string
	By          FollowBy
	RenderedAt  time.Time
	StartedAt   time.Time
}

// StaleAlloc is an allocation running with templates re-rendered after its tasks started.
type StaleAlloc struct {
	Alloc     *restart.Alloc
	Templates []StaleTemplate
}

// Since is the oldest of its re-renders: how long it has run with stale data.
func (s StaleAlloc) Since() time.Time {
	var at time.Time
	for _, t := range s.Templates {
		if at.IsZero() || t.RenderedAt.Before(at) {
			at = t.RenderedAt
		}
	}
	return at
}

// Newest is the newest of its re-renders.
func (s StaleAlloc) Newest() time.Time {
	var at time.Time
	for _, t := range s.Templates {
		if t.RenderedAt.After(at) {
			at = t.RenderedAt
		}
	}
	return at
}

// FindStale lists the running allocations with a followed template re-rendered after its
// task last started (restart.TaskState.LatestStart: an in-place restart that renders the
// templates again writes them before the task starts), in allocs' order. A task that is
// not running is left out: it renders again before it starts.
func FindStale(followed []Followed, renders Renders, allocs []*restart.Alloc) []StaleAlloc {
	var out []StaleAlloc
	for _, a := range allocs {
		if a.ClientStatus != restart.ClientRunning || a.DesiredStatus != restart.DesiredRun || a.NextAllocation != "" {
			continue
		}
		var stale []StaleTemplate
		for _, f := range followed {
			if f.Group != a.Group {
				continue
			}
			ts, ok := a.Tasks[f.Task]
			if !ok || ts.State != restart.TaskRunning {
				continue
			}
			var at time.Time
			if f.By == FollowEvents {
				at = EventRender(ts, f.ChangeMode)
			} else {
				at = renders[a.ID][f.Path]
			}
			started := ts.LatestStart()
			if !at.IsZero() && !started.IsZero() && at.After(started) {
				stale = append(stale, StaleTemplate{Task: f.Task, Destination: f.Destination, By: f.By, RenderedAt: at, StartedAt: started})
			}
		}
		if len(stale) > 0 {
			out = append(out, StaleAlloc{Alloc: a, Templates: stale})
		}
	}
	return out
}

// DecideRendered says whether the job needs a rollout for re-renders now: a group that
// follows renders needs one when some of its allocations run with a template re-rendered
// after their tasks started (FindStale) and the debounce has passed since the newest of
// those re-renders (renders land per allocation over seconds or minutes; a burst is one
// rollout). The rollout restarts those allocations only (Spec.OnlyAllocs). Its ID derives
// from the allocations and their render times, so every agent that reads the same files
// files the same restart. Groups roll one after the other as in Decide.
func DecideRendered(ex Explain, renders Renders, allocs []*restart.Alloc, now time.Time) Decision {
	var d Decision
	var pick *Rollout
	var picked []StaleAlloc
	for _, g := range ex.Groups {
		if !g.RollsOnRenders() {
			continue
		}
		stale := FindStale(g.Followed, renders, allocs)
		if len(stale) == 0 {
			continue
		}
		var newest time.Time
		for _, s := range stale {
			newest = maxTime(newest, s.Newest())
		}
		if due := newest.Add(g.Debounce); now.Before(due) {
			if d.RecheckAt.IsZero() || due.Before(d.RecheckAt) {
				d.RecheckAt = due
			}
			continue
		}
		if pick == nil {
			pick = &Rollout{Spec: g.Spec}
		} else if !sameOptions(pick.Spec, g.Spec) {
			continue
		}
		pick.Groups = append(pick.Groups, g.Name)
		pick.Stale += len(stale)
		picked = append(picked, stale...)
	}
	if pick == nil {
		return d
	}
	pick.Spec.Groups = pick.Groups
	pick.Spec.OnlyAllocs = nil
	for _, s := range picked {
		pick.Spec.OnlyAllocs = append(pick.Spec.OnlyAllocs, s.Alloc.ID)
	}
	slices.Sort(pick.Spec.OnlyAllocs)
	pick.Triggers = RenderTriggers(picked)
	pick.ID = renderRolloutID(ex, pick, picked)
	d.Rollout = pick
	return d
}

// RenderTriggers names what was re-rendered: one trigger per template, with how many
// allocations and the newest render, sorted.
func RenderTriggers(stale []StaleAlloc) []restart.Trigger {
	byRef := map[string]*restart.Trigger{}
	var refs []string
	for _, s := range stale {
		for _, t := range s.Templates {
			ref := RenderSource(t.Task, t.Destination)
			tr := byRef[ref]
			if tr == nil {
				tr = &restart.Trigger{Source: ref, Task: t.Task, Destination: t.Destination}
				byRef[ref] = tr
				refs = append(refs, ref)
			}
			tr.Allocs++
			tr.ChangedAt = maxTime(tr.ChangedAt, t.RenderedAt)
		}
	}
	slices.Sort(refs)
	out := make([]restart.Trigger, len(refs))
	for i, r := range refs {
		out[i] = *byRef[r]
	}
	return out
}

// RenderSource is a re-rendered template's name in a trigger: "rendered:<task>/<destination>".
func RenderSource(task, destination string) string {
	return RenderSourcePrefix + task + "/" + destination
}

// RenderSourcePrefix starts the Source of a trigger that is a re-render.
const RenderSourcePrefix = "rendered:"

// renderRolloutID names a rollout for re-renders by the job, its groups, and each stale
// allocation's templates and render times.
func renderRolloutID(ex Explain, r *Rollout, stale []StaleAlloc) string {
	var parts []string
	for _, s := range stale {
		for _, t := range s.Templates {
			parts = append(parts, fmt.Sprintf("%s/%s/%s=%d", s.Alloc.ID, t.Task, t.Destination, t.RenderedAt.UnixNano()))
		}
	}
	slices.Sort(parts)
	name := fmt.Sprintf("nomad-restart:rendered:%s\x00%s\x00%s\x00%s", ex.Namespace, ex.JobID, strings.Join(r.Groups, ","), strings.Join(parts, "\x00"))
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte(name)).String()
}
