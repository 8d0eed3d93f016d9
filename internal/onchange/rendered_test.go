package onchange

import (
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestFollowTemplatesByConsent(t *testing.T) {
	vault := TemplateSpec{Embedded: `{{ with secret "kv/data/db" }}{{ .Data.data.pw }}{{ end }}`, DestPath: "secrets/db.env", ChangeMode: "noop"}
	computed := TemplateSpec{Embedded: `{{ with nomadVar (printf "nomad/jobs/%s" (env "NOMAD_JOB_NAME")) }}{{ .x }}{{ end }}`, DestPath: "local/app.conf", ChangeMode: "signal"}
	literal := TemplateSpec{Embedded: `{{ with nomadVar "nomad/jobs/web" }}{{ .x }}{{ end }}`, DestPath: "local/web.conf", ChangeMode: "noop"}
	restartMode := TemplateSpec{Embedded: `{{ service "db" }}`, DestPath: "local/db.txt"} // Nomad's default: restart
	script := TemplateSpec{Embedded: `{{ with secret "pki/issue/web" "common_name=web" }}{{ .Data.certificate }}{{ end }}`, DestPath: "${NOMAD_SECRETS_DIR}/cert.pem", ChangeMode: "script"}
	templates := []TemplateSpec{vault, computed, literal, restartMode, script}

	tests := []struct {
		consent      string
		wantFollowed []string // Ref() and By
		wantNot      int
		wantWatched  int
		rolls        bool
	}{
		{consent: "auto", wantFollowed: []string{"app/secrets/db.env file app/secrets/db.env", "app/local/app.conf events ", "app/${NOMAD_SECRETS_DIR}/cert.pem events "}, wantNot: 1, wantWatched: 1, rolls: true},
		{consent: "rendered", wantFollowed: []string{"app/secrets/db.env file app/secrets/db.env", "app/local/app.conf events ", "app/local/web.conf file app/local/web.conf", "app/${NOMAD_SECRETS_DIR}/cert.pem events "}, wantNot: 1, wantWatched: 0, rolls: true},
		{consent: "", wantFollowed: []string{"app/secrets/db.env file app/secrets/db.env", "app/local/app.conf events ", "app/${NOMAD_SECRETS_DIR}/cert.pem events "}, wantNot: 1, wantWatched: 1, rolls: false},
		{consent: "nomad:nomad/jobs/web", wantFollowed: nil, wantNot: 0, wantWatched: 1, rolls: true},
	}
	for _, tt := range tests {
		t.Run("consent "+tt.consent, func(t *testing.T) {
			meta := map[string]string{}
			if tt.consent != "" {
				meta[KeyOnChange] = tt.consent
			}
			g := Analyze(testJob(meta, testGroup("web", nil, templates...))).Groups[0]
			var got []string
			for _, f := range g.Followed {
				got = append(got, f.Ref()+" "+string(f.By)+" "+f.Path)
			}
			want := tt.wantFollowed
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("followed =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if len(g.NotFollowed) != tt.wantNot || len(g.Watched) != tt.wantWatched || g.Rolls() != tt.rolls {
				t.Errorf("not followed %v, watched %d, rolls %v; want %d, %d, %v", g.NotFollowed, len(g.Watched), g.Rolls(), tt.wantNot, tt.wantWatched, tt.rolls)
			}
			if len(g.NotFollowed) == 1 && !strings.Contains(g.NotFollowed[0].Reason, `change_mode = "noop"`) {
				t.Errorf("not followed reason = %q, want the fix", g.NotFollowed[0].Reason)
			}
			if g.RenderInterval != DefaultRenderInterval {
				t.Errorf("render interval %s, want the default", g.RenderInterval)
			}
		})
	}
}

func TestRenderIntervalMeta(t *testing.T) {
	g := Analyze(testJob(map[string]string{KeyOnChange: "rendered", KeyRenderInterval: "2m"}, testGroup("web", nil, tmpl("x", "noop")))).Groups[0]
	if g.RenderInterval != 2*time.Minute || len(g.Problems) != 0 {
		t.Fatalf("interval %s, problems %v; want 2m and none", g.RenderInterval, g.Problems)
	}
	g = Analyze(testJob(map[string]string{KeyOnChange: "rendered", KeyRenderInterval: "1s"}, testGroup("web", nil, tmpl("x", "noop")))).Groups[0]
	if len(g.Problems) != 1 || !strings.Contains(g.Problems[0].String(), "at least 5s") || g.Rolls() {
		t.Fatalf("problems %v, rolls %v; want one naming the minimum and no roll", g.Problems, g.Rolls())
	}
}

func TestAllocPath(t *testing.T) {
	tests := []struct {
		dest, want, err string
	}{
		{dest: "local/app.conf", want: "web/local/app.conf"},
		{dest: "secrets/db.env", want: "web/secrets/db.env"},
		{dest: "${NOMAD_SECRETS_DIR}/db.env", want: "web/secrets/db.env"},
		{dest: "${NOMAD_TASK_DIR}/conf/app.conf", want: "web/local/conf/app.conf"},
		{dest: "${NOMAD_ALLOC_DIR}/shared.conf", want: "alloc/shared.conf"},
		{dest: "../alloc/shared.conf", want: "alloc/shared.conf"},
		{dest: "/etc/app.conf", err: "outside the allocation directory"},
		{dest: "../../x", err: "outside the allocation directory"},
		{dest: "${NOMAD_META_dir}/x", err: "known only on the client"},
		{dest: "", err: "no destination"},
	}
	for _, tt := range tests {
		got, err := AllocPath("web", tt.dest)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("AllocPath(%q) = %q, %v; want an error with %q", tt.dest, got, err, tt.err)
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("AllocPath(%q) = %q, %v; want %q", tt.dest, got, err, tt.want)
		}
	}
}

