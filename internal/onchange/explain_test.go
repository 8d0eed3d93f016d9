package onchange

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// testJob is job "web" in namespace "apps", region "eu", with groups built by the caller.
func testJob(meta map[string]string, groups ...GroupSpec) JobSpec {
	return JobSpec{ID: "web", Namespace: "apps", Region: "eu", Meta: meta, Groups: groups}
}

// testGroup is a group with one task "app" holding the given templates.
func testGroup(name string, meta map[string]string, templates ...TemplateSpec) GroupSpec {
	return GroupSpec{Name: name, Meta: meta, Tasks: []TaskSpec{{Name: "app", Templates: templates}}}
}

func tmpl(text, changeMode string) TemplateSpec {
	return TemplateSpec{Embedded: text, ChangeMode: changeMode, DestPath: "local/" + changeMode + ".env"}
}

var webVar = Source{Kind: NomadVariable, Path: "nomad/jobs/web", Namespace: "apps", Region: "eu"}

func TestAnalyzeConsent(t *testing.T) {
	readsVar := tmpl(`{{ with nomadVar "nomad/jobs/web" }}{{ .x }}{{ end }}`, "noop")
	tests := []struct {
		name        string
		jobMeta     map[string]string
		groupMeta   map[string]string
		wantConsent Consent
		wantRolls   bool
	}{
		{"no meta: not opted in, what auto would watch is shown", nil, nil, ConsentNone, false},
		{"job-level auto", map[string]string{KeyOnChange: "auto"}, nil, ConsentAuto, true},
		{"group-level auto", nil, map[string]string{KeyOnChange: " auto "}, ConsentAuto, true},
		{"a group opts out of its job's consent", map[string]string{KeyOnChange: "auto"}, map[string]string{KeyOnChange: "off"}, ConsentOff, false},
		{"an empty group value opts out too", map[string]string{KeyOnChange: "auto"}, map[string]string{KeyOnChange: ""}, ConsentNone, false},
		{"a group opts in under a job's off", map[string]string{KeyOnChange: "off"}, map[string]string{KeyOnChange: "auto"}, ConsentAuto, true},
		{"an invalid option stops the rollout", map[string]string{KeyOnChange: "auto"}, map[string]string{KeyBatchSize: "0"}, ConsentAuto, false},
		{"a typo stops the rollout", map[string]string{KeyOnChange: "auto", "nomad-restart.batch_size": "2"}, nil, ConsentAuto, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Analyze(testJob(tt.jobMeta, testGroup("web", tt.groupMeta, readsVar)))
			g := e.Groups[0]
			if g.Consent != tt.wantConsent || g.Rolls() != tt.wantRolls {
				t.Fatalf("consent %q, rolls %v; want %q, %v (problems %v)", g.Consent, g.Rolls(), tt.wantConsent, tt.wantRolls, g.Problems)
			}
			if len(g.Watched) != 1 || g.Watched[0].Source != webVar {
				t.Errorf("watched = %+v, want the job's variable whatever the consent", g.Watched)
			}
			if e.OptedIn() != g.OptedIn() {
				t.Errorf("job opted in = %v, group %v", e.OptedIn(), g.OptedIn())
			}
		})
	}
}

func TestAnalyzeGroupOverridesJobOptions(t *testing.T) {
	job := testJob(
		map[string]string{KeyOnChange: "auto", KeyBatchSize: "2", KeyOnError: "ask", KeyDebounce: "30s"},
		testGroup("api", map[string]string{KeyBatchSize: "25%", KeySurge: "1"}, tmpl(`{{ key "api/config" }}`, "noop")),
		testGroup("worker", nil, tmpl(`{{ key "worker/config" }}`, "noop")),
	)
	e := Analyze(job)
	api, worker := e.Groups[0], e.Groups[1]
	if len(api.Problems)+len(worker.Problems) != 0 {
		t.Fatalf("problems: %v %v", api.Problems, worker.Problems)
	}
	wantAPI := restart.Spec{
		Groups: []string{"api"}, BatchSizes: []restart.BatchSize{{N: 25, Percent: true}}, OnError: restart.OnErrorAsk,
		Health: restart.HealthAuto, HealthyDeadline: restart.DefaultHealthyDeadline, Surge: 1,
	}
	if !reflect.DeepEqual(api.Spec, wantAPI) {
		t.Errorf("api spec = %+v, want %+v", api.Spec, wantAPI)
	}
	if worker.Spec.Surge != 0 || !reflect.DeepEqual(worker.Spec.BatchSizes, []restart.BatchSize{{N: 2}}) || !reflect.DeepEqual(worker.Spec.Groups, []string{"worker"}) {
		t.Errorf("worker spec = %+v, want the job's batch size 2, no surge", worker.Spec)
	}
	if api.Debounce != 30*time.Second || worker.Debounce != 30*time.Second {
		t.Errorf("debounce = %s, %s; want the job's 30s", api.Debounce, worker.Debounce)
	}
}

