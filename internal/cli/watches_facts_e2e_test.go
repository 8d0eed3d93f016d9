package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// kvJob opts in and reads one Consul key.
func kvJob() *api.Job {
	job := templated(simpleJob("web-kv", api.JobTypeService, 1), "local/app.env", `{{ key "web/config" }}`, "noop")
	job.Meta = map[string]string{onchange.KeyOnChange: "auto"}
	return job
}

// listJob opts in and lists the variables under nomad/jobs/web/.
func listJob() *api.Job {
	job := templated(simpleJob("web-list", api.JobTypeService, 1), "local/all.env",
		`{{ range nomadVarList "nomad/jobs/web/" }}{{ .Path }} {{ end }}`, "noop")
	job.Meta = map[string]string{onchange.KeyOnChange: "auto"}
	return job
}

// writeVariable writes a variable as an operator would, and returns its metadata.
func writeVariable(t *testing.T, client *api.Client, path, value string) *api.VariableMetadata {
	t.Helper()
	v, _, err := client.Variables().Create(&api.Variable{Path: path, Items: api.VariableItems{"port": value}}, nil)
	if err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	return v.Metadata()
}

// fileRollout files a restart of job through the engine and the Nomad store, as a
// rollout would: with triggers, or none for an operator's restart; a finished one
// (status end) frees the job for the next.
func fileRollout(ctx context.Context, t *testing.T, client *api.Client, job string, triggers []restart.Trigger, end restart.Status) *restart.Record {
	t.Helper()
	st := store.NewNomad(client, store.NomadOptions{})
	e := engine.New(engine.Config{Cluster: cluster.NewNomad(client), Store: st})
	p, err := e.Plan(ctx, engine.Request{Job: job, Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}}})
	if err != nil {
		t.Fatalf("planning a restart of %s: %v", job, err)
	}
	p.Record.Triggers = triggers
	if err := e.Create(ctx, p.Record); err != nil {
		t.Fatalf("filing a restart of %s: %v", job, err)
	}
	if end != "" {
		p.Record.Status = end
		if err := st.Update(ctx, p.Record); err != nil {
			t.Fatalf("ending the restart of %s: %v", job, err)
		}
	}
	return p.Record
}

// consulIndex is a Consul key's ModifyIndex as Consul's API answers it.
func consulIndex(t *testing.T, addr, key string) uint64 {
	t.Helper()
	cfg := consulapi.DefaultNonPooledConfig()
	cfg.Address = addr
	client, err := consulapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pair, _, err := client.KV().Get(key, nil)
	if err != nil || pair == nil {
		t.Fatalf("reading Consul key %s: %v (found %v)", key, err, pair != nil)
	}
	return pair.ModifyIndex
}

// watchesFixture is a cluster whose watched variable was written twice, whose other
// watched variable is missing, whose Consul key was written twice, and whose job web has
// a finished rollout followed by an operator's restart.
type watchesFixture struct {
	c        *nomadsim.Cluster
	e        cliEnv
	config   *api.VariableMetadata // the newest write of nomad/jobs/web/config
	under    *api.VariableMetadata // the newest write under nomad/jobs/web/ (config2)
	first    uint64                // the index of its first write
	kvIndex  uint64
	rollout  *restart.Record
	operator *restart.Record
}

func newWatchesFixture(t *testing.T) watchesFixture {
	t.Helper()
	jobs := watchesJobs()
	c, e := startSimEnv(t, nomadsim.Options{}, jobs[0], jobs[3], kvJob(), listJob())
	e.consul = c.ConsulAddr()
	admin := adminClient(t, c)
	ctx := testCtx(t)
	f := watchesFixture{c: c, e: e}
	f.first = writeVariable(t, admin, "nomad/jobs/web/config", "8080").ModifyIndex
	// A variable that sorts right after it and that the exact source must not count.
	writeVariable(t, admin, "nomad/jobs/web/config2", "1")
	f.config = writeVariable(t, admin, "nomad/jobs/web/config", "9090")
	f.under = writeVariable(t, admin, "nomad/jobs/web/config2", "2")
	// Outside the prefix, though it shares its first letters.
	writeVariable(t, admin, "nomad/jobs/web-other", "3")
	c.ConsulKVPut("web/config", "a")
	c.ConsulKVPut("web/config", "b")
	f.kvIndex = consulIndex(t, c.ConsulAddr(), "web/config")
	trigger := restart.Trigger{Source: "nomad:nomad/jobs/web/config", OldIndex: f.first, NewIndex: f.config.ModifyIndex, ChangedAt: time.Unix(0, f.config.ModifyTime)}
	f.rollout = fileRollout(ctx, t, admin, "web", []restart.Trigger{trigger}, restart.StatusSucceeded)
	f.operator = fileRollout(ctx, t, admin, "web", nil, "") // newer, but no config change started it
	return f
}

