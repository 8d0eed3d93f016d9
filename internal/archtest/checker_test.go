package archtest

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

const testModule = "example.com/m"

// TestCheckFindsEachBrokenRule runs the checker on small made-up modules: each case names
// the messages it must produce (by a fragment each), and none other.
func TestCheckFindsEachBrokenRule(t *testing.T) {
	project := func(p string) string { return testModule + "/" + p }
	tests := []struct {
		name    string
		files   []goFile
		wantBad []string // a fragment of each expected message, in order
	}{
		{
			name: "allowed imports pass",
			files: []goFile{
				{path: "internal/engine/run.go", imports: []string{"context", project("internal/store"), project("internal/restart")}},
				{path: "internal/restart/spec.go", imports: []string{"time", "fmt"}},
				{path: "internal/demo/demo.go", imports: []string{project("nomadsim"), project("nomadsim/traffic")}},
				{path: "internal/cli/nomad.go", imports: []string{"github.com/hashicorp/nomad/api", project("internal/agent")}},
				{path: "cmd/nomadsim/main.go", imports: []string{"os", project("nomadsim")}},
				{path: "internal/simtest/simtest.go", imports: []string{project("nomadsim"), "github.com/hashicorp/nomad/api"}},
				{path: "internal/simtest/balancer.go", imports: []string{project("nomadsim/traffic")}},
				{path: "nomadsim/internal/acl/acl.go", imports: []string{project("nomadsim/internal/index")}},
			},
		},
		{
			name:    "restart doing I/O",
			files:   []goFile{{path: "internal/restart/load.go", imports: []string{"os"}}},
			wantBad: []string{"internal/restart/load.go imports os: internal/restart may not import"},
		},
		{
			name:    "restart reaching a network",
			files:   []goFile{{path: "internal/restart/x.go", imports: []string{"net/http", "github.com/hashicorp/nomad/api"}}},
			wantBad: []string{"imports net/http", "imports github.com/hashicorp/nomad/api"},
		},
		{
			name: "onchange reading templates and the domain",
			files: []goFile{{path: "internal/onchange/explain.go", imports: []string{
				"text/template/parse", project("internal/restart"),
			}}},
		},
		{
			name:    "onchange reading Nomad's api types",
			files:   []goFile{{path: "internal/onchange/explain.go", imports: []string{"github.com/hashicorp/nomad/api"}}},
			wantBad: []string{"internal/onchange/explain.go imports github.com/hashicorp/nomad/api: internal/onchange may not import"},
		},
		{
			name: "onchange doing I/O or reading Consul",
			files: []goFile{{path: "internal/onchange/watch.go", imports: []string{
				"net/http", "os", "github.com/hashicorp/consul/api", "github.com/hashicorp/nomad/api/contexts", project("internal/cluster"),
			}}},
			wantBad: []string{
				"internal/onchange/watch.go imports net/http: internal/onchange may not import",
				"imports os: internal/onchange may not import",
				"imports github.com/hashicorp/consul/api: internal/onchange may not import",
				"imports github.com/hashicorp/nomad/api/contexts: internal/onchange may not import",
				"imports internal/cluster: internal/onchange may import only internal/gate, internal/fleet, internal/restart",
			},
		},
		{
			name:    "restart importing a project package",
			files:   []goFile{{path: "internal/restart/x.go", imports: []string{project("internal/cluster")}}},
			wantBad: []string{"internal/restart/x.go imports internal/cluster: internal/restart may import only internal/gate"},
		},
		{
			name:    "an arrow pointing up",
			files:   []goFile{{path: "internal/engine/foo.go", imports: []string{project("internal/cli")}}},
			wantBad: []string{"internal/engine/foo.go imports internal/cli: internal/engine may import only internal/health, internal/gate, internal/cluster, internal/onchange, internal/store, internal/steer, internal/restart; see docs/architecture.md"},
		},
		{
			name:    "the engine importing Nomad's api",
			files:   []goFile{{path: "internal/engine/target.go", imports: []string{"github.com/hashicorp/nomad/api"}}},
			wantBad: []string{"internal/engine/target.go imports github.com/hashicorp/nomad/api"},
		},
		{
			name: "a command other than nomad.go making a Nomad client",
			files: []goFile{
				{path: "internal/cli/status.go", imports: []string{"github.com/hashicorp/nomad/api"}},
				{path: "internal/cli/watches.go", imports: []string{"github.com/hashicorp/consul/api"}},
			},
			wantBad: []string{
				"internal/cli/status.go imports github.com/hashicorp/nomad/api: internal/cli may not import github.com/hashicorp/nomad/api/... (Nomad's client is made and wired in internal/cli/nomad.go only",
				"internal/cli/watches.go imports github.com/hashicorp/consul/api: only the Consul adapter",
			},
		},
		{
			name: "the outside systems' clients in their adapters only",
			files: []goFile{
				{path: "internal/health/consul.go", imports: []string{"github.com/hashicorp/consul/api"}},
				{path: "internal/health/consul_drain.go", imports: []string{"github.com/hashicorp/consul/api"}},
				{path: "internal/gate/prometheus/prometheus.go", imports: []string{"github.com/prometheus/client_golang/api/prometheus/v1", "github.com/prometheus/common/model"}},
				{path: "internal/agent/metrics.go", imports: []string{"github.com/prometheus/client_golang/prometheus"}},
			},
		},
		{
			name: "a Consul or Prometheus client outside its adapter",
			files: []goFile{
				{path: "internal/health/gate.go", imports: []string{"github.com/hashicorp/consul/api"}},
				{path: "internal/cli/nomad.go", imports: []string{"github.com/hashicorp/consul/api"}},
				{path: "internal/gate/run.go", imports: []string{"github.com/prometheus/common/model"}},
				{path: "internal/cli/run.go", imports: []string{"github.com/prometheus/client_golang/api"}},
			},
			wantBad: []string{
				"internal/health/gate.go imports github.com/hashicorp/consul/api: only the Consul adapter",
				"internal/cli/nomad.go imports github.com/hashicorp/consul/api: only the Consul adapter",
				"internal/gate/run.go imports github.com/prometheus/common/model: only the Prometheus adapter",
				"internal/cli/run.go imports github.com/prometheus/client_golang/api: only the Prometheus adapter",
			},
		},
		{
			name: "the environment read below the CLI",
			files: []goFile{
				{path: "internal/cli/flags.go", envReads: []string{"os.Getenv (line 3)"}},
				{path: "cmd/nomad-restart/main.go", envReads: []string{"os.Getenv (line 3)"}},
				{path: "internal/simtest/child.go", envReads: []string{"os.Getenv (line 3)"}},
				{path: "internal/engine/health.go", envReads: []string{"os.LookupEnv (line 9)"}},
				{path: "internal/health/consul.go", envReads: []string{"os.Environ (line 7)"}},
			},
			wantBad: []string{
				"internal/engine/health.go reads the environment (os.LookupEnv (line 9)): only main and internal/cli may",
				"internal/health/consul.go reads the environment (os.Environ (line 7)): only main and internal/cli may",
			},
		},
		{
			name: "the agent or its page reaching Nomad or Consul themselves",
			files: []goFile{
				{path: "internal/agent/agent.go", imports: []string{"github.com/hashicorp/nomad/api"}},
				{path: "internal/page/page.go", imports: []string{"github.com/hashicorp/consul/api"}},
			},
			wantBad: []string{
				"internal/agent/agent.go imports github.com/hashicorp/nomad/api: internal/agent may not import",
				"internal/page/page.go imports github.com/hashicorp/consul/api: internal/page may not import",
			},
		},
		{
			name:    "a product file other than the demo importing nomadsim",
			files:   []goFile{{path: "internal/cli/run.go", imports: []string{project("nomadsim")}}},
			wantBad: []string{"internal/cli/run.go imports nomadsim: internal/cli may import only", "internal/cli/run.go imports nomadsim: the product must not depend on the simulated Nomad"},
		},
		{
			name:    "a product file other than the demo importing the simulator's load balancer",
			files:   []goFile{{path: "internal/cli/run.go", imports: []string{project("nomadsim/traffic")}}},
			wantBad: []string{"internal/cli/run.go imports nomadsim/traffic: internal/cli may import only", "internal/cli/run.go imports nomadsim/traffic: the product must not depend on the simulated Nomad"},
		},
		{
			name:  "the engine importing nomadsim breaks the table and the nomadsim rule",
			files: []goFile{{path: "internal/engine/sim.go", imports: []string{project("nomadsim")}}},
			wantBad: []string{
				"internal/engine/sim.go imports nomadsim: internal/engine may import only",
				"internal/engine/sim.go imports nomadsim: the product must not depend",
			},
		},
		{
			name:    "nomadsim importing the product",
			files:   []goFile{{path: "nomadsim/place.go", imports: []string{project("internal/restart")}}},
			wantBad: []string{"nomadsim/place.go imports internal/restart: nomadsim may import only nomadsim/..."},
		},
		{
			name:  "a non-test file importing simtest",
			files: []goFile{{path: "internal/agent/helpers.go", imports: []string{project("internal/simtest")}}},
			wantBad: []string{
				"internal/agent/helpers.go imports internal/simtest: internal/agent may import only",
				"internal/agent/helpers.go imports internal/simtest: it is test support",
			},
		},
		{
			name:    "a package missing from the table",
			files:   []goFile{{path: "internal/newthing/a.go", imports: []string{"fmt"}}},
			wantBad: []string{"internal/newthing/a.go: package internal/newthing is not in the architecture table"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := check(testModule, architecture(), tt.files)
			if len(got) != len(tt.wantBad) {
				t.Fatalf("got %d messages, want %d:\n%s", len(got), len(tt.wantBad), strings.Join(got, "\n"))
			}
			for i, want := range tt.wantBad {
				if !strings.Contains(got[i], want) {
					t.Errorf("message %d = %q, want it to contain %q", i, got[i], want)
				}
			}
		})
	}
}

