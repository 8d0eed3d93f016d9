package onchange

import (
	"strings"
	"testing"
)

// read is a short form of a found source for the tables: kind, path, and the function.
type read struct {
	kind     SourceKind
	path     string
	dc       string
	function string
}

// notRead is a short form of a NotWatched: fragments of What and Reason.
type notRead struct {
	what, reason string
}

func TestScanTemplate(t *testing.T) {
	tests := []struct {
		name        string
		tmpl        TemplateSpec
		wantWatched []read
		wantNot     []notRead
	}{
		{
			name:        "a variable in a with",
			tmpl:        TemplateSpec{Embedded: `{{ with nomadVar "nomad/jobs/web" }}PASS={{ .pass }}{{ end }}`},
			wantWatched: []read{{kind: NomadVariable, path: "nomad/jobs/web", function: "nomadVar"}},
		},
		{
			name:        "a key listing in a range",
			tmpl:        TemplateSpec{Embedded: `{{ range ls "web/config" }}{{ .Key }}={{ .Value }}{{ end }}`},
			wantWatched: []read{{kind: ConsulPrefix, path: "web/config", function: "ls"}},
		},
		{
			name: "every watchable function, nested in if, else and range",
			tmpl: TemplateSpec{Embedded: `
{{- if nomadVarExists "a/flag" }}{{ range nomadVarList "a/" }}{{ . }}{{ end }}
{{- else if keyExists "k/flag" }}{{ keyOrDefault "k/x" "5" }}{{ key "k/y@dc2" }}
{{- else }}{{ range tree "t/@dc3" }}{{ end }}{{ range safeTree "st/" }}{{ end }}{{ range safeLs "sl/" }}{{ end }}
{{- range nomadVarListSafe "b/" }}{{ end }}{{ end }}`},
			wantWatched: []read{
				{kind: NomadVariable, path: "a/flag", function: "nomadVarExists"},
				{kind: NomadPrefix, path: "a/", function: "nomadVarList"},
				{kind: ConsulKey, path: "k/flag", function: "keyExists"},
				{kind: ConsulKey, path: "k/x", function: "keyOrDefault"},
				{kind: ConsulKey, path: "k/y", dc: "dc2", function: "key"},
				{kind: ConsulPrefix, path: "t/", dc: "dc3", function: "tree"},
				{kind: ConsulPrefix, path: "st/", function: "safeTree"},
				{kind: ConsulPrefix, path: "sl/", function: "safeLs"},
				{kind: NomadPrefix, path: "b/", function: "nomadVarListSafe"},
			},
		},
		{
			name:        "nomadVarList without a prefix lists the whole namespace",
			tmpl:        TemplateSpec{Embedded: `{{ range nomadVarList }}{{ . }}{{ end }}`},
			wantWatched: []read{{kind: NomadPrefix, path: "", function: "nomadVarList"}},
		},
		{
			name: "the template's own delimiters",
			tmpl: TemplateSpec{
				Embedded:  `[[ key "app/port" ]] {{ key "not/a/call" }}`,
				LeftDelim: "[[", RightDelim: "]]",
			},
			wantWatched: []read{{kind: ConsulKey, path: "app/port", function: "key"}},
		},
		{
			name:        "empty delimiters are the defaults",
			tmpl:        TemplateSpec{Embedded: `{{ key "app/port" }}`, LeftDelim: "", RightDelim: ""},
			wantWatched: []read{{kind: ConsulKey, path: "app/port", function: "key"}},
		},
		{
			name: "piped literal, parenthesised calls, chained fields",
			tmpl: TemplateSpec{Embedded: `{{ "p/one" | key }}{{ index (nomadVar "p/two") "k" }}{{ (nomadVar "p/three").k }}`},
			wantWatched: []read{
				{kind: ConsulKey, path: "p/one", function: "key"},
				{kind: NomadVariable, path: "p/two", function: "nomadVar"},
				{kind: NomadVariable, path: "p/three", function: "nomadVar"},
			},
		},
		{
			name:        "defined templates are read too",
			tmpl:        TemplateSpec{Embedded: `{{ define "part" }}{{ key "d/k" }}{{ end }}{{ template "part" . }}`},
			wantWatched: []read{{kind: ConsulKey, path: "d/k", function: "key"}},
		},
		{
			name:        "functions of sprig and Nomad do not fail the parse; comments are not calls",
			tmpl:        TemplateSpec{Embedded: `{{/* key "c/k" */}}{{ sprig_upper "x" }}{{ env "NOMAD_ALLOC_ID" }}{{ node_attr "x" }}{{ key "k" }}`},
			wantWatched: []read{{kind: ConsulKey, path: "k", function: "key"}},
		},
		{
			name: "non-literal arguments",
			tmpl: TemplateSpec{Embedded: `{{ key (printf "%s/x" .app) }}{{ $p := "a/b" }}{{ nomadVar $p }}{{ env "K" | key }}`},
			wantNot: []notRead{
				{what: `{{ key (printf "%s/x" .app) }}`, reason: "not a literal string"},
				{what: `{{ nomadVar $p }}`, reason: "not a literal string"},
				{what: `{{ env "K" | key }}`, reason: "not a literal string"},
			},
		},
		{
			name: "Vault, catalog and files are not watched",
			tmpl: TemplateSpec{Embedded: `{{ with secret "kv/data/app" }}{{ .Data.data.pass }}{{ end }}
{{ range secrets "kv/" }}{{ end }}{{ range service "db" }}{{ .Address }}{{ end }}{{ range nomadService "api" }}{{ end }}{{ file "/etc/x" }}`},
			wantNot: []notRead{
				{what: `secret "kv/data/app"`, reason: "Vault"},
				{what: `secrets "kv/"`, reason: "Vault"},
				{what: `service "db"`, reason: "catalog"},
				{what: `nomadService "api"`, reason: "catalog"},
				{what: `file "/etc/x"`, reason: "file"},
			},
		},
		{
			name:        "a Vault secret beside a watched variable",
			tmpl:        TemplateSpec{Embedded: `{{ with secret "kv/data/app" }}{{ end }}{{ with nomadVar "nomad/jobs/web" }}{{ end }}`},
			wantWatched: []read{{kind: NomadVariable, path: "nomad/jobs/web", function: "nomadVar"}},
			wantNot:     []notRead{{what: `secret "kv/data/app"`, reason: "Vault"}},
		},
		{
			name:    "parse error",
			tmpl:    TemplateSpec{Embedded: `{{ key "a" `},
			wantNot: []notRead{{what: "the whole template", reason: "does not parse"}},
		},
		{
			name:    "parse error with the wrong delimiters",
			tmpl:    TemplateSpec{Embedded: `[[ if key "a" ]]`, LeftDelim: "[[", RightDelim: "]]"},
			wantNot: []notRead{{what: "the whole template", reason: "does not parse"}},
		},
		{
			name: "empty paths, wrong counts and refused arguments",
			tmpl: TemplateSpec{Embedded: `{{ key "" }}{{ nomadVar "a" "b" }}{{ keyOrDefault "k" }}{{ key "a?token=x" }}{{ nomadVar "a@b@c" }}`},
			wantNot: []notRead{
				{what: `key ""`, reason: "empty path reads nothing"},
				{what: `nomadVar "a" "b"`, reason: "takes one argument, not 2"},
				{what: `keyOrDefault "k"`, reason: "takes 2 arguments, not 1"},
				{what: `key "a?token=x"`, reason: "invalid query parameter key"},
				{what: `nomadVar "a@b@c"`, reason: "invalid format"},
			},
		},
		{
			name:    "a template from an artifact",
			tmpl:    TemplateSpec{SourcePath: "local/app.tpl", Embedded: ""},
			wantNot: []notRead{{what: `source "local/app.tpl"`, reason: "cannot read"}},
		},
		{
			name: "a template with no text at all reads nothing",
			tmpl: TemplateSpec{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := scanTemplate("app", 0, tt.tmpl, testDefaults)
			found, not := sc.found, sc.not
			if len(found) != len(tt.wantWatched) {
				t.Fatalf("found %d sources %+v, want %d", len(found), found, len(tt.wantWatched))
			}
			for i, w := range tt.wantWatched {
				f := found[i]
				if f.source.Kind != w.kind || f.source.Path != w.path || f.source.Datacenter != w.dc || f.read.Function != w.function {
					t.Errorf("source %d = %+v read by %s, want %+v", i, f.source, f.read.Function, w)
				}
			}
			if len(not) != len(tt.wantNot) {
				t.Fatalf("not watched = %+v, want %d", not, len(tt.wantNot))
			}
			for i, w := range tt.wantNot {
				if !strings.Contains(not[i].What, w.what) || !strings.Contains(not[i].Reason, w.reason) {
					t.Errorf("not watched %d = %q: %q, want %q: %q", i, not[i].What, not[i].Reason, w.what, w.reason)
				}
			}
		})
	}
}

func TestScanTemplateRecordsTheRead(t *testing.T) {
	tmpl := TemplateSpec{DestPath: "local/app.env", ChangeMode: "noop", Embedded: `{{ key "k" }}`}
	found := scanTemplate("app", 2, tmpl, testDefaults).found
	want := Read{Task: "app", Template: 2, Destination: "local/app.env", Function: "key", ChangeMode: "noop"}
	if len(found) != 1 || found[0].read != want {
		t.Fatalf("found = %+v, want one read %+v", found, want)
	}
	// Nomad's default change mode where the job leaves it unset.
	found = scanTemplate("app", 0, TemplateSpec{Embedded: `{{ key "k" }}`}, testDefaults).found
	if found[0].read.ChangeMode != "restart" {
		t.Errorf("change mode = %q, want restart", found[0].read.ChangeMode)
	}
}
