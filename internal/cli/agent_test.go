package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestAgentBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-concurrency=0"}, "-concurrency must be at least 1"},
		{[]string{"-state=disk"}, `Invalid -state value "disk"`},
		{[]string{"-log-format=xml"}, `Invalid -log-format value "xml"`},
		{[]string{"-http-addr=9646"}, `Invalid -http-addr value "9646"`},
		{[]string{"-bogus"}, "unknown option -bogus"},
		{[]string{"extra"}, "agent takes no arguments"},
		{[]string{"-log-level=loud"}, "Invalid -log-level value"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Run(context.Background(), append([]string{"agent"}, tc.args...), strings.NewReader(""), &out, &errb,
				func(string) string { return "" })
			if code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			if got := strings.TrimSpace(errb.String()); !strings.Contains(got, tc.want) || strings.Count(got, "\n") != 0 {
				t.Errorf("stderr %q, want one line containing %q", got, tc.want)
			}
		})
	}
}

// `nomad-restart agent` adopts a detached restart, serves /healthz, and on cancellation
// (SIGTERM) exits 0.
func TestAgentCommandAdoptsDetachedRestart(t *testing.T) {
	c := startSim(t, nomadsim.Options{})
	register(t, c, testJob("web", "service"))
	client := simtest.Client(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := store.NewNomad(client, store.NomadOptions{})
	e := engine.New(engine.Config{Cluster: cluster.NewNomad(client), Store: st})
	var p *engine.Plan
	simtest.WaitFor(t, ctx, "a plan (the job's deployment must end first)", func() bool {
		var err error
		p, err = e.Plan(ctx, engine.Request{Job: "web"})
		return err == nil
	})
	if err := e.Create(ctx, p.Record); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()

	agentCtx, stop := context.WithCancel(ctx)
	defer stop()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(agentCtx, []string{"agent", "-http-addr", addr, "-log-format", "json"}, strings.NewReader(""), &out, &errb,
			func(k string) string {
				switch k {
				case "NOMAD_ADDR":
					return c.Addr()
				case "NOMAD_NAMESPACE":
					return "not-the-agent-scope" // ignored by the agent (see its help)
				}
				return ""
			})
	}()
	rec := p.Record
	drivers := map[string]bool{} // every driver the record named while it ran
	for !rec.Status.Terminal() {
		next, err := st.Watch(ctx, rec.Namespace, rec.ID, rec.ModifyIndex)
		if err != nil {
			t.Fatalf("restart did not end: %v; agent stderr:\n%s", err, errb.String())
		}
		rec = next
		if rec.Driver != "" {
			drivers[rec.Driver] = true
		}
	}
	if rec.Status != restart.StatusSucceeded {
		t.Fatalf("restart ended %s (%s)", rec.Status, rec.Reason)
	}
	if rec.Driver != "" {
		t.Errorf("the ended restart still names a driver: %q", rec.Driver)
	}
	// The agent logs each restart it finished; the record's events name a driver that took over.
	agentDrove := strings.Contains(eventsText(rec), "agent@") || strings.Contains(errb.String(), "restart finished")
	for d := range drivers {
		if !strings.HasPrefix(d, "agent@") {
			t.Errorf("the record named %q as its driver, not the agent", d)
		}
		agentDrove = true
	}
	if !agentDrove {
		t.Errorf("the record never named the agent as its driver")
	}
	simtest.WaitFor(t, ctx, "the agent's /healthz", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("agent exited %d; stderr:\n%s", code, errb.String())
		}
	case <-ctx.Done():
		t.Fatal("agent did not exit after cancellation")
	}
	if !strings.Contains(errb.String(), `"msg":"agent started"`) {
		t.Errorf("no JSON log line of the start:\n%s", errb.String())
	}
}

func eventsText(r *restart.Record) string {
	var b strings.Builder
	for _, e := range r.Events {
		b.WriteString(e.Message + "\n")
	}
	return b.String()
}
