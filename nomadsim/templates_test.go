package nomadsim

import (
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
)

// statFile stats a file of the allocation, failing the test on an error.
func statFile(t *testing.T, cl *api.Client, allocID, path string) *api.AllocFileInfo {
	t.Helper()
	f, _, err := cl.AllocFS().Stat(&api.Allocation{ID: allocID}, path, nil)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return f
}

// taskState reads the task's state as the servers have it.
func taskState(t *testing.T, cl *api.Client, allocID, task string) *api.TaskState {
	t.Helper()
	a, _, err := cl.Allocations().Info(allocID, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a.TaskStates[task]
}

// waitEvent waits until the task's latest event is of type typ and returns the state.
func waitEvent(t *testing.T, cl *api.Client, allocID, task, typ string) *api.TaskState {
	t.Helper()
	var ts *api.TaskState
	waitFor(t, "a "+typ+" event", func() bool {
		ts = taskState(t, cl, allocID, task)
		return len(ts.Events) > 0 && ts.Events[len(ts.Events)-1].Type == typ
	})
	return ts
}

func putVar(t *testing.T, cl *api.Client, path string, items map[string]string) {
	t.Helper()
	if _, _, err := cl.Variables().Update(&api.Variable{Path: path, Items: items}, nil); err != nil {
		t.Fatalf("write variable %s: %v", path, err)
	}
}

// A noop template reading a variable literally is re-rendered after its wait when the
// variable's items change, and nothing else happens.
func TestTemplateNoopRerenderedOnVariableWrite(t *testing.T) {
	c, cl := startCluster(t, Options{})
	putVar(t, cl, "nomad/jobs/web", map[string]string{"port": "1"})
	job := serviceJob("web", 1)
	tmpl := templated(job, "local/config.txt", `PORT={{ with nomadVar "nomad/jobs/web" }}{{ .port }}{{ end }}`, "noop")
	tmpl.Wait = &api.WaitConfig{Min: ptr(2 * time.Second), Max: ptr(4 * time.Second)}
	a := runningAlloc(t, c, cl, job)
	before := taskState(t, cl, a.ID, "main")
	f0 := statFile(t, cl, a.ID, "main/local/config.txt")
	if !f0.ModTime.Before(before.StartedAt) {
		t.Fatalf("first render at %v, not before the start at %v", f0.ModTime, before.StartedAt)
	}

	// The same items again: the content would not change, nothing is written.
	putVar(t, cl, "nomad/jobs/web", map[string]string{"port": "1"})
	wrote := c.Now()
	putVar(t, cl, "nomad/jobs/web", map[string]string{"port": "2"})
	var f *api.AllocFileInfo
	waitFor(t, "the file re-rendered", func() bool {
		f = statFile(t, cl, a.ID, "main/local/config.txt")
		return f.ModTime.After(before.StartedAt)
	})
	if got := f.ModTime.Sub(wrote); got < 2*time.Second {
		t.Errorf("re-rendered %v after the write, before the template's 2s wait", got)
	}
	time.Sleep(c.RealDuration(6 * time.Second)) // past any splay
	after := taskState(t, cl, a.ID, "main")
	if len(after.Events) != len(before.Events) || !after.StartedAt.Equal(before.StartedAt) || after.Restarts != 0 {
		t.Errorf("noop re-render changed the task: events %v -> %v, started %v -> %v", eventTypes(before), eventTypes(after), before.StartedAt, after.StartedAt)
	}
	if f2 := statFile(t, cl, a.ID, "main/local/config.txt"); !f2.ModTime.Equal(f.ModTime) {
		t.Errorf("rendered again at %v without a change", f2.ModTime)
	}
}

// Writes during the wait snooze the render, up to the wait's max after the first
// (consul-template's quiescence).
func TestTemplateWaitQuiescence(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 20})
	putVar(t, cl, "nomad/jobs/web", map[string]string{"v": "0"})
	job := serviceJob("web", 1)
	templated(job, "local/config.txt", `{{ nomadVar "nomad/jobs/web" }}`, "noop").Wait = &api.WaitConfig{Min: ptr(4 * time.Second), Max: ptr(6 * time.Second)}
	a := runningAlloc(t, c, cl, job)
	first := c.Now()
	putVar(t, cl, "nomad/jobs/web", map[string]string{"v": "1"})
	time.Sleep(c.RealDuration(3 * time.Second))
	putVar(t, cl, "nomad/jobs/web", map[string]string{"v": "2"})
	started := taskState(t, cl, a.ID, "main").StartedAt
	var f *api.AllocFileInfo
	waitFor(t, "the file re-rendered", func() bool {
		f = statFile(t, cl, a.ID, "main/local/config.txt")
		return f.ModTime.After(started)
	})
	// Snoozed past the first write's 4s, but not past its 6s max.
	if d := f.ModTime.Sub(first); d < 5*time.Second || d > 6500*time.Millisecond {
		t.Errorf("rendered %v after the first write, want after the snooze (~6s, the max)", d)
	}
}

