package archtest

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// rule is one row of the table in docs/architecture.md: a package (a module-relative
// directory, or a pattern ending in "/..." for a whole subtree) and what it may import.
type rule struct {
	pkg string
	// mayImport lists the project packages (module-relative, or "x/..." for a subtree) the
	// package may import; nothing else of the project.
	mayImport []string
	// forbids lists other imports the package must not have (an exact path, or "x/..." for
	// x and everything below it), with why in forbidReason.
	forbids      []string
	forbidReason string
	// allows are exceptions to forbids: imports the package may have although a pattern
	// of forbids matches them.
	allows []string
	// forbidsExceptIn are the package's files (module-relative) that may have the imports
	// forbids names: the one place a package meets what the rest of it must not know.
	forbidsExceptIn []string
}

// noIO is what internal/restart may not import: it is the pure domain (observed facts in,
// decisions out), so that its rules are tested without a cluster, a disk or a clock's I/O.
func noIO() []string {
	return []string{"net/...", "os/...", "io/fs", "syscall", "path/filepath", "github.com/hashicorp/..."}
}

// nomadAPIs are the HashiCorp api modules the engine must not import: it reaches Nomad only
// through cluster.Cluster and Consul only through health.
func nomadAPIs() []string {
	return []string{"github.com/hashicorp/nomad/api/...", "github.com/hashicorp/consul/api/..."}
}

// adapter is the one place of the project that may import an outside system's client
// module: the rest reaches that system through the adapter's types, handed in by the
// assembly (internal/cli/nomad.go).
type adapter struct {
	module string   // an import path, or "x/..." for it and everything below it
	in     []string // module-relative files, or packages ("x/..." for a subtree)
	name   string   // the adapter, for the message
	hint   string   // what to do instead
}

// adapters are the outside systems' client modules and the only files that import them.
func adapters() []adapter {
	return []adapter{
		// Consul's health and catalog APIs: the check source, the probe and the drain. The
		// config-change sources' Consul KV watch is sourcewatch's; nomadsim simulates Consul.
		{module: "github.com/hashicorp/consul/api/...", in: []string{"internal/health/consul.go", "internal/health/consul_drain.go", "internal/sourcewatch", "nomadsim/..."},
			name: "the Consul adapter (internal/health/consul.go, consul_drain.go; sourcewatch for Consul KV)",
			hint: "reach Consul through a health.ConsulDialer built in internal/cli"},
		// Prometheus's query API (the agent's own /metrics, client_golang/prometheus, is not
		// a client of Prometheus).
		{module: "github.com/prometheus/client_golang/api/...", in: []string{"internal/gate/prometheus"},
			name: "the Prometheus adapter (internal/gate/prometheus)", hint: "reach Prometheus through a prometheus.Dialer built in internal/cli"},
		{module: "github.com/prometheus/common/model", in: []string{"internal/gate/prometheus"},
			name: "the Prometheus adapter (internal/gate/prometheus)", hint: "reach Prometheus through a prometheus.Dialer built in internal/cli"},
	}
}

// envReaders are where the process's environment (os.Getenv, os.LookupEnv, os.Environ) may
// be read: main and the CLI, which hand what they read to the parts they assemble (through
// the CLI's env function, which tests set). Test support is exempt: it is imported by tests
// only (internal/simtest re-executes a test binary as a child, told so by a variable).
// nomadsim, the simulator, and the tests' own packages are not the product.
func envReaders() []string {
	return []string{"cmd/...", "internal/cli", "internal/simtest", "internal/agent/agenttest", "internal/fuzztest",
		"internal/archtest", "nomadsim/...", "cmd/nomadsim", "e2e"}
}

