package sim

// Templates, as a task's template manager runs them
// (client/allocrunner/taskrunner/template/template.go, template_hook.go): rendered into
// the allocation directory in the task's prestart, before it starts; re-rendered when
// their data changes, after consul-template's quiescence (the template's wait, else the
// client's); and then their change_mode applied after a random splay. Templates are not
// evaluated: a template's content is a version that changes when its data does, which is
// what makes a render write the file (consul-template's renderer writes only content that
// differs). Every method runs with c.Mu held.

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/variables"
)

// The client's default template wait (client/config DefaultTemplateConfig), for templates
// without a wait block of their own.
const (
	defaultTemplateWaitMin = 5 * time.Second
	defaultTemplateWaitMax = 4 * time.Minute
)

// Task event types the template manager emits (nomad/structs).
const (
	taskHookMessage = "Task hook message"
	taskHookFailed  = "Task hook failed"
)

// tmplRun is one template of a task.
type tmplRun struct {
	tr *taskRun
	t  *api.Template
	// file is the destination relative to the allocation directory; "" when it would
	// escape it (Nomad refuses such a template; the sim renders nothing).
	file  string
	perm  fs.FileMode
	reads []varRead // the variables its text names literally
	// source is the version of the content the template's data gives now, written the
	// version on disk (0: never rendered). They differ while a render is pending.
	source, written uint64
	// The pending render of a change (consul-template's quiescence timer): whether one is
	// pending, when it is due (simulated time), the deadline its snoozes cannot pass, and
	// the generation that invalidates older timers.
	pending  bool
	due      time.Time
	deadline time.Time
	gen      uint64
}

// varRead is a variable a template reads through a literal path.
type varRead struct {
	fn        string // nomadVar, nomadVarExists, nomadVarList or nomadVarListSafe
	namespace string
	path      string // the variable's path, or for the lists the prefix
}

// newTmplRuns prepares the task's templates for its allocation.
func newTmplRuns(tr *taskRun) []*tmplRun {
	var out []*tmplRun
	for _, t := range tr.Task.Templates {
		if t == nil {
			continue
		}
		tm := &tmplRun{tr: tr, t: t, file: templateFile(tr.Task.Name, Deref(t.DestPath)), perm: 0o644, source: 1}
		if p, err := strconv.ParseUint(Deref(t.Perms), 8, 12); err == nil && Deref(t.Perms) != "" {
			tm.perm = fs.FileMode(p)
		}
		tm.reads = templateReads(Deref(t.EmbeddedTmpl), Deref(t.LeftDelim), Deref(t.RightDelim), tr.ar.Alloc.Namespace)
		out = append(out, tm)
	}
	return out
}

// templateFile is the destination's path in the allocation directory: relative to the
// task's directory ("local/x" of task web is "web/local/x", "../alloc/x" is "alloc/x"),
// the task environment's directory variables standing for their directories; "" if it
// leaves the allocation directory.
func templateFile(task, dest string) string {
	if dest == "" {
		return ""
	}
	for v, dir := range map[string]string{"NOMAD_TASK_DIR": "local", "NOMAD_SECRETS_DIR": "secrets", "NOMAD_ALLOC_DIR": "../alloc"} {
		dest = strings.ReplaceAll(dest, "${"+v+"}", dir)
	}
	const base = "/alloc-dir/alloc-id/"
	p := path.Join(base, task, dest)
	if !strings.HasPrefix(p, base) {
		return ""
	}
	return strings.TrimPrefix(p, base)
}

// nomadVarCall finds a call of a Nomad variable function with a literal argument.
var nomadVarCall = regexp.MustCompile(`\b(nomadVarListSafe|nomadVarList|nomadVarExists|nomadVar)\s+("(?:[^"\\]|\\.)*"|` + "`[^`]*`" + `)`)