func TestTemplateSignalOnRerender(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	a1 := templated(job, "local/a.conf", "a", "signal")
	a1.ChangeSignal = ptr("SIGUSR1")
	templated(job, "local/b.conf", "b", "signal").ChangeSignal = ptr("sigusr1")
	templated(job, "local/c.conf", "c", "signal") // SIGHUP by default
	templated(job, "local/d.conf", "d", "noop")
	a := runningAlloc(t, c, cl, job)
	before := taskState(t, cl, a.ID, "main")
	if n := c.RerenderTemplates("", "web", "", 0); n != 4 {
		t.Fatalf("RerenderTemplates scheduled %d templates, want 4", n)
	}
	var ts *api.TaskState
	waitFor(t, "two signals", func() bool {
		ts = taskState(t, cl, a.ID, "main")
		return len(ts.Events) == len(before.Events)+2
	})
	var got []string
	for _, e := range ts.Events[len(before.Events):] {
		if e.Type != "Signaling" || e.DisplayMessage != "Template re-rendered" || e.Details["task_signal"] != e.TaskSignal {
			t.Errorf("event %+v", e)
		}
		got = append(got, e.TaskSignal)
	}
	slices.Sort(got)
	if want := []string{"hangup", "user defined signal 1"}; !slices.Equal(got, want) {
		t.Errorf("signals %q, want %q (one per distinct signal)", got, want)
	}
	if ts.Restarts != 0 || !ts.StartedAt.Equal(before.StartedAt) {
		t.Errorf("a signal restarted the task")
	}
}

func TestTemplateRestartOnRerender(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	templated(job, "local/app.conf", "x", "") // Nomad's default change_mode: restart
	templated(job, "local/sig.conf", "y", "signal")
	a := runningAlloc(t, c, cl, job)
	before := taskState(t, cl, a.ID, "main")
	if err := c.RerenderAllocTemplate(a.ID, "main", "local/sig.conf"); err != nil {
		t.Fatal(err)
	}
	if err := c.RerenderAllocTemplate(a.ID, "main", "local/app.conf"); err != nil {
		t.Fatal(err)
	}
	var ts *api.TaskState
	waitFor(t, "the task restarted", func() bool {
		ts = taskState(t, cl, a.ID, "main")
		return ts.Restarts == 1 && ts.State == "running"
	})
	types := eventTypes(ts)[len(before.Events):]
	// The signal template's render came alone, before: its splay may put its signal
	// anywhere, but the restart's events come in order.
	restart := slices.Index(types, "Restart Signaled")
	if restart < 0 || !slices.Equal(withoutSignals(types[restart:]), []string{"Restart Signaled", "Terminated", "Restarting", "Started"}) {
		t.Fatalf("events after the re-render: %v", types)
	}
	e := ts.Events[len(before.Events)+restart]
	if e.DisplayMessage != "Template with change_mode restart re-rendered" || e.RestartReason != "" || len(e.Details) != 0 {
		t.Errorf("Restart Signaled event %+v", e)
	}
	f := statFile(t, cl, a.ID, "main/local/app.conf")
	if !f.ModTime.Before(ts.LastRestart) || !ts.LastRestart.Before(ts.StartedAt) {
		t.Errorf("rendered %v, restarted %v, started %v: want that order", f.ModTime, ts.LastRestart, ts.StartedAt)
	}

	// Both at once: the restart wins, no signal is sent.
	at := c.Now().UnixNano()
	if got := c.RerenderTemplates("default", "web", "", 0); got != 2 {
		t.Fatalf("scheduled %d", got)
	}
	waitFor(t, "the task restarted again", func() bool {
		ts = taskState(t, cl, a.ID, "main")
		return ts.Restarts == 2 && ts.State == "running"
	})
	time.Sleep(c.RealDuration(6 * time.Second))
	for _, e := range taskState(t, cl, a.ID, "main").Events {
		if e.Type == "Signaling" && e.Time >= at {
			t.Errorf("a signal was sent along with the restart: %+v", e)
		}
	}
}