func TestAnalyzeExplicitSources(t *testing.T) {
	text := `{{ with nomadVar "nomad/jobs/web/db" }}{{ end }}{{ key "web/flags" }}{{ key "other/x" }}`
	tests := []struct {
		name        string
		onChange    string
		wantWatched []Watched
		wantNot     []string // fragments of What
		wantProblem string
	}{
		{
			name:     "explicit sources replace auto; a template's read is attached",
			onChange: "nomad:nomad/jobs/web/db, consul:web/flags@dc2",
			wantWatched: []Watched{
				{Source: Source{Kind: NomadVariable, Path: "nomad/jobs/web/db", Namespace: "apps", Region: "eu"}, Explicit: true,
					Reads: []Read{{Task: "app", Destination: "local/noop.env", Function: "nomadVar", ChangeMode: "noop"}}},
				// The template reads web/flags in the local datacenter, not dc2: not the same source.
				{Source: Source{Kind: ConsulKey, Path: "web/flags", Datacenter: "dc2"}, Explicit: true},
			},
			wantNot: []string{`Consul key "web/flags"`, `Consul key "other/x"`},
		},
		{
			name:     "an explicit prefix covers what is read under it",
			onChange: "nomad:nomad/jobs/web/,consul:web/,consul:web/",
			wantWatched: []Watched{
				{Source: Source{Kind: NomadPrefix, Path: "nomad/jobs/web/", Namespace: "apps", Region: "eu"}, Explicit: true,
					Reads: []Read{{Task: "app", Destination: "local/noop.env", Function: "nomadVar", ChangeMode: "noop"}}},
				{Source: Source{Kind: ConsulPrefix, Path: "web/"}, Explicit: true,
					Reads: []Read{{Task: "app", Destination: "local/noop.env", Function: "key", ChangeMode: "noop"}}},
			},
			wantNot: []string{`Consul key "other/x"`},
		},
		{
			name:        "an entry that does not read invalidates the list",
			onChange:    "nomad:nomad/jobs/web/db,vault:kv/web",
			wantProblem: `unknown kind "vault"`,
		},
		{
			name:        "auto does not mix with sources",
			onChange:    "auto,consul:web/flags",
			wantProblem: `"auto" does not mix with sources`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Analyze(testJob(nil, testGroup("web", map[string]string{KeyOnChange: tt.onChange}, tmpl(text, "noop"))))
			g := e.Groups[0]
			if g.Consent != ConsentExplicit {
				t.Fatalf("consent = %q, want explicit", g.Consent)
			}
			if tt.wantProblem != "" {
				if len(g.Problems) != 1 || g.Problems[0].Key != KeyOnChange || !strings.Contains(g.Problems[0].Reason, tt.wantProblem) {
					t.Fatalf("problems = %v, want one on %s: %s", g.Problems, KeyOnChange, tt.wantProblem)
				}
				if g.Rolls() || len(g.Watched) != 0 {
					t.Errorf("an invalid list rolls (%v) or watches %+v", g.Rolls(), g.Watched)
				}
				return
			}
			if !reflect.DeepEqual(g.Watched, tt.wantWatched) {
				t.Errorf("watched =\n%+v\nwant\n%+v", g.Watched, tt.wantWatched)
			}
			if len(g.NotWatched) != len(tt.wantNot) {
				t.Fatalf("not watched = %+v, want %d", g.NotWatched, len(tt.wantNot))
			}
			for i, w := range tt.wantNot {
				if !strings.Contains(g.NotWatched[i].What, w) || !strings.Contains(g.NotWatched[i].Reason, "replace what auto would watch") {
					t.Errorf("not watched %d = %+v, want %s", i, g.NotWatched[i], w)
				}
			}
		})
	}
}

