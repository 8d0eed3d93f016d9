package onchange

import (
	"strings"
	"testing"
)

var testDefaults = defaults{nomadNamespace: "apps", nomadRegion: "eu", consulNamespace: "team", consulPartition: "part"}

// argCase is an argument of a source's kind, and what it parses into: want, or an error
// containing wantErr.
type argCase struct {
	name    string
	kind    SourceKind
	arg     string
	want    Source
	wantErr string
}

// checkArgs runs each case through parse with testDefaults, as a subtest.
func checkArgs(t *testing.T, parse func(SourceKind, string, defaults) (Source, error), tests []argCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parse(tt.kind, tt.arg, testDefaults)
			checkSource(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func TestParseNomadArg(t *testing.T) {
	checkArgs(t, parseNomadArg, []argCase{
		{"path in the job's namespace and region", NomadVariable, "nomad/jobs/web",
			Source{Kind: NomadVariable, Path: "nomad/jobs/web", Namespace: "apps", Region: "eu"}, ""},
		{"slashes and space trimmed", NomadVariable, " /nomad/jobs/web/ ",
			Source{Kind: NomadVariable, Path: "nomad/jobs/web", Namespace: "apps", Region: "eu"}, ""},
		{"namespace", NomadVariable, "shared/tls@infra",
			Source{Kind: NomadVariable, Path: "shared/tls", Namespace: "infra", Region: "eu"}, ""},
		{"namespace and region", NomadVariable, "shared/tls@infra.us-east",
			Source{Kind: NomadVariable, Path: "shared/tls", Namespace: "infra", Region: "us-east"}, ""},
		{"two @", NomadVariable, "a@b@c", Source{}, "nomad.var.get: invalid format"},
		{"dotted namespace", NomadVariable, "a@b.c.d", Source{}, "nomad.var.get: invalid format"},
		{"list prefix", NomadPrefix, "nomad/jobs/",
			Source{Kind: NomadPrefix, Path: "nomad/jobs/", Namespace: "apps", Region: "eu"}, ""},
		{"list of everything", NomadPrefix, "",
			Source{Kind: NomadPrefix, Path: "", Namespace: "apps", Region: "eu"}, ""},
		{"list of slashes is everything", NomadPrefix, "//",
			Source{Kind: NomadPrefix, Path: "", Namespace: "apps", Region: "eu"}, ""},
		{"list in every namespace", NomadPrefix, "app@*",
			Source{Kind: NomadPrefix, Path: "app", Namespace: "*", Region: "eu"}, ""},
		{"wildcard namespace is for lists only", NomadVariable, "app@*", Source{}, "invalid format"},
	})
}

func TestParseConsulArg(t *testing.T) {
	checkArgs(t, parseConsulArg, []argCase{
		{"key in the task's Consul namespace", ConsulKey, "web/config",
			Source{Kind: ConsulKey, Path: "web/config", Namespace: "team", Partition: "part"}, ""},
		{"leading slash dropped", ConsulKey, "/web/config",
			Source{Kind: ConsulKey, Path: "web/config", Namespace: "team", Partition: "part"}, ""},
		{"datacenter", ConsulKey, "web/config@dc2",
			Source{Kind: ConsulKey, Path: "web/config", Namespace: "team", Partition: "part", Datacenter: "dc2"}, ""},
		{"query and datacenter", ConsulKey, "web/config?ns=ops&partition=p2@dc-2.x",
			Source{Kind: ConsulKey, Path: "web/config", Namespace: "ops", Partition: "p2", Datacenter: "dc-2.x"}, ""},
		{"prefix", ConsulPrefix, "web/@dc1",
			Source{Kind: ConsulPrefix, Path: "web/", Namespace: "team", Partition: "part", Datacenter: "dc1"}, ""},
		{"unknown query key", ConsulKey, "web?token=x", Source{}, `kv.get: invalid query parameter key "token"`},
		{"empty datacenter", ConsulPrefix, "web@", Source{}, "kv.list: invalid format"},
	})
}

func TestParseExplicit(t *testing.T) {
	tests := []struct {
		entry   string
		want    Source
		wantErr string
	}{
		{"nomad:nomad/jobs/web/config",
			Source{Kind: NomadVariable, Path: "nomad/jobs/web/config", Namespace: "apps", Region: "eu"}, ""},
		{" nomad:shared/tls@infra.us ",
			Source{Kind: NomadVariable, Path: "shared/tls", Namespace: "infra", Region: "us"}, ""},
		{"nomad:nomad/jobs/web/",
			Source{Kind: NomadPrefix, Path: "nomad/jobs/web/", Namespace: "apps", Region: "eu"}, ""},
		{"consul:web/config",
			Source{Kind: ConsulKey, Path: "web/config", Namespace: "team", Partition: "part"}, ""},
		{"consul:web/config@dc2",
			Source{Kind: ConsulKey, Path: "web/config", Namespace: "team", Partition: "part", Datacenter: "dc2"}, ""},
		{"consul:web/?ns=ops@dc2",
			Source{Kind: ConsulPrefix, Path: "web/", Namespace: "ops", Partition: "part", Datacenter: "dc2"}, ""},
		{"vault:kv/app", Source{}, `unknown kind "vault"`},
		{"web/config", Source{}, "names no source"},
		{"nomad:", Source{}, "names no source"},
		{"consul:a@b@c", Source{}, "kv.get: invalid format"},
	}
	for _, tt := range tests {
		t.Run(tt.entry, func(t *testing.T) {
			got, err := parseExplicit(tt.entry, testDefaults)
			checkSource(t, got, err, tt.want, tt.wantErr)
		})
	}
}

func checkSource(t *testing.T, got Source, err error, want Source, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("got %+v, %v; want an error containing %q", got, err, wantErr)
		}
		return
	}
	if err != nil || got != want {
		t.Fatalf("got %+v, %v; want %+v", got, err, want)
	}
}

func TestSourceString(t *testing.T) {
	tests := []struct {
		src  Source
		want string
	}{
		{Source{Kind: NomadVariable, Path: "nomad/jobs/web", Namespace: "default", Region: "global"},
			`Nomad variable "nomad/jobs/web" (namespace default, region global)`},
		{Source{Kind: NomadPrefix, Path: "nomad/jobs/"}, `Nomad variables under "nomad/jobs/"`},
		{Source{Kind: ConsulKey, Path: "web/config", Datacenter: "dc2"}, `Consul key "web/config" (datacenter dc2)`},
		{Source{Kind: ConsulPrefix, Path: "web/", Namespace: "ops", Partition: "p"}, `Consul keys under "web/" (namespace ops, partition p)`},
	}
	for _, tt := range tests {
		if got := tt.src.String(); got != tt.want {
			t.Errorf("String = %q, want %q", got, tt.want)
		}
	}
}