func withoutSignals(types []string) []string {
	return slices.DeleteFunc(slices.Clone(types), func(s string) bool { return s == "Signaling" })
}

func TestTemplateScriptOnRerender(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	tm := templated(job, "local/app.conf", "x", "script")
	tm.ChangeScript = &api.ChangeScript{Command: ptr("/local/reload.sh"), Args: []string{"-q", "now"}}
	first := templated(job, "local/first.conf", "x", "script")
	first.ChangeScript = &api.ChangeScript{Command: ptr("/bin/true"), RunOnFirstRender: ptr(true)}
	a := runningAlloc(t, c, cl, job)
	ts := waitEvent(t, cl, a.ID, "main", "Task hook message")
	if e := ts.Events[len(ts.Events)-1]; e.DisplayMessage != "Template successfully ran script /bin/true with arguments: []. Exit code: 0" {
		t.Errorf("first render script: %q", e.DisplayMessage)
	}
	n := len(ts.Events)
	if err := c.RerenderAllocTemplate(a.ID, "main", "local/app.conf"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the script ran", func() bool { return len(taskState(t, cl, a.ID, "main").Events) > n })
	ts = taskState(t, cl, a.ID, "main")
	e := ts.Events[len(ts.Events)-1]
	if e.Type != "Task hook message" || e.DisplayMessage != "Template successfully ran script /local/reload.sh with arguments: [-q now]. Exit code: 0" {
		t.Errorf("script event %s %q", e.Type, e.DisplayMessage)
	}
}

// A signal due while the task is down (between its exit and its restart) is skipped with a
// hook message.
func TestTemplateSignalWhileNotRunning(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	task := job.TaskGroups[0].Tasks[0]
	task.Meta = map[string]string{sim.MetaFailAfter: "2s"}
	task.RestartPolicy = &api.RestartPolicy{Attempts: ptr(3), Interval: ptr(time.Hour), Delay: ptr(time.Hour), Mode: ptr("fail")}
	templated(job, "local/app.conf", "x", "signal").Splay = ptr(time.Duration(0))
	a := runningAlloc(t, c, cl, job)
	waitEvent(t, cl, a.ID, "main", "Restarting")
	if err := c.RerenderAllocTemplate(a.ID, "main", "local/app.conf"); err != nil {
		t.Fatal(err)
	}
	ts := waitEvent(t, cl, a.ID, "main", "Task hook message")
	if e := ts.Events[len(ts.Events)-1]; e.DisplayMessage != "Template skipped signal hangup: task is not running" {
		t.Errorf("event %q", e.DisplayMessage)
	}
}

// An in-place restart renders nothing, unless the restart block says render_templates;
// then what changed since the last write is written in the prestart, between the restart
// and the start, and what did not change is left alone.
func TestTemplateRenderOnRestart(t *testing.T) {
	for _, render := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "render_templates"}[render], func(t *testing.T) {
			c, cl := startCluster(t, Options{})
			putVar(t, cl, "nomad/jobs/web", map[string]string{"v": "0"})
			job := serviceJob("web", 1)
			job.TaskGroups[0].RestartPolicy = &api.RestartPolicy{RenderTemplates: ptr(render)}
			// A wait far longer than the test: the change is pending when the restart comes.
			templated(job, "local/app.conf", `{{ nomadVar "nomad/jobs/web" }}`, "noop").Wait = &api.WaitConfig{Min: ptr(time.Hour)}
			templated(job, "local/same.conf", "static", "noop")
			a := runningAlloc(t, c, cl, job)
			app0 := statFile(t, cl, a.ID, "main/local/app.conf")
			same0 := statFile(t, cl, a.ID, "main/local/same.conf")
			putVar(t, cl, "nomad/jobs/web", map[string]string{"v": "1"})
			if err := cl.Allocations().Restart(a, "main", nil); err != nil {
				t.Fatal(err)
			}
			var ts *api.TaskState
			waitFor(t, "the task restarted", func() bool {
				ts = taskState(t, cl, a.ID, "main")
				return ts.Restarts == 1 && ts.State == "running"
			})
			app := statFile(t, cl, a.ID, "main/local/app.conf")
			if same := statFile(t, cl, a.ID, "main/local/same.conf"); !same.ModTime.Equal(same0.ModTime) {
				t.Errorf("unchanged content rewritten on restart: %v -> %v", same0.ModTime, same.ModTime)
			}
			if !render {
				if !app.ModTime.Equal(app0.ModTime) {
					t.Errorf("rendered on restart without render_templates: %v -> %v", app0.ModTime, app.ModTime)
				}
				return
			}
			if !ts.LastRestart.Before(app.ModTime) || !app.ModTime.Before(ts.StartedAt) {
				t.Errorf("rendered at %v, want between the restart %v and the start %v", app.ModTime, ts.LastRestart, ts.StartedAt)
			}
		})
	}
}

