package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/notify/notifytest"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaDir holds the JSON Schemas of the -json outputs (docs/json.md), relative to this
// package.
const schemaDir = "../../docs/schemas"

// jsonOutput is what one command printed with -json, and the schema (a file of schemaDir)
// each of its JSON documents follows.
type jsonOutput struct {
	args   []string
	schema string
	// lines says the command prints one JSON document a line (run, resume, attach);
	// otherwise it prints one indented document.
	lines bool
	out   string
}

// TestJSONOutputsFollowTheirSchemas runs every command that has a -json output end to end
// against nomadsim, in the situations that give each output its variants (a restart
// planned, driven with a surge, detached, resumed, followed; a config-change rollout's
// record; a fleet planned and driven; schedules of a job and of a fleet; jobs opted in to
// config-change rollouts, with and without problems; the demo; the version), and
// validates every JSON document they print against its schema in docs/schemas. The
// schemas refuse fields they do not describe, so a field added to these outputs without
// its documentation fails here too.
func TestJSONOutputsFollowTheirSchemas(t *testing.T) {
	schemas := compileSchemas(t)
	outputs := collectJSONOutputs(t)

	seen := map[string]bool{}
	for _, o := range outputs {
		sch, ok := schemas[o.schema]
		if !ok {
			t.Fatalf("%s: no schema %s in %s", strings.Join(o.args, " "), o.schema, schemaDir)
		}
		seen[o.schema] = true
		docs := jsonDocuments(t, o)
		if len(docs) == 0 {
			t.Errorf("%s printed no JSON", strings.Join(o.args, " "))
		}
		for i, doc := range docs {
			if err := sch.Validate(doc); err != nil {
				t.Errorf("nomad-restart %s: document %d does not follow %s:\n%v\n%s",
					strings.Join(o.args, " "), i+1, o.schema, err, excerpt(o.out))
			}
		}
	}
	for name := range schemas {
		if !seen[name] && name != commonSchema {
			t.Errorf("%s/%s validated no output: test it here or remove it", schemaDir, name)
		}
	}
}

// commonSchema holds the definitions the outputs' schemas share.
const commonSchema = "common.schema.json"

// compileSchemas compiles every schema of schemaDir, checking formats (date-time, uuid)
// too, keyed by file name.
func compileSchemas(t *testing.T) map[string]*jsonschema.Schema {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(schemaDir, "*.schema.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas in %s: %v", schemaDir, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	out := map[string]*jsonschema.Schema{}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatalf("schema %s: %v", f, err)
		}
		sch, err := c.Compile(abs)
		if err != nil {
			t.Fatalf("compiling %s: %v", f, err)
		}
		out[filepath.Base(f)] = sch
	}
	return out
}

// jsonDocuments decodes what o printed: each line, or the one document.
func jsonDocuments(t *testing.T, o jsonOutput) []any {
	t.Helper()
	var docs []any
	decode := func(text string) {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			t.Fatalf("nomad-restart %s printed what is not JSON (%v):\n%s", strings.Join(o.args, " "), err, excerpt(text))
		}
		docs = append(docs, doc)
	}
	if !o.lines {
		decode(o.out)
		return docs
	}
	sc := bufio.NewScanner(strings.NewReader(o.out))
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			decode(line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading the output of %s: %v", strings.Join(o.args, " "), err)
	}
	return docs
}

// excerpt keeps a failure message readable.
func excerpt(s string) string {
	const max = 4000
	if len(s) > max {
		return s[:max] + "\n..."
	}
	return s
}