// renderFixture is a group "web" following a noop file template and a signal template.
func renderFixture(meta map[string]string) Explain {
	if meta == nil {
		meta = map[string]string{KeyOnChange: "rendered"}
	}
	return Analyze(testJob(meta, testGroup("web", nil,
		TemplateSpec{Embedded: "a", DestPath: "secrets/db.env", ChangeMode: "noop"},
		TemplateSpec{Embedded: "b", DestPath: "local/app.conf", ChangeMode: "signal"},
	)))
}

func runningAlloc(id string, started time.Time, events ...restart.TaskEvent) *restart.Alloc {
	return &restart.Alloc{ID: id, Group: "web", ClientStatus: restart.ClientRunning, DesiredStatus: restart.DesiredRun,
		Tasks: map[string]restart.TaskState{"app": {State: restart.TaskRunning, StartedAt: started, Events: events}}}
}

func TestFindStaleAndDecideRendered(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ex := renderFixture(nil)
	allocs := []*restart.Alloc{
		runningAlloc("a1", t0),                  // file re-rendered after start: stale
		runningAlloc("a2", t0),                  // file rendered before start: fresh
		runningAlloc("a3", t0.Add(time.Minute)), // restarted after the render: fresh
		runningAlloc("a4", t0, restart.TaskEvent{Type: "Signaling", Message: "Template re-rendered", Time: t0.Add(40 * time.Second)}), // signal event after start
		runningAlloc("a5", t0, restart.TaskEvent{Type: "Signaling", Message: "other", Time: t0.Add(40 * time.Second)}),
	}
	stopped := runningAlloc("a6", t0)
	stopped.DesiredStatus = "stop"
	allocs = append(allocs, stopped)
	renders := Renders{
		"a1": {"app/secrets/db.env": t0.Add(30 * time.Second)},
		"a2": {"app/secrets/db.env": t0.Add(-time.Second)},
		"a3": {"app/secrets/db.env": t0.Add(30 * time.Second)},
		"a6": {"app/secrets/db.env": t0.Add(30 * time.Second)},
	}
	stale := FindStale(ex.Groups[0].Followed, renders, allocs)
	if len(stale) != 2 || stale[0].Alloc.ID != "a1" || stale[1].Alloc.ID != "a4" {
		t.Fatalf("stale = %+v, want a1 and a4", stale)
	}
	if stale[0].Templates[0].By != FollowFile || stale[1].Templates[0].By != FollowEvents || stale[0].Since() != t0.Add(30*time.Second) {
		t.Errorf("stale templates = %+v / %+v", stale[0].Templates, stale[1].Templates)
	}

	// Within the debounce of the newest render (40s + 10s): wait.
	d := DecideRendered(ex, renders, allocs, t0.Add(45*time.Second))
	if d.Rollout != nil || !d.RecheckAt.Equal(t0.Add(50*time.Second)) {
		t.Fatalf("decision = %+v, want a recheck at 50s", d)
	}
	d = DecideRendered(ex, renders, allocs, t0.Add(50*time.Second))
	r := d.Rollout
	if r == nil || strings.Join(r.Spec.OnlyAllocs, ",") != "a1,a4" || r.Stale != 2 || strings.Join(r.Groups, ",") != "web" {
		t.Fatalf("rollout = %+v, want a1 and a4 of web", r)
	}
	if len(r.Triggers) != 2 || r.Triggers[0].Source != "rendered:app/local/app.conf" || r.Triggers[0].Allocs != 1 ||
		!strings.Contains(r.Triggers[1].String(), `template "secrets/db.env" of task "app" re-rendered after its task started in 1 allocation(s)`) {
		t.Errorf("triggers = %+v", r.Triggers)
	}
	// The same facts give the same ID on any agent; a new render, a new ID.
	if again := DecideRendered(ex, renders, allocs, t0.Add(time.Hour)).Rollout; again.ID != r.ID {
		t.Errorf("ID %s then %s for the same facts", r.ID, again.ID)
	}
	renders["a1"]["app/secrets/db.env"] = t0.Add(31 * time.Second)
	if again := DecideRendered(ex, renders, allocs, t0.Add(time.Hour)).Rollout; again.ID == r.ID {
		t.Error("a newer render kept the rollout's ID")
	}
	// Restarted since: nothing to do.
	allocs[0].Tasks["app"] = restart.TaskState{State: restart.TaskRunning, StartedAt: t0.Add(2 * time.Minute)}
	allocs[3].Tasks["app"] = restart.TaskState{State: restart.TaskRunning, StartedAt: t0.Add(2 * time.Minute), Events: allocs[3].Tasks["app"].Events}
	if d := DecideRendered(ex, renders, allocs, t0.Add(time.Hour)); d.Rollout != nil || !d.RecheckAt.IsZero() {
		t.Errorf("after the restarts: %+v, want nothing", d)
	}
	// Not opted in: never.
	if d := DecideRendered(renderFixture(map[string]string{}), renders, allocs[:1], t0.Add(time.Hour)); d.Rollout != nil {
		t.Errorf("not opted in, rollout %+v", d.Rollout)
	}
}

func TestEventRenderScript(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ts := restart.TaskState{Events: []restart.TaskEvent{
		{Type: "Task hook message", Message: "Template successfully ran script /bin/reload with arguments: []. Exit code: 0", Time: t0},
		{Type: "Task hook failed", Message: "Template ran script /bin/reload with arguments [] on change but it exited with code: 1", Time: t0.Add(time.Second)},
		{Type: "Task hook message", Message: "something else", Time: t0.Add(2 * time.Second)},
	}}
	if got := EventRender(ts, "script"); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("script render at %s, want the failed run's time", got)
	}
	if got := EventRender(ts, "signal"); !got.IsZero() {
		t.Errorf("signal render at %s, want none", got)
	}
}

func TestLatestStartPrefersTheNewestStart(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	ts := restart.TaskState{StartedAt: t0, LastRestart: t0.Add(time.Second),
		Events: []restart.TaskEvent{{Type: restart.TaskEventStarted, Time: t0.Add(2 * time.Second)}}}
	if got := ts.LatestStart(); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("LatestStart = %s", got)
	}
}
