package onchange

import (
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// metaSeeds are keys and values of the tests' metas (joboptions_test.go, explain_test.go,
// meta_test.go) and the shapes around them.
func metaSeeds() [][2]string {
	return [][2]string{
		{KeyBatchSize, "1,25%"}, {KeyBatchWait, "30s"}, {KeyBatchWait, "ask"}, {KeyHealth, "Running"},
		{KeyHealthyDeadline, "10m"}, {KeyMinHealthyTime, "1m"}, {KeyMaxUnavailable, "25%"}, {KeyOnError, "fail"},
		{KeySurge, "1"}, {KeyDrain, "2s"}, {KeyDrainUntil, "traefik=http://t:8080\nprometheus:up == 0"}, {KeyBalancerRefresh, "traefik=5s"}, {KeyDebounce, "never"}, {KeyOnChange, "auto"}, {KeyOnChange, " auto "},
		{KeyOnChange, "off"}, {KeyOnChange, "rendered"}, {KeyOnChange, ""}, {KeyBatchSize, "0"},
		{"nomad-restart.batch_size", "2"}, {KeyRenderInterval, "1s"}, {KeyGatePrefix + "errors", "up < 1"},
		{KeyGatePrefix + "a.b", "up < 1"}, {KeyOnChange, "nomad:nomad/jobs/web/config, consul:web/config?ns=ops@dc2"},
		{KeyOnChange, "auto, nomad:x"}, {KeyOnChange, "vault:x"}, {"team", "core"}, {"nomad-restart.\n", "x"},
		{KeyOnFailure, "revert"}, {KeyOnFailure, "stop"}, {KeyOnFailure, "Revert "}, {KeyOnFailure, "rollback"},
	}
}

// FuzzJobOptions applies any two nomad-restart.* keys of a job's meta onto a run's options,
// as a fleet does for each job: with any problem the options come back unchanged, and each
// problem names a key the meta has, with its value, on one line; without, the options are
// ones the engine can run (sizes above zero, a min healthy time below the deadline).
func FuzzJobOptions(f *testing.F) {
	for _, kv := range metaSeeds() {
		f.Add(kv[0], kv[1], KeyOnChange, "auto", int64(0))
		f.Add(kv[0], kv[1], KeyHealthyDeadline, "3m", int64(2*time.Minute))
	}
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, runMinHealthy int64) {
		meta := map[string]string{k1: v1, k2: v2}
		run := restart.Spec{BatchSizes: []restart.BatchSize{{N: 3}}, OnError: restart.OnErrorAsk, Health: restart.HealthAuto,
			HealthyDeadline: restart.DefaultHealthyDeadline}
		if d := time.Duration(runMinHealthy); d >= 0 && d < run.HealthyDeadline {
			run.MinHealthyTime, run.MinHealthyTimeGiven = d, d > 0
		}
		fuzztest.Bound(t, "JobOptions", func() {
			got, problems := JobOptions(run, meta)
			if len(problems) > 0 {
				if !reflect.DeepEqual(got, run) {
					t.Errorf("JobOptions(%q) with problems %v changed the options to %+v", meta, problems, got)
				}
				checkProblems(t, meta, nil, nil, problems)
				return
			}
			checkRunnable(t, meta, got)
		})
	})
}

// checkProblems checks that each problem names a key of the job's, the group's or a task's
// meta, at that level, with the value written there, and reads on one line.
func checkProblems(t *testing.T, jobMeta, groupMeta map[string]string, tasks []TaskSpec, problems []Problem) {
	t.Helper()
	for _, p := range problems {
		var value string
		var ok bool
		switch p.Level {
		case "job":
			value, ok = jobMeta[p.Key]
		case "group":
			value, ok = groupMeta[p.Key]
		default:
			for _, task := range tasks {
				if p.Level == "task "+strconv.Quote(task.Name) {
					value, ok = task.Meta[p.Key]
				}
			}
		}
		if !ok || value != p.Value || p.Reason == "" || !strings.HasPrefix(p.Key, MetaPrefix) {
			t.Errorf("problem %+v names no key of the %s meta (job %q, group %q)", p, p.Level, jobMeta, groupMeta)
		}
		if s := p.String(); strings.ContainsAny(s, "\r\n") {
			t.Errorf("problem %+v reads on more than one line: %q", p, s)
		}
	}
}

// checkRunnable checks options a job's meta gave without a problem.
func checkRunnable(t *testing.T, meta map[string]string, s restart.Spec) {
	t.Helper()
	for _, b := range s.BatchSizes {
		if b.N <= 0 {
			t.Errorf("meta %q gave the batch size %+v", meta, b)
		}
	}
	if s.HealthyDeadline < 0 || (s.MinHealthyTimeGiven && s.MinHealthyTime >= max(s.HealthyDeadline, 0)) && s.HealthyDeadline > 0 {
		t.Errorf("meta %q gave min healthy time %s with the healthy deadline %s", meta, s.MinHealthyTime, s.HealthyDeadline)
	}
	if s.MaxUnavailable != nil && s.MaxUnavailable.N <= 0 || s.Surge < 0 || s.BatchWait < 0 || s.Drain < 0 {
		t.Errorf("meta %q gave %+v", meta, s)
	}
	if s.Gates != nil && len(s.Gates.Specs) == 0 {
		t.Errorf("meta %q gave gates without a gate", meta)
	}
}