// TestLoadFilesReadsNonTestImports checks the walk: test files, testdata, hidden directories
// and nested modules are skipped; every other Go file's imports are read.
func TestLoadFilesReadsNonTestImports(t *testing.T) {
	fsys := fstest.MapFS{
		"go.mod":                        {Data: []byte("module example.com/m\n")},
		"internal/engine/run.go":        {Data: []byte("package engine\n\nimport (\n\t\"fmt\"\n\tx \"example.com/m/internal/store\"\n\tsys \"os\"\n)\n\nvar v = sys.Getenv(\"X\")\n")},
		"internal/engine/run_test.go":   {Data: []byte("package engine\n\nimport \"example.com/m/nomadsim\"\n")},
		"internal/engine/testdata/a.go": {Data: []byte("package a\n\nimport \"os\"\n")},
		".hidden/b.go":                  {Data: []byte("package b\n\nimport \"os\"\n")},
		"tools/go.mod":                  {Data: []byte("module example.com/tools\n")},
		"tools/c.go":                    {Data: []byte("package c\n\nimport \"os\"\n")},
	}
	files, err := loadFiles(fsys)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].path != "internal/engine/run.go" {
		t.Fatalf("files = %+v, want internal/engine/run.go only", files)
	}
	if want := []string{"fmt", "example.com/m/internal/store", "os"}; !slices.Equal(files[0].imports, want) {
		t.Fatalf("imports = %v, want %v", files[0].imports, want)
	}
	if want := []string{"sys.Getenv (line 9)"}; !slices.Equal(files[0].envReads, want) {
		t.Fatalf("envReads = %v, want %v", files[0].envReads, want)
	}
}

func TestModuleRootFindsThisModule(t *testing.T) {
	_, module := moduleRoot(t)
	if module != "github.com/nomad-restart/nomad-restart" {
		t.Fatalf("module = %q", module)
	}
}
