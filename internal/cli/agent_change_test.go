package cli

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// `nomad-restart agent` rolls an opted-in job when the variable its template reads
// changes (-roll-on-change is on by default): the rollout is an ordinary restart record,
// triggered by the change, driven to its end by the agent.
func TestAgentCommandRollsOnChange(t *testing.T) {
	t.Parallel()
	// Nomad's time is real time here: the debounce is a timer of the agent's.
	c := startSim(t, nomadsim.Options{TimeScale: 1})
	client := adminClient(t, c)
	path := "nomad/jobs/web/config"
	put := func(value string, index uint64) uint64 {
		v := &api.Variable{Namespace: "default", Path: path, Items: map[string]string{"greeting": value}, ModifyIndex: index}
		var out *api.Variable
		var err error
		if index == 0 {
			out, _, err = client.Variables().CheckedCreate(v, nil)
		} else {
			out, _, err = client.Variables().CheckedUpdate(v, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		return out.ModifyIndex
	}
	index := put("hello", 0)
	job := testJob("web", api.JobTypeService)
	job.TaskGroups = job.TaskGroups[:1]
	job.Meta = map[string]string{"nomad-restart.on-change": "auto", "nomad-restart.debounce": "2s"}
	job.TaskGroups[0].Tasks[0].Templates = []*api.Template{{
		EmbeddedTmpl: new(`{{ with nomadVar "` + path + `" }}{{ .greeting }}{{ end }}`),
		DestPath:     new("local/config.txt"), ChangeMode: new("noop"),
	}}
	register(t, c, job)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	agentCtx, stop := context.WithCancel(ctx)
	defer stop()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(agentCtx, []string{"agent", "-http-addr", addr, "-log-format", "json"}, strings.NewReader(""), &out, &errb,
			func(k string) string {
				if k == "NOMAD_ADDR" {
					return c.Addr()
				}
				return ""
			})
	}()
	simtest.WaitFor(t, ctx, "the agent to follow the job", func() bool {
		return strings.Contains(errb.String(), "following a job for config-change rollouts")
	})
	index = put("bonjour", index)

	st := store.NewNomad(client, store.NomadOptions{})
	var rec *restart.Record
	simtest.WaitFor(t, ctx, "the rollout", func() bool {
		recs, err := st.List(ctx, store.Filter{JobID: "web"})
		if err == nil && len(recs) == 1 {
			rec = recs[0]
		}
		return rec != nil
	})
	for !rec.Status.Terminal() {
		if rec, err = st.Watch(ctx, rec.Namespace, rec.ID, rec.ModifyIndex); err != nil {
			t.Fatalf("the rollout did not end: %v; agent stderr:\n%s", err, errb.String())
		}
	}
	if rec.Status != restart.StatusSucceeded || len(rec.Triggers) != 1 || rec.Triggers[0].NewIndex != index {
		t.Fatalf("the rollout ended %s (%s) with triggers %+v, want succeeded for the change to index %d", rec.Status, rec.Reason, rec.Triggers, index)
	}
	stop()
	if code := <-done; code != 0 {
		t.Fatalf("agent exit %d:\n%s", code, errb.String())
	}
}