// FuzzAnalyzeMeta reads a group whose job, group and task metas hold any nomad-restart.*
// keys, as the agent reads every job it watches: each problem names a key and value of
// the right level on one line; a group that would roll has options the engine can run,
// and sources it can watch.
func FuzzAnalyzeMeta(f *testing.F) {
	for _, kv := range metaSeeds() {
		f.Add(KeyOnChange, "auto", kv[0], kv[1], "owner", "x")
		f.Add(kv[0], kv[1], KeyOnChange, "auto", kv[0], kv[1])
	}
	f.Fuzz(func(t *testing.T, jk, jv, gk, gv, tk, tv string) {
		jobMeta, groupMeta := map[string]string{jk: jv}, map[string]string{gk: gv}
		task := TaskSpec{Name: "app", Meta: map[string]string{tk: tv},
			Templates: []TemplateSpec{{Embedded: `{{ key "app/config" }}{{ with nomadVar "nomad/jobs/web" }}{{ end }}`, DestPath: "local/app.env", ChangeMode: "noop"}}}
		job := JobSpec{ID: "web", Namespace: "prod", Region: "eu", Meta: jobMeta,
			Groups: []GroupSpec{{Name: "api", Meta: groupMeta, Tasks: []TaskSpec{task}}}}
		fuzztest.Bound(t, "Analyze", func() {
			e := Analyze(job)
			if len(e.Groups) != 1 {
				t.Errorf("Analyze gave %d groups for 1", len(e.Groups))
				return
			}
			g := e.Groups[0]
			checkProblems(t, jobMeta, groupMeta, []TaskSpec{task}, g.Problems)
			if !g.Rolls() {
				return
			}
			checkRunnable(t, groupMeta, g.Spec)
			if g.Debounce <= 0 || g.RenderInterval < MinRenderInterval {
				t.Errorf("meta %q %q rolls with debounce %s, render interval %s", jobMeta, groupMeta, g.Debounce, g.RenderInterval)
			}
			for _, w := range g.Watched {
				checkWatchable(t, "watched", w.Source)
			}
		})
	})
}

// checkWatchable checks a source the agent would watch: a kind it knows, a path with no
// argument syntax left in it, and where it lives.
func checkWatchable(t *testing.T, what string, s Source) {
	t.Helper()
	switch s.Kind {
	case NomadVariable, ConsulKey:
		if s.Path == "" {
			t.Errorf("%s %+v has no path", what, s)
		}
	case NomadPrefix, ConsulPrefix:
	default:
		t.Errorf("%s %+v has no kind", what, s)
	}
	if strings.Contains(s.Path, "@") || (!s.Kind.Nomad() && strings.Contains(s.Path, "?")) {
		t.Errorf("%s %+v kept its argument's suffix in its path", what, s)
	}
	if s.Kind.Nomad() && (s.Namespace == "" || s.Region == "" || s.Datacenter != "" || s.Partition != "") {
		t.Errorf("%s %+v: a variable is in a namespace and region only", what, s)
	}
}

// FuzzOnChangeSources reads any entry of an explicit nomad-restart.on-change list: a
// refusal names the entry (or its argument) on one line; a source has a kind its scheme
// and trailing slash say, a path, and its namespace and region or datacenter.
func FuzzOnChangeSources(f *testing.F) {
	for _, e := range []string{"nomad:nomad/jobs/web/config", " nomad:shared/tls@infra.us ", "nomad:nomad/jobs/", "consul:web/config",
		"consul:web/config?ns=ops&partition=p2@dc-2.x", "consul:web/@dc1", "consul:web?token=x", "consul:web@", "nomad:a@b@c",
		"nomad:a@b.c.d", "nomad:app@*", "nomad:app/@*", "auto", "off", "nomad:", "vault:kv/app", "nomad", ":x", "consul:/",
		"nomad:/", "consul:a?ns=x&ns=y", "consul:a?&&", "nomad: x @y", "consul:a?b@c/"} {
		f.Add(e)
	}
	f.Fuzz(func(t *testing.T, entry string) {
		fuzztest.Bound(t, "parseExplicit", func() {
			s, err := parseExplicit(entry, testDefaults)
			what := "on-change entry " + strconv.Quote(entry)
			if err != nil {
				fuzztest.OneLine(t, what, err)
				if !namesPartOf(err, entry) {
					t.Errorf("%s: the error %q quotes no part of it", what, err)
				}
				return
			}
			checkWatchable(t, what, s)
			scheme, rest, _ := strings.Cut(strings.TrimSpace(entry), ":")
			prefix := strings.HasSuffix(pathPart(strings.TrimSpace(rest)), "/")
			if s.Kind.Nomad() != (strings.TrimSpace(scheme) == "nomad") || (s.Kind == NomadPrefix || s.Kind == ConsulPrefix) != prefix {
				t.Errorf("%s read as %+v", what, s)
			}
		})
	})
}