// nomadVarArg is consul-template's form of the argument (dependency.go nvPathRe,
// nvNamespaceRe, nvRegionRe): a path (a prefix for lists), optionally @namespace and
// .region.
var nomadVarArg = regexp.MustCompile(`\A/?([^@]*)(?:@([[:word:]\-_]+|\*))?(?:\.[[:word:]\-_]+)?\z`)

// templateReads lists the variables a template's text reads through literal arguments,
// inside its actions. A computed path (nomadVar (printf ...)) is not found: the sim does
// not evaluate templates, so only Cluster.RerenderTemplates re-renders such a template.
func templateReads(text, left, right, namespace string) []varRead {
	if left == "" {
		left = "{{"
	}
	if right == "" {
		right = "}}"
	}
	var out []varRead
	for {
		i := strings.Index(text, left)
		if i < 0 {
			return out
		}
		text = text[i+len(left):]
		j := strings.Index(text, right)
		if j < 0 {
			return out
		}
		action := text[:j]
		text = text[j+len(right):]
		for _, m := range nomadVarCall.FindAllStringSubmatch(action, -1) {
			arg, err := strconv.Unquote(m[2])
			if err != nil {
				continue
			}
			a := nomadVarArg.FindStringSubmatch(arg)
			if a == nil || (a[1] == "" && !strings.HasPrefix(m[1], "nomadVarList")) {
				continue
			}
			ns := a[2]
			if ns == "" {
				ns = namespace
			}
			out = append(out, varRead{fn: m[1], namespace: ns, path: a[1]})
		}
	}
}

// changedBy tells whether a write changes what the read renders: nomadVar renders the
// items (a deleted variable is left out: the template would wait for it to come back);
// nomadVarExists and the lists render which variables exist.
func (v varRead) changedBy(ch variables.Change) bool {
	if v.namespace != ch.Namespace && v.namespace != "*" {
		return false
	}
	switch v.fn {
	case "nomadVar":
		return v.path == ch.Path && !ch.Deleted
	case "nomadVarExists":
		return v.path == ch.Path && (ch.Created || ch.Deleted)
	default:
		return strings.HasPrefix(ch.Path, v.path) && (ch.Created || ch.Deleted)
	}
}

// wait is the template's quiescence: its wait block, else the client's.
func (tm *tmplRun) wait() (lo, hi time.Duration) {
	w := tm.t.Wait
	if w == nil || w.Min == nil {
		return defaultTemplateWaitMin, defaultTemplateWaitMax
	}
	lo = *w.Min
	hi = 4 * lo // consul-template's WaitConfig.Finalize
	if w.Max != nil {
		hi = *w.Max
	}
	return lo, hi
}

// size is the length of the stand-in content of version v.
func (tm *tmplRun) size(v uint64) int64 {
	return int64(len(fmt.Sprintf("# %s, render %d\n", Deref(tm.t.DestPath), v)))
}

// write puts the template's current content on disk.
func (tm *tmplRun) write(now time.Time) {
	tm.written = tm.source
	if tm.file != "" && tm.tr.ar.FS != nil {
		tm.tr.ar.FS.writeFile(tm.file, tm.perm, tm.size(tm.written), now)
	}
}

// once reports whether the template renders only once (its once flag).
func (tm *tmplRun) once() bool { return Deref(tm.t.Once) }