// collectJSONOutputs runs the commands on a simulated cluster and returns their outputs.
// The cluster is the watches tests' (newWatchesFixture: jobs opted in to config-change
// rollouts, variables and Consul keys written, a finished rollout with its triggers and an
// operator's restart left pending), with a job that has not opted in, one whose meta is
// invalid, and two jobs for a fleet.
func collectJSONOutputs(t *testing.T) []jsonOutput {
	t.Helper()
	f := newWatchesFixture(t)
	jobs := watchesJobs()
	register(t, f.c, jobs[1]) // web-plain
	register(t, f.c, jobs[2]) // web-bad
	registerFleetJobs(t, f.c, "", "fleet", 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	var outputs []jsonOutput
	run := func(schema string, lines bool, args ...string) string {
		t.Helper()
		code, out, errOut := f.e.run(ctx, args...)
		if code != 0 {
			t.Fatalf("nomad-restart %s: exit %d\n%s\n%s", strings.Join(args, " "), code, out, errOut)
		}
		outputs = append(outputs, jsonOutput{args: args, schema: schema, lines: lines, out: out})
		return out
	}

	// The records as they are: a rollout with its triggers, a restart pending.
	run("status.schema.json", false, "status", "-json")
	run("status.schema.json", false, "status", "-json", f.rollout.ID)
	// The pending restart driven here.
	run("run.schema.json", true, "resume", "-json", f.operator.ID)

	// A restart planned, then driven with a surge and notified to a webhook, then
	// followed and read back.
	hook := notifytest.NewReceiver(t, notifytest.Answer{})
	run("run.schema.json", true, "run", "-json", "-dry-run", "-batch-size", "1", "web-loud")
	out := run("run.schema.json", true, "run", "-json", "-on-error", "fail", "-batch-size", "1", "-surge", "1", "-notify", "hook="+hook.SecretURL(), "web-loud")
	outputs = append(outputs, jsonOutput{args: []string{"(the webhook's bodies)"}, schema: "notification.schema.json", lines: true, out: hook.Raw()})
	run("notification.schema.json", false, "notify", "test", "-json", "-notify", "hook="+hook.SecretURL(), "hook")
	driven := lastRecordID(t, out)
	run("run.schema.json", true, "attach", "-json", driven)
	run("status.schema.json", false, "status", "-json", driven)

	// A restart detached: recorded, waiting for a driver.
	run("run.schema.json", true, "run", "-json", "-detach", "web-plain")

	// A fleet planned, then driven to its end and read back.
	run("run.schema.json", true, "run", "-json", "-dry-run", "-jobs", `Name matches "^fleet-"`)
	out = run("run.schema.json", true, "run", "-json", "-jobs", `Name matches "^fleet-"`, "-on-error", "fail")
	fleetID := lastRecordID(t, out)
	run("status.schema.json", false, "status", "-json", fleetID)
	// The same jobs in two waves, with an upstream outside the fleet (web-plain): planned,
	// then driven and read back.
	waves := []string{"-jobs", `Name matches "^fleet-"`, "-after", "fleet-1: fleet-0, web-plain", "-wave-wait", "100ms"}
	run("run.schema.json", true, append([]string{"run", "-json", "-dry-run"}, waves...)...)
	out = run("run.schema.json", true, append([]string{"run", "-json", "-on-error", "fail"}, waves...)...)
	run("status.schema.json", false, "status", "-json", lastRecordID(t, out))
	run("status.schema.json", false, "status", "-json")

	// Schedules of a job (-at and -every) and of a fleet, then the list.
	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
	run("schedules.schema.json", false, "run", "-json", "-at", at, "web-bad")
	run("schedules.schema.json", false, "run", "-json", "-every", "30 2 * * *", "-time-zone", "Europe/Paris", "-on-error", "fail", "web")
	run("schedules.schema.json", false, "run", "-json", "-jobs", `Name matches "^fleet-"`, "-every", "@daily")
	run("schedules.schema.json", false, "schedules", "-json")

	// Config-change rollouts: the list, and each kind of job explained.
	run("watches.schema.json", false, "watches", "-json")
	for _, job := range []string{"web", "web-plain", "web-bad", "web-loud", "web-kv", "web-list"} {
		run("watches.schema.json", false, "watches", "-json", "-explain", job)
	}

	// Allocations running stale renders: none, then one of web re-rendered (a file), and
	// a job with every kind of template (followed by file, by events, not followed).
	register(t, f.c, renderedJob())
	run("stale.schema.json", false, "stale", "-json")
	rerender(t, f.c, allocsOf(t, f.c, "web-rendered")[0].ID)
	run("stale.schema.json", false, "stale", "-json")
	run("stale.schema.json", false, "stale", "-json", "web-rendered", "web")
	run("watches.schema.json", false, "watches", "-json", "-explain", "web-rendered")
	// The rollout of the stale allocation: a spec with OnlyAllocs.
	out = run("run.schema.json", true, "run", "-json", "-stale-only", "-on-error", "fail", "web-rendered")
	run("status.schema.json", false, "status", "-json", lastRecordID(t, out))

	run("demo.schema.json", false, "demo", "-json", "-time-scale", "10")
	run("version.schema.json", false, "version", "-json")
	return outputs
}

// lastRecordID is the ID of the record a run's last line printed (a restart or a fleet).
func lastRecordID(t *testing.T, out string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var rec struct{ ID string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil || rec.ID == "" {
		t.Fatalf("the last line is not a record with an ID (%v):\n%s", err, excerpt(out))
	}
	return rec.ID
}

// schemaEnums ties each enumeration of common.schema.json to the Go types whose constants
// it lists: a constant added in Go must be documented, and a value documented must exist.
var schemaEnums = map[string][]goConstType{
	"status":           {{"internal/restart", "Status"}},
	"allocState":       {{"internal/restart", "AllocState"}},
	"intent":           {{"internal/restart", "Intent"}},
	"eventType":        {{"internal/restart", "EventType"}, {"internal/fleet", "EventType"}},
	"questionKind":     {{"internal/restart", "QuestionKind"}, {"internal/fleet", "QuestionKind"}},
	"surgePhase":       {{"internal/restart", "SurgePhase"}},
	"onError":          {{"internal/restart", "OnError"}},
	"healthMode":       {{"internal/restart", "HealthMode"}},
	"jobStatus":        {{"internal/fleet", "JobStatus"}},
	"fleetOrder":       {{"internal/fleet", "OrderBy"}},
	"fleetBusy":        {{"internal/fleet", "Busy"}},
	"scheduleStatus":   {{"internal/schedule", "Status"}},
	"occurrenceResult": {{"internal/schedule", "Result"}},
	"consent":          {{"internal/onchange", "Consent"}},
	"sourceKind":       {{"internal/onchange", "SourceKind"}},
	"followBy":         {{"internal/onchange", "FollowBy"}},
}

// goConstType is a string type of a package of the module (module-relative directory),
// named as its constants' declarations name it (restart.EventType declared in fleet is
// "EventType" there too).
type goConstType struct{ dir, name string }

// TestSchemaEnumsListTheGoConstants holds every enumeration of the schemas equal to the
// string constants the Go code declares for it.
func TestSchemaEnumsListTheGoConstants(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(schemaDir, commonSchema))
	if err != nil {
		t.Fatalf("reading %s: %v", commonSchema, err)
	}
	var common struct {
		Defs map[string]struct {
			Enum []string `json:"enum"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &common); err != nil {
		t.Fatalf("%s: %v", commonSchema, err)
	}
	for def, types := range schemaEnums {
		documented := common.Defs[def].Enum
		if len(documented) == 0 {
			t.Errorf("%s has no enumeration $defs/%s", commonSchema, def)
			continue
		}
		var declared []string
		for _, typ := range types {
			declared = append(declared, stringConstants(t, filepath.Join("../..", typ.dir), typ.name)...)
		}
		if len(declared) == 0 {
			t.Errorf("no constants of %v: did the type move?", types)
			continue
		}
		slices.Sort(declared)
		slices.Sort(documented)
		if !slices.Equal(declared, slices.Compact(documented)) {
			t.Errorf("$defs/%s lists %q; the Go constants of %v are %q: document the new values in %s and docs/json.md", def, documented, types, declared, commonSchema)
		}
	}
}

// stringConstants returns the values of the string constants declared with type typeName
// (or pkg.typeName) in the non-test files of dir.
func stringConstants(t *testing.T, dir, typeName string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatalf("parsing %s: %v", file, err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				if !namesType(vs.Type, typeName) {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatalf("%s: %v", file, err)
						}
						out = append(out, s)
					}
				}
			}
		}
	}
	return out
}

// namesType reports whether expr is the type name or a qualified pkg.name.
func namesType(expr ast.Expr, name string) bool {
	switch e := expr.(type) {
	case *ast.Ident:
		return e.Name == name
	case *ast.SelectorExpr:
		return e.Sel.Name == name
	}
	return false
}
