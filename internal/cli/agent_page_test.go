package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// shippedPolicyToken creates a token holding deploy/<role>-policy.hcl.
func shippedPolicyToken(t *testing.T, c *nomadsim.Cluster, role string) string {
	t.Helper()
	rules, err := os.ReadFile(filepath.Join("..", "..", "deploy", role+"-policy.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	token, err := c.CreateToken(role, map[string]string{"nomad-restart-" + role: string(rules)})
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// The page of `nomad-restart agent` acts with the token of the request only: with none, an
// agent whose own token (NOMAD_TOKEN, the agent policy) may write the records still cannot
// pause a restart through it; with an operator token it can; neither token is logged.
func TestAgentPageActsWithTheRequestsToken(t *testing.T) {
	c := startSim(t, nomadsim.Options{ACLs: true})
	register(t, c, testJob("web", "service"))
	admin := adminClient(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	st := store.NewNomad(admin, store.NomadOptions{})
	e := engine.New(engine.Config{Cluster: cluster.NewNomad(admin), Store: st})
	p, err := e.Plan(ctx, engine.Request{Job: "web", Spec: restart.Spec{BatchSizes: []restart.BatchSize{{N: 1}}, BatchWaitAsk: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Create(ctx, p.Record); err != nil {
		t.Fatal(err)
	}
	agentToken, operator := shippedPolicyToken(t, c, "agent"), shippedPolicyToken(t, c, "operator")

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
		done <- Run(agentCtx, []string{"agent", "-http-addr", addr, "-log-format", "json", "-log-level", "debug"}, strings.NewReader(""), &out, &errb,
			func(k string) string {
				switch k {
				case "NOMAD_ADDR":
					return c.Addr()
				case "NOMAD_TOKEN":
					return agentToken
				}
				return ""
			})
	}()
	rec := p.Record
	for rec.Status != restart.StatusWaiting {
		if rec, err = st.Watch(ctx, rec.Namespace, rec.ID, rec.ModifyIndex); err != nil {
			t.Fatalf("the agent did not take the restart to its question: %v; stderr:\n%s", err, errb.String())
		}
	}

	pause := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/restart/"+rec.ID+"/pause", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		if token != "" {
			req.Header.Set("X-Nomad-Token", token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := pause(""); code != http.StatusForbidden || !strings.Contains(body, "Permission denied") {
		t.Errorf("pause without a token: %d %s, want a denial (the agent's own token must not act for the page)", code, body)
	}
	if code, body := pause(operator); code != http.StatusOK {
		t.Errorf("pause with the operator policy: %d %s", code, body)
	}
	paused, err := st.Get(ctx, rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if paused.Control.Intent != restart.IntentPause {
		t.Errorf("after the operator's pause the intent is %q", paused.Control.Intent)
	}
	stop()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("agent exited %d; stderr:\n%s", code, errb.String())
		}
	case <-ctx.Done():
		t.Fatal("agent did not exit after cancellation")
	}
	logs := errb.String()
	if !strings.Contains(logs, "action from the page") {
		t.Errorf("the agent did not log the page's actions:\n%s", logs)
	}
	for _, secret := range []string{agentToken, operator} {
		if strings.Contains(logs+out.String(), secret) {
			t.Errorf("a token appears in the agent's output")
		}
	}
}