// prestartTemplates is the task's prestart as far as files go: the log files (logmon
// hook), the task API socket (api_hook.go, made once per run of the task runner) and the
// template hook. The first
// prestart renders every template; later ones (restarts) keep the running manager and
// render nothing, unless the restart block says render_templates, which starts a new
// manager whose first render writes what changed since the last write.
func (tr *taskRun) prestartTemplates() {
	ar, c := tr.ar, tr.ar.c
	if ar.FS == nil {
		return
	}
	now := c.Clock.Now()
	tr.prestartAt = now
	// The logmon hook's fifos and log files, made at the task's first prestart.
	name := tr.Task.Name
	if _, ok := ar.FS.entries["alloc/logs/"+name+".stdout.0"]; !ok {
		for _, stream := range []string{"stdout", "stderr"} {
			ar.FS.put("alloc/logs/."+name+"."+stream+".fifo", modeFifo, 0, now)
			ar.FS.put("alloc/logs/"+name+"."+stream+".0", modeLog, 0, now)
		}
	}
	if !tr.apiSocket {
		tr.apiSocket = true
		ar.FS.put(tr.Task.Name+"/secrets/api.sock", modeSocket, 0, now)
	}
	switch {
	case !tr.tmplStarted:
		tr.tmplStarted, tr.tmplRunning = true, true
		for _, tm := range tr.tmpls {
			tm.write(now)
		}
	case Deref(tr.restartPolicy().RenderTemplates):
		// The old manager stops, with whatever it had pending.
		tr.tmplRunning = true
		tr.tmplGen++
		for _, tm := range tr.tmpls {
			tm.pending = false
			tm.gen++
			if tm.source != tm.written {
				tm.write(now)
			}
		}
	default:
		return
	}
	// A new manager's first render collects the change scripts to run once the task runs
	// (collectFirstRenderScripts).
	tr.firstScripts = nil
	for _, tm := range tr.tmpls {
		if s := tm.t.ChangeScript; Deref(tm.t.ChangeMode) == "script" && s != nil && Deref(s.RunOnFirstRender) {
			tr.firstScripts = append(tr.firstScripts, s)
		}
	}
}

// runFirstRenderScripts is the template hook's Poststart: the scripts collected at the
// manager's first render run once, now that the task runs.
func (tr *taskRun) runFirstRenderScripts() {
	for _, s := range tr.firstScripts {
		appendEvent(tr.State, tr.ar.c.evScriptRan(s))
	}
	tr.firstScripts = nil
}

// stopTemplates is the task runner's stop hooks once the task is dead for good: the
// template manager stops and the task API socket goes.
func (tr *taskRun) stopTemplates() {
	tr.tmplRunning = false
	tr.tmplGen++
	for _, tm := range tr.tmpls {
		tm.pending = false
		tm.gen++
	}
	if tr.apiSocket && tr.ar.FS != nil {
		tr.apiSocket = false
		tr.ar.FS.remove(tr.Task.Name+"/secrets/api.sock", tr.ar.c.Clock.Now())
	}
}

// watching reports whether the task's template manager runs: its allocation runs on its
// client and the task has rendered its templates and is not dead for good.
func (tr *taskRun) watching() bool {
	ar := tr.ar
	return tr.tmplRunning && ar.Received && !ar.Stopping && !ar.Terminal() && tr.State != nil && tr.State.State != taskDead
}

// dataChanged is a change of the template's data: a render is due after the quiescence,
// which a further change snoozes for the minimum again, up to the maximum after the first
// (consul-template's quiescence.tick).
func (tm *tmplRun) dataChanged() {
	c := tm.tr.ar.c
	tm.source++
	now := c.Clock.Now()
	lo, hi := tm.wait()
	if !tm.pending {
		tm.pending = true
		tm.deadline = now.Add(hi)
	}
	tm.due = now.Add(lo)
	if tm.due.After(tm.deadline) {
		tm.due = tm.deadline
	}
	tm.gen++
	gen := tm.gen
	c.after(tm.due.Sub(now), func() {
		if tm.gen != gen || !tm.pending || !tm.tr.watching() {
			return
		}
		// The templates of the task due by now render together, as one pass of
		// consul-template's runner renders every template whose quiescence ended.
		tr := tm.tr
		now := c.Clock.Now()
		var due []*tmplRun
		for _, x := range tr.tmpls {
			if x.pending && !x.due.After(now) {
				x.pending = false
				due = append(due, x)
			}
		}
		tr.renderTemplates(due)
	})
}