// architecture is the table of docs/architecture.md ("Packages and what each may import").
// A package missing from it fails the test: add a new package here and to the doc together.
func architecture() []rule {
	return []rule{
		// What the release build stamps in (-ldflags -X) and the toolchain recorded: a leaf.
		{pkg: "internal/buildinfo"},
		// The deadlines and answer checks of every request to Nomad, Consul and Prometheus:
		// a leaf the clients' transports are wrapped in.
		{pkg: "internal/upstream"},
		{pkg: "internal/restart", mayImport: []string{"internal/gate"}, forbids: noIO(), forbidReason: "it must do no I/O"},
		{pkg: "internal/fleet", mayImport: []string{"internal/restart"}, forbids: noIO(), forbidReason: "it must do no I/O"},
		{pkg: "internal/steer", mayImport: []string{"internal/fleet", "internal/restart"}, forbids: noIO(), forbidReason: "it must do no I/O"},
		{pkg: "internal/notify", mayImport: []string{"internal/steer", "internal/fleet", "internal/restart"}, forbids: noIO(), forbidReason: "it must do no I/O"},
		{pkg: "internal/cluster", mayImport: []string{"internal/onchange", "internal/restart", "internal/upstream"}},
		{pkg: "internal/onchange", mayImport: []string{"internal/gate", "internal/fleet", "internal/restart"}, forbids: noIO(), forbidReason: "it must do no I/O"},
		{pkg: "internal/nomadvars", mayImport: []string{"internal/cluster"}},
		{pkg: "internal/sourcewatch", mayImport: []string{"internal/onchange", "internal/nomadvars", "internal/cluster"}},
		// The readiness gate reads a job's specification as onchange.JobSpec, the one type of it.
		{pkg: "internal/health", mayImport: []string{"internal/cluster", "internal/onchange", "internal/restart", "internal/upstream"}},
		// The Prometheus gates between batches: a leaf the engine will import; it reaches
		// Prometheus, never Nomad or Consul.
		// The metric gates' rules and loop, pure: the record keeps their types.
		{pkg: "internal/gate", forbids: noIO(), forbidReason: "it must do no I/O (Prometheus is asked through gate/prometheus)"},
		{pkg: "internal/gate/prometheus", mayImport: []string{"internal/gate", "internal/upstream"}, forbids: nomadAPIs(), forbidReason: "it reaches Prometheus only"},
		{pkg: "internal/balancer", mayImport: []string{"internal/restart", "internal/gate", "internal/upstream"}, forbids: nomadAPIs(), forbidReason: "it reads load balancers only"},
		// What a store is, whatever keeps its records; the stores sit on it, each in a
		// package of its own, and the one suite runs against every one.
		{pkg: "internal/store", mayImport: []string{"internal/nomadvars", "internal/steer", "internal/fleet", "internal/restart"}},
		{pkg: "internal/store/nomadstore", mayImport: []string{"internal/store", "internal/nomadvars", "internal/cluster", "internal/fleet", "internal/restart"}},
		{pkg: "internal/store/localstore", mayImport: []string{"internal/store", "internal/nomadvars", "internal/restart"}},
		{pkg: "internal/store/storetest", mayImport: []string{"internal/store", "internal/restart"}},
		{
			pkg:          "internal/notify/deliver",
			mayImport:    []string{"internal/notify", "internal/store", "internal/cluster", "internal/steer", "internal/fleet", "internal/restart"},
			forbids:      nomadAPIs(),
			forbidReason: "it reaches the records through the store only",
		},
		{pkg: "internal/schedule", mayImport: []string{"internal/nomadvars", "internal/cluster", "internal/fleet", "internal/restart"}},
		{
			pkg:          "internal/engine",
			mayImport:    []string{"internal/health", "internal/gate", "internal/cluster", "internal/onchange", "internal/store", "internal/steer", "internal/restart"},
			forbids:      nomadAPIs(),
			forbidReason: "it reaches Nomad only through cluster.Cluster and Consul only through health",
		},
		{
			pkg:          "internal/fleetrun",
			mayImport:    []string{"internal/engine", "internal/store", "internal/cluster", "internal/onchange", "internal/steer", "internal/fleet", "internal/restart"},
			forbids:      nomadAPIs(),
			forbidReason: "it reaches Nomad only through cluster.Cluster and the store",
		},
		// The agent's web page: what it shows comes through page.Source, what it does through
		// steer.Steerers and the engine's Plan and Create; it knows nothing of the agent.
		{
			pkg:          "internal/page",
			mayImport:    []string{"internal/engine", "internal/store", "internal/cluster", "internal/steer", "internal/fleet", "internal/gate", "internal/restart"},
			forbids:      nomadAPIs(),
			forbidReason: "it reaches Nomad only through what the agent gives it (page.Source, the engine, the steerers)",
		},
		// The agent is handed its parts (engine, store, discovery, job lister, schedules,
		// fleets, sources) assembled by the command: it never builds a Nomad client.
		{
			pkg:          "internal/agent",
			mayImport:    []string{"internal/page", "internal/fleetrun", "internal/fleet", "internal/engine", "internal/schedule", "internal/store", "internal/health", "internal/cluster", "internal/restart", "internal/onchange", "internal/sourcewatch"},
			forbids:      nomadAPIs(),
			forbidReason: "it is handed its parts assembled on Nomad by internal/cli/nomad.go",
		},
		// The demo's simulated cluster and its measure: the only product package that
		// imports nomadsim and its load balancer nomadsim/traffic (see nomadsimImporters);
		// Nomad's api module only for the sample job it registers there. The restarts it
		// measures are the command line's, handed in.
		{pkg: "internal/demo", mayImport: []string{"internal/cluster", "internal/restart", "nomadsim", "nomadsim/traffic"}},
		// How the command line writes (Nomad's lines, IDs and timestamps, tables, -json):
		// a leaf of the command line that knows records only as the domain's types.
		{pkg: "internal/cli/output", mayImport: []string{"internal/restart"}},
		// The watches and stale commands' reads and reports: they only read, through the
		// cluster, the sources' hub and the stores the command hands them.
		{pkg: "internal/cli/changereport", mayImport: []string{"internal/cli/output", "internal/engine", "internal/health", "internal/store", "internal/cluster", "internal/restart", "internal/onchange", "internal/sourcewatch"}, forbids: nomadAPIs(), forbidReason: "it reads Nomad through cluster.Nomad and the sources through sourcewatch"},
		// Nomad's client is made and wired in one file, nomad.go: every command reaches
		// Nomad through the parts it assembles.
		{
			pkg:             "internal/cli",
			forbids:         []string{"github.com/hashicorp/nomad/api/..."},
			forbidReason:    "Nomad's client is made and wired in internal/cli/nomad.go only; reach Nomad through the session's parts",
			forbidsExceptIn: []string{"internal/cli/nomad.go"},
			mayImport:       []string{"internal/cli/changereport", "internal/cli/output", "internal/demo", "internal/agent", "internal/page", "internal/fleetrun", "internal/steer", "internal/fleet", "internal/engine", "internal/schedule", "internal/store", "internal/store/nomadstore", "internal/store/localstore", "internal/health", "internal/cluster", "internal/restart", "internal/gate", "internal/gate/prometheus", "internal/balancer", "internal/nomadvars", "internal/notify", "internal/notify/deliver", "internal/onchange", "internal/sourcewatch", "internal/buildinfo", "internal/upstream"},
		},
		{pkg: "internal/simtest", mayImport: []string{"nomadsim", "nomadsim/traffic", "internal/restart"}},
		// What the fuzz targets share: a bounded call, the check that a refusal names its input.
		{pkg: "internal/fuzztest"},
		// A local webhook for the tests that send notifications.
		{pkg: "internal/notify/notifytest"},
		// The support of the tests that run an agent on nomadsim; it does not import the
		// agent, so that the agent's own tests may use it.
		{pkg: "internal/agent/agenttest", mayImport: []string{"internal/simtest", "nomadsim", "internal/engine", "internal/fleetrun", "internal/schedule", "internal/store", "internal/store/nomadstore", "internal/nomadvars", "internal/cluster", "internal/fleet", "internal/restart"}},
		{pkg: "internal/archtest"},
		{pkg: "cmd/nomad-restart", mayImport: []string{"internal/cli"}},
		{pkg: "cmd/nomadsim", mayImport: []string{"nomadsim"}},
		// The simulated Nomad shares no code with the product: it must not agree with our bugs.
		{pkg: "nomadsim/...", mayImport: []string{"nomadsim/..."}},
		// Its state stands under its HTTP API: the handlers read and change the state, the
		// state never reaches up into them.
		{pkg: "nomadsim/internal/sim", mayImport: []string{"nomadsim/internal/acl", "nomadsim/internal/consul", "nomadsim/internal/variables", "nomadsim/internal/simhttp", "nomadsim/internal/index"}},
		{pkg: "nomadsim/internal/httpapi", mayImport: []string{"nomadsim/internal/sim", "nomadsim/internal/acl", "nomadsim/internal/simhttp"}},
		{pkg: "e2e"},
	}
}