// quotedRE finds the Go-quoted strings of an error.
var quotedRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// namesPartOf reports whether err quotes s, or a part of it that is not empty: the entry
// an error refuses, or the argument or query of it at fault.
func namesPartOf(err error, s string) bool {
	for _, q := range quotedRE.FindAllString(err.Error(), -1) {
		if part, uerr := strconv.Unquote(q); uerr == nil && strings.Contains(s, part) && (part != "" || strings.TrimSpace(s) == "") {
			return true
		}
	}
	return false
}

// FuzzTemplateSources scans any template text, with any delimiters, task and destination,
// as the agent reads a job's templates: no panic or hang; every read it watches is a source
// of the agent's kinds, every read it does not watch says why; a destination it follows
// by its file lies inside the allocation directory.
func FuzzTemplateSources(f *testing.F) {
	for _, text := range []string{
		`{{ with nomadVar "nomad/jobs/web" }}PASS={{ .pass }}{{ end }}`, `{{ range ls "web/config" }}{{ .Key }}={{ .Value }}{{ end }}`,
		"{{- if nomadVarExists \"a/flag\" }}{{ range nomadVarList \"a/\" }}{{ . }}{{ end }}\n{{- else if keyExists \"k/flag\" }}{{ keyOrDefault \"k/x\" \"5\" }}{{ key \"k/y@dc2\" }}\n{{- else }}{{ range tree \"t/@dc3\" }}{{ end }}{{ end }}",
		`{{ range nomadVarList }}{{ . }}{{ end }}`, `[[ key "app/port" ]] {{ key "not/a/call" }}`,
		`{{ "p/one" | key }}{{ index (nomadVar "p/two") "k" }}{{ (nomadVar "p/three").k }}`,
		`{{ define "part" }}{{ key "d/k" }}{{ end }}{{ template "part" . }}`,
		`{{/* key "c/k" */}}{{ sprig_upper "x" }}{{ env "NOMAD_ALLOC_ID" }}{{ node_attr "x" }}{{ key "k" }}`,
		`{{ key (printf "%s/x" .app) }}{{ $p := "a/b" }}{{ nomadVar $p }}{{ env "K" | key }}`,
		`{{ with secret "kv/data/app" }}{{ .Data.data.pass }}{{ end }}{{ range service "db" }}{{ .Address }}{{ end }}{{ file "/etc/x" }}`,
		`{{ key "a" `, `{{ key "" }}{{ nomadVar "a" "b" }}{{ keyOrDefault "k" }}{{ key "a?token=x" }}{{ nomadVar "a@b@c" }}`,
		"{{ key `raw\nkey` }}", `{{ block "b" . }}{{ ls "x/" }}{{ end }}`, `{{ range $i, $e := tree "t" }}{{ break }}{{ end }}`,
	} {
		f.Add(text, "", "", "app", "local/app.env", "noop")
		f.Add(text, "[[", "]]", "app", "${NOMAD_SECRETS_DIR}/x", "restart")
	}
	f.Add(`[[ key "app/port" ]]`, "[[", "]]", "../app", "../../x", "noop")
	f.Add(`{{ key "k" }}`, "", "", "a/b", "${NOMAD_ALLOC_DIR}/../../x", "noop")
	f.Fuzz(func(t *testing.T, text, left, right, task, dest, mode string) {
		tmpl := TemplateSpec{Embedded: text, LeftDelim: left, RightDelim: right, DestPath: dest, ChangeMode: mode}
		fuzztest.Bound(t, "the template scan", func() {
			sc := scanTemplate(task, 0, tmpl, testDefaults)
			for _, fd := range sc.found {
				checkWatchable(t, "template "+strconv.Quote(text)+" reads", fd.source)
				if fd.read.Task != task || fd.read.Function == "" || fd.read.ChangeMode == "" {
					t.Errorf("template %q: read %+v", text, fd.read)
				}
			}
			for _, n := range sc.not {
				if n.What == "" || n.Reason == "" || n.Task != task {
					t.Errorf("template %q: not watched %+v says not what or why", text, n)
				}
			}
			group := GroupSpec{Name: "g", Tasks: []TaskSpec{{Name: task, Templates: []TemplateSpec{tmpl}}}}
			followed, _ := followTemplates(group, ConsentRendered, map[string]bool{})
			for _, fl := range followed {
				if fl.By == FollowFile {
					checkAllocPath(t, task, dest, fl.Path)
				}
			}
			if p, err := AllocPath(task, dest); err == nil {
				checkAllocPath(t, task, dest, p)
			} else {
				fuzztest.OneLine(t, "destination "+strconv.Quote(dest), err)
			}
		})
	})
}

// checkAllocPath checks a followed file's path: clean, relative, inside the allocation
// directory, and not a task's directory itself.
func checkAllocPath(t *testing.T, task, dest, p string) {
	t.Helper()
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == "." || p == ".." || strings.HasPrefix(p, "../") || p == path.Clean(task) {
		t.Errorf("task %q destination %q is read at %q, outside the allocation directory", task, dest, p)
	}
}
