package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/nomad/api"
	dto "github.com/prometheus/client_model/go"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/sourcewatch"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// A job whose meta opts in is rolled when the variable its template reads changes: once
// per change (a burst within the debounce is one rollout), each allocation restarted once
// per rollout, from Nomad's facts; the allocations started after the variable's last
// change are not rolled when the agent starts; a job that does not opt in is never
// touched.
func TestConfigChangeRollouts(t *testing.T) {
	t.Parallel()
	// Nomad's time is real time here: the debounce's wait is a timer of the agent's.
	e := startEnv(t, nomadsim.Options{TimeScale: 1})
	ctx := testContext(t)
	path := "nomad/jobs/cfg/config"
	index := putVar(t, e.client, path, "hello", 0)
	registerTemplated(t, e, "cfg", 3, path, map[string]string{
		"nomad-restart.on-change": "auto", "nomad-restart.debounce": "2s", "nomad-restart.health": "running",
	})
	registerTemplated(t, e, "bystander", 2, path, nil) // reads the variable, never opted in

	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), func(c *Config) {
		c.Now = e.sim.Now // the variables' and tasks' times are the simulation's
		c.Changes = &ChangeRollouts{BusyRecheck: 200 * time.Millisecond, Sources: sourcewatch.New(c.Client, sourcewatch.Options{})}
	})
	defer start(t, a)()

	rollouts := func() []*restart.Record {
		recs, err := e.store.List(ctx, store.Filter{Namespace: "default"})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	index = putVar(t, e.client, path, "bonjour", index)
	var first *restart.Record
	simtest.WaitFor(t, ctx, "the rollout of the change", func() bool {
		recs := rollouts()
		if len(recs) > 0 {
			first = recs[0]
		}
		return first != nil
	})
	first = e.waitEnd(t, first)
	if first.Status != restart.StatusSucceeded || first.JobID != "cfg" {
		t.Fatalf("the rollout %s of %s ended %s: %s", first.ID, first.JobID, first.Status, first.Reason)
	}
	if len(first.Triggers) != 1 || first.Triggers[0].NewIndex != index || first.Triggers[0].Source != "nomad:"+path {
		t.Fatalf("the rollout's triggers %+v, want the change to index %d", first.Triggers, index)
	}
	if len(first.Allocs) != 3 {
		t.Fatalf("the rollout planned %d allocations, want the job's 3", len(first.Allocs))
	}

	// A burst of five changes within the debounce: one rollout, for the last.
	for i := range 5 {
		index = putVar(t, e.client, path, "v"+string(rune('a'+i)), index)
	}
	var second *restart.Record
	simtest.WaitFor(t, ctx, "the rollout of the burst", func() bool {
		for _, r := range rollouts() {
			if r.ID != first.ID {
				second = r
			}
		}
		return second != nil
	})
	second = e.waitEnd(t, second)
	if second.Status != restart.StatusSucceeded || len(second.Triggers) != 1 || second.Triggers[0].NewIndex != index {
		t.Fatalf("the burst's rollout ended %s with triggers %+v, want the last change (index %d)", second.Status, second.Triggers, index)
	}
	if recs := rollouts(); len(recs) != 2 {
		t.Fatalf("%d restarts recorded, want the two rollouts", len(recs))
	}
	counts, err := simtest.CountRestarts(ctx, e.client, "default", "cfg")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range first.Allocs {
		if n := counts.InPlace[a.ID]; n != 2 {
			t.Errorf("allocation %s was restarted %d times, want twice (once per rollout)", a.ID, n)
		}
	}
	untouched, err := simtest.CountRestarts(ctx, e.client, "default", "bystander")
	if err != nil {
		t.Fatal(err)
	}
	for id, n := range untouched.InPlace {
		if n != 0 {
			t.Errorf("allocation %s of the job that did not opt in was restarted %d times", id, n)
		}
	}
}

// putVar writes the variable with check-and-set at index (0: create) and returns its new
// ModifyIndex.
func putVar(t *testing.T, client *api.Client, path, value string, index uint64) uint64 {
	t.Helper()
	v := &api.Variable{Namespace: "default", Path: path, Items: map[string]string{"greeting": value}, ModifyIndex: index}
	var out *api.Variable
	var err error
	if index == 0 {
		out, _, err = client.Variables().CheckedCreate(v, nil)
	} else {
		out, _, err = client.Variables().CheckedUpdate(v, nil)
	}
	if err != nil {
		t.Fatalf("writing variable %s: %v", path, err)
	}
	return out.ModifyIndex
}