// RerenderTemplates spreads the allocations' renders over the spread, filters by
// destination, and leaves templates with a computed path to it alone on variable writes.
func TestRerenderTemplatesSpread(t *testing.T) {
	c, cl := startCluster(t, Options{Seed: 7})
	putVar(t, cl, "nomad/jobs/web", map[string]string{"v": "0"})
	job := serviceJob("web", 4)
	templated(job, "local/app.conf", `{{ nomadVar (printf "nomad/jobs/%s" (env "NOMAD_JOB_NAME")) }}`, "noop").Wait = &api.WaitConfig{Min: ptr(time.Second)}
	registerRunning(t, c, cl, job)
	stubs, _, err := cl.Jobs().Allocations("web", false, nil)
	if err != nil || len(stubs) != 4 {
		t.Fatalf("allocations %d %v", len(stubs), err)
	}
	mtimes := func() map[string]time.Time {
		out := map[string]time.Time{}
		for _, s := range stubs {
			out[s.ID] = statFile(t, cl, s.ID, "main/local/app.conf").ModTime
		}
		return out
	}
	first := mtimes()
	putVar(t, cl, "nomad/jobs/web", map[string]string{"v": "1"})
	time.Sleep(c.RealDuration(3 * time.Second))
	if got := mtimes(); !mapsEqual(got, first) {
		t.Errorf("a computed path was re-rendered on a variable write: %v -> %v", first, got)
	}
	if n := c.RerenderTemplates("default", "web", "local/other.conf", time.Second); n != 0 {
		t.Errorf("RerenderTemplates of another destination scheduled %d", n)
	}
	called := c.Now()
	if n := c.RerenderTemplates("default", "web", "local/app.conf", 20*time.Second); n != 4 {
		t.Fatalf("RerenderTemplates scheduled %d, want 4", n)
	}
	var got map[string]time.Time
	waitFor(t, "every allocation re-rendered", func() bool {
		got = mtimes()
		for id, m := range got {
			if !m.After(first[id]) {
				return false
			}
		}
		return true
	})
	distinct := map[time.Time]bool{}
	for id, m := range got {
		if d := m.Sub(called); d < 0 || d > 21*time.Second {
			t.Errorf("allocation %s re-rendered %v after the call, outside the 20s spread", id, d)
		}
		distinct[m] = true
	}
	if len(distinct) < 2 {
		t.Errorf("every allocation re-rendered at once: %v", got)
	}
}

func mapsEqual(a, b map[string]time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !b[k].Equal(v) {
			return false
		}
	}
	return true
}

// A task keeps its latest 10 events, whatever re-renders add.
func TestTemplateEventsCapped(t *testing.T) {
	c, cl := startCluster(t, Options{})
	job := serviceJob("web", 1)
	templated(job, "local/app.conf", "x", "signal").Splay = ptr(time.Duration(0))
	a := runningAlloc(t, c, cl, job)
	for range 12 {
		if err := c.RerenderAllocTemplate(a.ID, "main", "local/app.conf"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "ten signals", func() bool {
		ts := taskState(t, cl, a.ID, "main")
		return len(ts.Events) == 10 && ts.Events[0].Type == "Signaling"
	})
}