// rowOf returns the listing's row of the job that names source.
func rowOf(t *testing.T, out, job, source string) string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(line, job+" ") && strings.Contains(line, source) {
			return line
		}
	}
	t.Fatalf("no row of %s for %s in:\n%s", job, source, out)
	return ""
}

// TestWatchesLastChangeAndRollout lists the jobs with their facts: the newest write of a
// variable written twice (index and Nomad's time), "none" for a missing one, a Consul key's
// index, and the job's newest rollout that config-change triggers started, not the
// operator's restart filed after it. Nothing is written to Nomad.
func TestWatchesLastChangeAndRollout(t *testing.T) {
	f := newWatchesFixture(t)
	ctx := testCtx(t)
	before := f.c.Stats().Mutations

	code, out, errOut := f.e.run(ctx, "watches")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if f.config.ModifyIndex <= f.first {
		t.Fatalf("the second write's index %d is not above the first's %d", f.config.ModifyIndex, f.first)
	}
	wantChange := fmt.Sprintf("index %d at %s", f.config.ModifyIndex, formatTime(time.Unix(0, f.config.ModifyTime)))
	wantRollout := shortID(f.rollout.ID, false) + " (succeeded)"
	checks := []struct{ job, source, want string }{
		{"web", `"nomad/jobs/web/config"`, wantChange},
		{"web", `"nomad/jobs/web/config"`, wantRollout},
		{"web", `"nomad/jobs/web/extra"`, noneNomad},
		{"web", `"nomad/jobs/web/extra"`, wantRollout},
		{"web-loud", `"nomad/jobs/web-loud"`, noneNomad},
		{"web-kv", `Consul key "web/config"`, fmt.Sprintf("index %d ", f.kvIndex)},
		{"web-list", `Nomad variables under "nomad/jobs/web/"`, fmt.Sprintf("index %d at %s", f.under.ModifyIndex, formatTime(time.Unix(0, f.under.ModifyTime)))},
	}
	for _, ck := range checks {
		if row := rowOf(t, out, ck.job, ck.source); !strings.Contains(row, ck.want) {
			t.Errorf("row of %s for %s lacks %q: %s", ck.job, ck.source, ck.want, row)
		}
	}
	if row := rowOf(t, out, "web-loud", "web-loud"); !strings.HasSuffix(strings.TrimSpace(row), "  none") {
		t.Errorf("web-loud has no rollout, its row should end with none: %q", row)
	}
	if strings.Contains(out, shortID(f.operator.ID, false)) {
		t.Errorf("the operator's restart, which has no triggers, is shown as a rollout:\n%s", out)
	}
	assertNoMutationsSince(t, f.c, before)
}

// watchesJSON is the part of `watches -json` the tests read.
type watchesJSON struct {
	JobID   string
	Groups  []onchange.Group
	Sources []struct {
		Source     onchange.Source
		LastChange *struct {
			Index uint64
			Time  *time.Time
		}
		Note string
	}
	LastRollout *struct{ ID, Status string }
}

// TestWatchesLastChangeJSON checks the facts' fields in -json, for the listing and for
// -explain: the explanation's fields stay, and LastChange and LastRollout are objects or
// null.
func TestWatchesLastChangeJSON(t *testing.T) {
	f := newWatchesFixture(t)
	ctx := testCtx(t)
	before := f.c.Stats().Mutations

	code, out, errOut := f.e.run(ctx, "watches", "-json")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var list []watchesJSON
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decoding: %v\n%s", err, out)
	}
	byJob := map[string]watchesJSON{}
	for _, j := range list {
		byJob[j.JobID] = j
	}
	web, loud, kv := byJob["web"], byJob["web-loud"], byJob["web-kv"]
	if len(web.Groups) != 1 || len(web.Sources) != 2 {
		t.Fatalf("web: want its group and 2 sources:\n%s", out)
	}
	cfg, extra := web.Sources[0], web.Sources[1]
	if cfg.Source.Path != "nomad/jobs/web/config" || cfg.LastChange == nil || cfg.LastChange.Index != f.config.ModifyIndex ||
		cfg.LastChange.Time == nil || !cfg.LastChange.Time.Equal(time.Unix(0, f.config.ModifyTime)) {
		t.Errorf("web's config source = %+v, want index %d at %v", cfg, f.config.ModifyIndex, time.Unix(0, f.config.ModifyTime))
	}
	if extra.LastChange != nil || extra.Note != noneNomad {
		t.Errorf("missing variable = %+v, want LastChange null and Note %q", extra, noneNomad)
	}
	if web.LastRollout == nil || web.LastRollout.ID != f.rollout.ID || web.LastRollout.Status != "succeeded" {
		t.Errorf("web's LastRollout = %+v, want %s succeeded", web.LastRollout, f.rollout.ID)
	}
	if loud.JobID == "" || loud.LastRollout != nil {
		t.Errorf("web-loud's LastRollout = %+v, want null", loud.LastRollout)
	}
	if len(kv.Sources) != 1 || kv.Sources[0].LastChange == nil || kv.Sources[0].LastChange.Index != f.kvIndex || kv.Sources[0].LastChange.Time != nil {
		t.Errorf("web-kv's sources = %+v, want index %d and Time null", kv.Sources, f.kvIndex)
	}
	for _, field := range []string{`"LastRollout": null`, `"Time": null`, `"LastChange": null`} {
		if !strings.Contains(out, field) {
			t.Errorf("JSON lacks %s:\n%s", field, out)
		}
	}

	code, out, errOut = f.e.run(ctx, "watches", "-explain", "-json", "web")
	if code != 0 {
		t.Fatalf("explain: exit %d\n%s\n%s", code, out, errOut)
	}
	var one watchesJSON
	if err := json.Unmarshal([]byte(out), &one); err != nil {
		t.Fatalf("decoding: %v\n%s", err, out)
	}
	if one.JobID != "web" || len(one.Groups) != 1 || len(one.Sources) != 2 || one.LastRollout == nil || one.LastRollout.ID != f.rollout.ID {
		t.Errorf("explain JSON = %+v", one)
	}
	assertNoMutationsSince(t, f.c, before)
}