// nomadsimImporters are the only files and packages outside nomadsim and the test support
// whose non-test files may import nomadsim: the embedded demo and the simulator's command.
func nomadsimImporters() []string { return []string{"internal/demo", "cmd/nomadsim/..."} }

// testSupport are the packages of test support: they may import nomadsim, and no non-test
// file outside them may import them.
func testSupport() []string {
	return []string{"internal/simtest", "internal/agent/agenttest", "internal/fuzztest", "internal/notify/notifytest"}
}

// goFile is one non-test Go file of the module and the imports it declares.
type goFile struct {
	path    string // module-relative, slash-separated: internal/engine/run.go
	imports []string
	// envReads are the file's reads of the process's environment: "os.Getenv (line 12)".
	envReads []string
}

// pkg is the module-relative directory of the file.
func (f goFile) pkg() string { return path.Dir(f.path) }

// matches reports whether p is pattern, or lies under it when pattern ends in "/...".
func matches(pattern, p string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func matchesAny(patterns []string, p string) bool {
	return slices.ContainsFunc(patterns, func(pattern string) bool { return matches(pattern, p) })
}

// ruleFor is the table's row for pkg: an exact row first, else a subtree pattern.
func ruleFor(table []rule, pkg string) (rule, bool) {
	for _, r := range table {
		if r.pkg == pkg {
			return r, true
		}
	}
	for _, r := range table {
		if strings.HasSuffix(r.pkg, "/...") && matches(r.pkg, pkg) {
			return r, true
		}
	}
	return rule{}, false
}

// check returns, for every file and rule it breaks, a message that names the file, the
// import and what to do.
func check(module string, table []rule, files []goFile) []string {
	var bad []string
	for _, f := range files {
		pkg := f.pkg()
		r, known := ruleFor(table, pkg)
		if !known {
			bad = append(bad, fmt.Sprintf("%s: package %s is not in the architecture table: add it, with what it may import, to the table in internal/archtest/imports_test.go and to docs/architecture.md", f.path, pkg))
		}
		for _, imp := range f.imports {
			rel, project := projectPath(module, imp)
			if !project {
				if known && matchesAny(r.forbids, imp) && !matchesAny(r.allows, imp) && !slices.Contains(r.forbidsExceptIn, f.path) {
					bad = append(bad, fmt.Sprintf("%s imports %s: %s may not import %s (%s); see docs/architecture.md", f.path, imp, pkg, strings.Join(r.forbids, ", "), r.forbidReason))
				} else {
					bad = append(bad, checkAdapterImport(f, imp)...)
				}
				continue
			}
			bad = append(bad, checkProjectImport(f, r, known, rel)...)
		}
		if len(f.envReads) > 0 && !matchesAny(envReaders(), pkg) {
			bad = append(bad, fmt.Sprintf("%s reads the environment (%s): only main and internal/cli may; read it there, through the CLI's env, and hand the value in; see docs/architecture.md", f.path, strings.Join(f.envReads, ", ")))
		}
	}
	return bad
}

// checkAdapterImport applies the adapters' rule on an import of an outside module.
func checkAdapterImport(f goFile, imp string) []string {
	for _, a := range adapters() {
		if matches(a.module, imp) && !matchesAny(a.in, f.path) && !matchesAny(a.in, f.pkg()) {
			return []string{fmt.Sprintf("%s imports %s: only %s may import it; %s; see docs/architecture.md", f.path, imp, a.name, a.hint)}
		}
	}
	return nil
}

// checkProjectImport applies the rules on an import of the project's own package rel.
func checkProjectImport(f goFile, r rule, known bool, rel string) []string {
	var bad []string
	pkg := f.pkg()
	if known && rel != pkg && !matchesAny(r.mayImport, rel) {
		may := "no project package"
		if len(r.mayImport) > 0 {
			may = "only " + strings.Join(r.mayImport, ", ")
		}
		bad = append(bad, fmt.Sprintf("%s imports %s: %s may import %s; see docs/architecture.md", f.path, rel, pkg, may))
	}
	importers := nomadsimImporters()
	if matches("nomadsim/...", rel) && !matches("nomadsim/...", pkg) && !slices.Contains(testSupport(), pkg) &&
		!matchesAny(importers, f.path) && !matchesAny(importers, pkg) {
		bad = append(bad, fmt.Sprintf("%s imports %s: the product must not depend on the simulated Nomad; only %s may (tests use internal/simtest); see docs/architecture.md", f.path, rel, strings.Join(importers, ", ")))
	}
	if slices.Contains(testSupport(), rel) && !slices.Contains(testSupport(), pkg) {
		bad = append(bad, fmt.Sprintf("%s imports %s: it is test support, only _test.go files may import it; see docs/architecture.md", f.path, rel))
	}
	return bad
}

// projectPath returns imp relative to the module, and whether it is one of the module's.
func projectPath(module, imp string) (string, bool) {
	if imp == module {
		return ".", true
	}
	rel, ok := strings.CutPrefix(imp, module+"/")
	return rel, ok
}

// moduleGoFiles lists every Go file of the module whose root is fsys (test files too),
// slash-separated, skipping what the go command skips: testdata, vendor, names starting
// with . or _, and nested modules. It is the one walk of the module the checks share.
func moduleGoFiles(fsys fs.FS) ([]string, error) {
	var files []string
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if p != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != "." && (name == "testdata" || name == "vendor") {
				return fs.SkipDir
			}
			if _, err := fs.Stat(fsys, path.Join(p, "go.mod")); p != "." && err == nil {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") {
			files = append(files, p)
		}
		return nil
	})
	return files, err
}