// renderTemplates renders the templates now: those whose content changed are written,
// and their change modes applied.
func (tr *taskRun) renderTemplates(tms []*tmplRun) {
	now := tr.ar.c.Clock.Now()
	var rendered []*tmplRun
	for _, tm := range tms {
		if tm.source != tm.written {
			tm.write(now)
			rendered = append(rendered, tm)
		}
	}
	tr.onTemplatesRendered(rendered)
}

// onTemplatesRendered applies the change modes of templates re-rendered together, as the
// template manager's onTemplateRendered does: nothing for noop; otherwise, after a random
// wait within the longest splay of those templates, a restart if any asks for one, or else
// each distinct signal once and each script.
func (tr *taskRun) onTemplatesRendered(rendered []*tmplRun) {
	ar, c := tr.ar, tr.ar.c
	restart := false
	var signals []string
	var scripts []*api.ChangeScript
	var splay time.Duration
	for _, tm := range rendered {
		switch Deref(tm.t.ChangeMode) {
		case "signal":
			if s := Deref(tm.t.ChangeSignal); !containsString(signals, s) {
				signals = append(signals, s)
			}
		case "restart":
			restart = true
		case "script":
			if tm.t.ChangeScript != nil {
				scripts = append(scripts, tm.t.ChangeScript)
			}
		default:
			continue
		}
		if s := Deref(tm.t.Splay); s > splay {
			splay = s
		}
	}
	if !restart && len(signals) == 0 && len(scripts) == 0 {
		return // a file changed: nothing the servers see
	}
	var wait time.Duration
	if splay > 0 {
		wait = time.Duration(c.tmplRng.Int64N(int64(splay)))
	}
	gen := tr.tmplGen
	c.after(wait, func() {
		if tr.tmplGen != gen || !tr.watching() {
			return // the manager stopped during the splay
		}
		switch {
		case restart:
			// Lifecycle.Restart; a task that is not running is left alone (the error is
			// ignored).
			_ = tr.restartWith(c.shownEvent(api.TaskRestartSignal, "Template with change_mode restart re-rendered"), nil)
		default:
			for _, s := range signals {
				if tr.proc {
					appendEvent(tr.State, c.evSignaling(s))
				} else {
					appendEvent(tr.State, c.shownEvent(taskHookMessage, fmt.Sprintf("Template skipped signal %v: task is not running", signalString(s))))
				}
			}
			for _, s := range scripts {
				if tr.proc {
					appendEvent(tr.State, c.evScriptRan(s))
				} else {
					appendEvent(tr.State, c.shownEvent(taskHookFailed, fmt.Sprintf("Template failed to run script %v with arguments %v on change: %v. Exit code: %v", Deref(s.Command), s.Args, errTaskNotRunning.Text, 0)))
				}
			}
		}
		ar.Touch()
	})
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// linuxSignals are the names Go gives signals on Linux (syscall.Signal.String), which
// Nomad's events show (SetTaskSignal).
var linuxSignals = map[string]string{
	"SIGABRT": "aborted", "SIGALRM": "alarm clock", "SIGBUS": "bus error", "SIGCHLD": "child exited",
	"SIGCONT": "continued", "SIGFPE": "floating point exception", "SIGHUP": "hangup",
	"SIGILL": "illegal instruction", "SIGINT": "interrupt", "SIGIO": "I/O possible", "SIGKILL": "killed",
	"SIGPIPE": "broken pipe", "SIGPROF": "profiling timer expired", "SIGPWR": "power failure",
	"SIGQUIT": "quit", "SIGSEGV": "segmentation fault", "SIGSTOP": "stopped (signal)",
	"SIGSYS": "bad system call", "SIGTERM": "terminated", "SIGTRAP": "trace/breakpoint trap",
	"SIGTSTP": "stopped", "SIGTTIN": "stopped (tty input)", "SIGTTOU": "stopped (tty output)",
	"SIGURG": "urgent I/O condition", "SIGUSR1": "user defined signal 1", "SIGUSR2": "user defined signal 2",
	"SIGVTALRM": "virtual timer expired", "SIGWINCH": "window changed", "SIGXCPU": "CPU time limit exceeded",
	"SIGXFSZ": "file size limit exceeded",
}

// signalString is the name of a change_signal as a Linux client's events show it.
func signalString(name string) string {
	if s, ok := linuxSignals[strings.ToUpper(name)]; ok {
		return s
	}
	return name
}

// onVariableChange re-renders, after their quiescence, the templates whose text reads the
// changed variable, in every allocation whose client runs them.
func (c *Cluster) onVariableChange(ch variables.Change) {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	if c.closed {
		return
	}
	for _, ar := range allocsByID(c.Allocs) {
		for _, tr := range ar.Tasks {
			if !tr.watching() {
				continue
			}
			for _, tm := range tr.tmpls {
				if tm.once() {
					continue
				}
				for _, v := range tm.reads {
					if v.changedBy(ch) {
						tm.dataChanged()
						break
					}
				}
			}
		}
	}
}

// RerenderTemplates changes the content of the job's templates whose destination (as the
// job writes it, like "local/app.conf") is destination, or of all its templates when
// destination is "", in every allocation whose client runs them, as if their data had
// changed: each allocation's templates are re-rendered together after a delay of its own,
// drawn uniformly from [0, spread) of simulated time, and their change modes then apply as
// on a real client. It returns how many templates (one per allocation and task) were
// scheduled. Templates with once = true are never re-rendered. An empty namespace is
// "default".
func (c *Cluster) RerenderTemplates(namespace, jobID, destination string, spread time.Duration) int {
	if namespace == "" {
		namespace = "default"
	}
	c.Mu.Lock()
	defer c.Mu.Unlock()
	j := c.Jobs[JobKey{namespace, jobID}]
	if j == nil || c.closed {
		return 0
	}
	n := 0
	for _, ar := range j.SortedAllocs() {
		byTask := map[*taskRun][]*tmplRun{}
		var order []*taskRun
		for _, tr := range ar.Tasks {
			if !tr.watching() {
				continue
			}
			for _, tm := range tr.tmpls {
				if tm.once() || (destination != "" && Deref(tm.t.DestPath) != destination) {
					continue
				}
				tm.source++
				if byTask[tr] == nil {
					order = append(order, tr)
				}
				byTask[tr] = append(byTask[tr], tm)
				n++
			}
		}
		if len(order) == 0 {
			continue
		}
		var d time.Duration
		if spread > 0 {
			d = time.Duration(c.tmplRng.Int64N(int64(spread)))
		}
		c.after(d, func() {
			for _, tr := range order {
				if tr.watching() {
					tr.renderTemplates(byTask[tr])
				}
			}
		})
	}
	return n
}

// RerenderAllocTemplate changes the content of the template of the allocation's task whose
// destination is destination (as the job writes it) and re-renders it at once; its change
// mode then applies as on a real client. It fails if there is no such template or the
// task's template manager does not run (the allocation is not running on its client, or
// the task has not started or is dead).
func (c *Cluster) RerenderAllocTemplate(allocID, task, destination string) error {
	c.Mu.Lock()
	defer c.Mu.Unlock()
	ar := c.Allocs[allocID]
	if ar == nil {
		return fmt.Errorf("nomadsim: no allocation %q", allocID)
	}
	tr := ar.TasksByName[task]
	if tr == nil {
		return fmt.Errorf("nomadsim: allocation %s has no task %q", allocID, task)
	}
	for _, tm := range tr.tmpls {
		if Deref(tm.t.DestPath) != destination {
			continue
		}
		if !tr.watching() || tm.once() {
			return fmt.Errorf("nomadsim: the templates of task %q of allocation %s are not being rendered", task, allocID)
		}
		tm.source++
		tr.renderTemplates([]*tmplRun{tm})
		return nil
	}
	return fmt.Errorf("nomadsim: task %q of allocation %s has no template with destination %q", task, allocID, destination)
}