// TestWatchesExplainLastFacts checks the section -explain ends with before its outcome,
// and what a Consul source shows when no Consul address is given.
func TestWatchesExplainLastFacts(t *testing.T) {
	f := newWatchesFixture(t)
	ctx := testCtx(t)
	before := f.c.Stats().Mutations

	code, out, errOut := f.e.run(ctx, "watches", "-explain", "web")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	wantChange := fmt.Sprintf("index %d at %s", f.config.ModifyIndex, formatTime(time.Unix(0, f.config.ModifyTime)))
	for _, s := range []string{"\nLast Changes\n", wantChange, noneNomad, "Last Rollout = " + shortID(f.rollout.ID, false) + " (succeeded)"} {
		if !strings.Contains(out, s) {
			t.Errorf("explain lacks %q:\n%s", s, out)
		}
	}
	if last := finalLine(out); !strings.HasPrefix(last, "On a change") {
		t.Errorf("the outcome is no longer the last line: %q", last)
	}

	code, out, errOut = runWithoutConsul(ctx, f.e, "watches", "-explain", "web-kv")
	if code != 0 || !strings.Contains(out, noConsul) || !strings.Contains(out, "Last Rollout = none") {
		t.Errorf("without Consul: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runWithoutConsul(ctx, f.e, "watches", "-explain", "-consul-address", f.c.ConsulAddr(), "web-kv")
	if want := fmt.Sprintf("index %d\n", f.kvIndex); code != 0 || !strings.Contains(out, want) {
		t.Errorf("with -consul-address: exit %d, want %q\n%s\n%s", code, want, out, errOut)
	}
	assertNoMutationsSince(t, f.c, before)
}

// runWithoutConsul runs a command whose environment names no Consul at all.
func runWithoutConsul(ctx context.Context, e cliEnv, args ...string) (int, string, string) {
	var out, errb syncBuffer
	env := map[string]string{"NOMAD_ADDR": e.addr, "NOMAD_TOKEN": e.token, "USER": "tester"}
	a := newApp(strings.NewReader(""), &out, &errb, func(k string) string { return env[k] })
	a.backend = nomadBackend{localDir: e.localDir, clock: e.clock, timeScale: e.scale}
	code := a.run(ctx, args)
	return code, out.String(), errb.String()
}

// TestWatchesUnlistableVariable checks that a variable the token may not list reads as
// missing (Nomad leaves it out of the listing), and that the command still needs no
// read capability on it.
func TestWatchesUnlistableVariable(t *testing.T) {
	c := startSim(t, nomadsim.Options{ACLs: true})
	register(t, c, watchesJobs()[0])
	admin := adminClient(t, c)
	writeVariable(t, admin, "nomad/jobs/web/config", "8080")
	writeVariable(t, admin, "nomad/jobs/web/extra", "1")
	token, err := c.CreateToken("watcher", map[string]string{"watcher": `namespace "default" {
  capabilities = ["list-jobs", "read-job"]
  variables {
    path "nomad/jobs/web/config" { capabilities = ["list"] }
    path "nomad-restart/*" { capabilities = ["list", "read"] }
  }
}`})
	if err != nil {
		t.Fatal(err)
	}
	e := newCLIEnv(t, c)
	e.token = token
	ctx := testCtx(t)
	before := c.Stats().Mutations
	code, out, errOut := e.run(ctx, "watches")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if row := rowOf(t, out, "web", `"nomad/jobs/web/config"`); !strings.Contains(row, "index ") {
		t.Errorf("the listable variable shows no index: %s", row)
	}
	if row := rowOf(t, out, "web", `"nomad/jobs/web/extra"`); !strings.Contains(row, noneNomad) {
		t.Errorf("the unlistable variable should read as %q: %s", noneNomad, row)
	}
	assertNoMutationsSince(t, c, before)
}