// productFile is a non-test Go file of the module, parsed.
type productFile struct {
	path string
	file *ast.File
}

// parseProductFiles parses the non-test files among paths (moduleGoFiles' list) in fsys.
func parseProductFiles(fset *token.FileSet, fsys fs.FS, paths []string) ([]productFile, error) {
	var parsed []productFile
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		file, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", p, err)
		}
		parsed = append(parsed, productFile{path: p, file: file})
	}
	return parsed, nil
}

// loadFiles reads the imports (and environment reads) of every non-test Go file of the
// module whose root is fsys.
func loadFiles(fsys fs.FS) ([]goFile, error) {
	paths, err := moduleGoFiles(fsys)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	parsed, err := parseProductFiles(fset, fsys, paths)
	if err != nil {
		return nil, err
	}
	var files []goFile
	for _, pf := range parsed {
		p, file := pf.path, pf.file
		f := goFile{path: p}
		osName := ""
		for _, spec := range file.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return nil, fmt.Errorf("%s: import %s: %w", p, spec.Path.Value, err)
			}
			f.imports = append(f.imports, imp)
			if imp == "os" {
				osName = "os"
				if spec.Name != nil {
					osName = spec.Name.Name
				}
			}
		}
		f.envReads = envReads(fset, file, osName)
		files = append(files, f)
	}
	return files, nil
}