// registerTemplated runs a service job whose task renders the variable at path with
// change_mode noop, with meta at job level, and waits until it runs.
func registerTemplated(t *testing.T, e *env, id string, count int, path string, meta map[string]string) {
	t.Helper()
	job := templatedJob(id, count, `{{ with nomadVar "`+path+`" }}{{ .greeting }}{{ end }}`, meta)
	if _, err := e.sim.RegisterJob(job); err != nil {
		t.Fatalf("registering job %s: %v", id, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	simtest.WaitFor(t, ctx, "job "+id+" running", func() bool { return running(ctx, e.client, "default", id, count) })
}

// A Consul key read by `key` rolls the job when it changes while the agent watches it
// (Consul keeps no time of a change: the agent's first sight of the key is no change).
func TestConfigChangeRolloutsOnAConsulKey(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{TimeScale: 1})
	ctx := testContext(t)
	e.sim.ConsulKVPut("web/flags", "a=1")
	job := templatedJob("flags", 2, `{{ key "web/flags" }}`, map[string]string{
		"nomad-restart.on-change": "auto", "nomad-restart.debounce": "2s", "nomad-restart.health": "running",
	})
	if _, err := e.sim.RegisterJob(job); err != nil {
		t.Fatal(err)
	}
	simtest.WaitFor(t, ctx, "job flags running", func() bool { return running(ctx, e.client, "default", "flags", 2) })

	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), func(c *Config) {
		c.Now = e.sim.Now
		c.Changes = &ChangeRollouts{BusyRecheck: 200 * time.Millisecond, Sources: sourcewatch.New(c.Client, sourcewatch.Options{
			Consul: func(string) (*consulapi.Client, error) {
				return consulapi.NewClient(&consulapi.Config{Address: e.sim.ConsulAddr()})
			},
		})}
	})
	defer start(t, a)()
	simtest.WaitFor(t, ctx, "the agent to follow the job", func() bool {
		var m dto.Metric
		return a.metrics.changeMetrics().jobs.Write(&m) == nil && m.GetGauge().GetValue() == 1
	})
	// The agent's first answer from Consul is its baseline, whenever it comes: a change
	// made before it is no change. Change the key until one lands after it, each time
	// waiting out the debounce and more.
	var rec *restart.Record
	find := func() bool {
		recs, err := e.store.List(ctx, store.Filter{Namespace: "default", JobID: "flags"})
		if err == nil && len(recs) > 0 {
			rec = recs[0] // the newest
		}
		return rec != nil
	}
	for i := 2; rec == nil; i++ {
		if i > 8 {
			t.Fatal("no rollout after 7 changes of the key")
		}
		e.sim.ConsulKVPut("web/flags", fmt.Sprintf("a=%d", i))
		deadline := time.Now().Add(8 * time.Second)
		for !find() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	rec = e.waitEnd(t, rec)
	if rec.Status != restart.StatusSucceeded || len(rec.Triggers) != 1 || rec.Triggers[0].Source != "consul:web/flags" {
		t.Fatalf("the rollout ended %s (%s) with triggers %+v, want succeeded for consul:web/flags", rec.Status, rec.Reason, rec.Triggers)
	}
	e.checkOnce(t, rec)
}

// templatedJob is a service job whose task renders tmpl with change_mode noop, with meta
// at job level.
func templatedJob(id string, count int, tmpl string, meta map[string]string) *api.Job {
	job := &api.Job{ID: ptr(id), Name: ptr(id), Type: ptr("service"), Namespace: ptr("default"),
		Datacenters: []string{"dc1", "dc2"}, Region: ptr("global"), Meta: meta}
	tg := api.NewTaskGroup("web", count)
	task := api.NewTask("main", "raw_exec")
	task.Config = map[string]any{"command": "/bin/sh"}
	task.Require(&api.Resources{CPU: ptr(10), MemoryMB: ptr(16)})
	task.Templates = []*api.Template{{EmbeddedTmpl: ptr(tmpl), DestPath: ptr("local/config.txt"), ChangeMode: ptr("noop")}}
	tg.AddTask(task)
	job.AddTaskGroup(tg)
	return job
}