func TestAnalyzeWarnsOfChangeModesThatActOnEveryAllocation(t *testing.T) {
	group := testGroup("web", map[string]string{KeyOnChange: "auto"},
		tmpl(`{{ key "a" }}{{ key "b" }}`, "restart"), // one warning for the template, not per source
		tmpl(`{{ key "a" }}`, "signal"),
		tmpl(`{{ key "a" }}`, "script"),
		tmpl(`{{ key "a" }}`, "noop"),
		tmpl(`{{ with secret "kv/x" }}{{ end }}`, "restart"), // reads nothing watched
		TemplateSpec{Embedded: `{{ key "c" }}`},              // Nomad's default: restart
	)
	g := Analyze(testJob(nil, group)).Groups[0]
	want := []string{
		`template "local/restart.env" has change_mode "restart": when a watched source it reads changes, Nomad restarts the task in every allocation at once`,
		`template "local/signal.env" has change_mode "signal"`,
		`template "local/script.env" has change_mode "script": when a watched source it reads changes, Nomad runs the change script`,
		`template #5 has change_mode "restart"`,
	}
	if len(g.Warnings) != len(want) {
		t.Fatalf("warnings =\n%s\nwant %d", strings.Join(g.Warnings, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.Contains(g.Warnings[i], w) {
			t.Errorf("warning %d = %q, want it to contain %q", i, g.Warnings[i], w)
		}
	}
}

func TestAnalyzeOptedInWithNothingToWatch(t *testing.T) {
	// A computed path cannot be watched, and change_mode restart leaves its re-renders to
	// Nomad: nothing rolls the group.
	g := Analyze(testJob(map[string]string{KeyOnChange: "auto"},
		testGroup("web", nil, tmpl(`{{ key (printf "%s" .x) }}`, "restart")))).Groups[0]
	if g.Rolls() || len(g.NotWatched) != 1 || len(g.NotFollowed) != 1 {
		t.Fatalf("rolls %v, not watched %+v, not followed %+v; want no roll and the call listed", g.Rolls(), g.NotWatched, g.NotFollowed)
	}
	if len(g.Warnings) != 1 || !strings.Contains(g.Warnings[0], "nothing rolls this group") {
		t.Errorf("warnings = %q, want one saying nothing rolls", g.Warnings)
	}
}

func TestAnalyzeReportsTaskMeta(t *testing.T) {
	group := testGroup("web", nil, tmpl(`{{ key "a" }}`, "noop"))
	group.Tasks[0].Meta = map[string]string{KeyOnChange: "auto", KeyBatchSize: "2", "owner": "x"}
	g := Analyze(testJob(map[string]string{KeyOnChange: "auto"}, group)).Groups[0]
	if g.Rolls() || len(g.Problems) != 2 {
		t.Fatalf("rolls %v, problems %v; want two problems and no roll", g.Rolls(), g.Problems)
	}
	if p := g.Problems[0]; p.Key != KeyBatchSize || p.Level != `task "app"` || !strings.Contains(p.Reason, "move it to the group's or the job's meta") {
		t.Errorf("problem = %+v", p)
	}
}

func TestAnalyzeWhereSourcesLive(t *testing.T) {
	group := GroupSpec{
		Name:   "web",
		Consul: &ConsulSpec{Namespace: "group-ns", Partition: "group-part"},
		Tasks: []TaskSpec{
			{Name: "a", Templates: []TemplateSpec{tmpl(`{{ key "k" }}{{ nomadVar "v" }}{{ nomadVar "s@shared.us" }}`, "noop")}},
			{Name: "b", Consul: &ConsulSpec{Namespace: "task-ns"}, Templates: []TemplateSpec{tmpl(`{{ key "k" }}`, "noop")}},
		},
	}
	job := JobSpec{ID: "web", Groups: []GroupSpec{group}} // default namespace, no region
	g := Analyze(job).Groups[0]
	want := []Source{
		{Kind: ConsulKey, Path: "k", Namespace: "group-ns", Partition: "group-part"},
		{Kind: NomadVariable, Path: "v", Namespace: "default"},
		{Kind: NomadVariable, Path: "s", Namespace: "shared", Region: "us"},
		// The task's consul block replaces the group's (Allocation.ConsulNamespaceForTask).
		{Kind: ConsulKey, Path: "k", Namespace: "task-ns"},
	}
	var got []Source
	for _, w := range g.Watched {
		got = append(got, w.Source)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sources =\n%+v\nwant\n%+v", got, want)
	}
}

func TestAnalyzeSharesASourceReadTwice(t *testing.T) {
	group := testGroup("web", map[string]string{KeyOnChange: "auto"},
		tmpl(`{{ with nomadVar "nomad/jobs/web" }}{{ end }}`, "noop"),
		tmpl(`{{ if nomadVarExists "nomad/jobs/web" }}{{ end }}`, "noop"))
	g := Analyze(testJob(nil, group)).Groups[0]
	if len(g.Watched) != 1 || len(g.Watched[0].Reads) != 2 {
		t.Fatalf("watched = %+v, want one source read by two templates", g.Watched)
	}
}

func TestExplainStringAndJSON(t *testing.T) {
	e := Analyze(testJob(map[string]string{KeyOnChange: "auto"},
		testGroup("api", nil, tmpl(`{{ key "a" }}`, "noop")),
		testGroup("db", map[string]string{KeySurge: "0"}, tmpl(`{{ key "a" }}`, "noop")),
		testGroup("cache", map[string]string{KeyOnChange: "off"}),
		testGroup("batch", map[string]string{KeyOnChange: ""}),
	))
	want := `job "web" (namespace apps)
group "api": rolls on change; 1 watched, 0 not watched, 0 followed by renders, 0 warnings
group "db": invalid (1 problems); 1 watched, 0 not watched, 0 followed by renders, 0 warnings
group "cache": opted out; 0 watched, 0 not watched, 0 followed by renders, 0 warnings
group "batch": not opted in; 0 watched, 0 not watched, 0 followed by renders, 0 warnings`
	if got := e.String(); got != want {
		t.Errorf("String =\n%s\nwant\n%s", got, want)
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var back Explain
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Groups[0].Watched[0].Source != e.Groups[0].Watched[0].Source || back.Groups[1].Problems[0] != e.Groups[1].Problems[0] {
		t.Errorf("JSON round trip lost data: %s", b)
	}
}