// envReads lists the file's uses of os.Getenv, os.LookupEnv and os.Environ (os imported as
// osName; "" when it is not imported), called or passed on as a value.
func envReads(fset *token.FileSet, file *ast.File, osName string) []string {
	if osName == "" || osName == "_" {
		return nil
	}
	var reads []string
	ast.Inspect(file, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == osName {
			switch sel.Sel.Name {
			case "Getenv", "LookupEnv", "Environ":
				reads = append(reads, fmt.Sprintf("%s.%s (line %d)", osName, sel.Sel.Name, fset.Position(sel.Pos()).Line))
			}
		}
		return true
	})
	return reads
}

// moduleRoot finds the directory of go.mod above the test's directory and its module path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("working directory: %v", err)
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			t.Fatalf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// architectureDoc returns the module's root and the text of its docs/architecture.md, which
// the doc tests hold true to the code.
func architectureDoc(t *testing.T) (root, doc string) {
	t.Helper()
	root, _ = moduleRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatalf("reading the architecture doc: %v", err)
	}
	return root, string(b)
}

// TestImportsFollowTheArchitecture holds the package table of docs/architecture.md true for
// every non-test file of the module.
func TestImportsFollowTheArchitecture(t *testing.T) {
	root, module := moduleRoot(t)
	files, err := loadFiles(os.DirFS(root))
	if err != nil {
		t.Fatalf("reading the module's files: %v", err)
	}
	if len(files) < 20 {
		t.Fatalf("found only %d Go files under %s: is the walk wrong?", len(files), root)
	}
	for _, msg := range check(module, architecture(), files) {
		t.Error(msg)
	}
}
