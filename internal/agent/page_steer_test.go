package agent

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// post sends an action as a browser would, with extra headers, and returns the status and body.
func post(t *testing.T, url string, headers map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Actions are refused, before any Nomad request, when they come from another site, by any
// method but POST, for unknown actions and restarts, and for an answer nobody asked for;
// nothing of the restart changes. Without ACLs no token is needed, and a same-origin pause
// is stored with the page as its author.
func TestPageActionsRefusals(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.register(t, "default", "web", 1, nil)
	rec := e.detached(t, "default", "web", restart.Spec{})
	var (
		mu     sync.Mutex
		tokens []string
	)
	built := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), tokens...)
	}
	a := e.newAgent(t, "agent", e.sim.BootstrapToken(), func(c *Config) {
		steer := e.tokenSteer(nil)
		c.Steer = func(token string) (Steerer, error) {
			mu.Lock()
			tokens = append(tokens, token)
			mu.Unlock()
			return steer(token)
		}
	})
	srv := serve(t, a, nil)
	base := srv.URL + "/restart/" + rec.ID
	tests := []struct {
		name    string
		path    string
		headers map[string]string
		body    string
		status  int
		says    string
	}{
		{"another site (Fetch metadata)", "/pause", map[string]string{"Sec-Fetch-Site": "cross-site"}, "", http.StatusForbidden, "cross-origin"},
		{"another origin", "/pause", map[string]string{"Origin": "http://evil.example"}, "", http.StatusForbidden, "cross-origin"},
		{"unknown action", "/delete", nil, "", http.StatusNotFound, "pause, resume, cancel and answer"},
		{"answer to no question", "/answer", nil, `{"Answer":"yes"}`, http.StatusConflict, "not waiting for an answer"},
		{"a body that is not JSON", "/pause", nil, `Answer=yes`, http.StatusBadRequest, "not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, base+tt.path, tt.headers, tt.body)
			if status != tt.status || !strings.Contains(strings.ToLower(body), strings.ToLower(tt.says)) {
				t.Errorf("status %d %q, want %d saying %q", status, body, tt.status, tt.says)
			}
		})
	}
	get(t, base+"/pause", http.StatusMethodNotAllowed)
	if status, body := post(t, srv.URL+"/restart/ffffffff/pause", nil, ""); status != http.StatusNotFound {
		t.Errorf("pause of an unknown restart: %d %s", status, body)
	}
	if n := len(built()); n != 0 {
		t.Fatalf("refused requests reached Nomad (%d steering clients built)", n)
	}
	cur, err := e.store.Get(testContext(t), rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.ModifyIndex != rec.ModifyIndex {
		t.Fatalf("refused requests changed the restart (index %d -> %d)", rec.ModifyIndex, cur.ModifyIndex)
	}

	status, body := post(t, base+"/pause", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": srv.URL}, "")
	if status != http.StatusOK || !strings.Contains(body, "Pause requested") {
		t.Fatalf("same-origin pause without ACLs: %d %s", status, body)
	}
	cur, err = e.store.Get(testContext(t), rec.Namespace, rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := built(); cur.Control.Intent != restart.IntentPause || cur.Control.By != "page of agent" || len(got) != 1 || got[0] != "" {
		t.Errorf("after the pause: control %+v, tokens %q, want one empty token", cur.Control, built())
	}
}

// An agent without Config.Steer answers actions with the command to use instead.
func TestPageActionsWithoutSteering(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.register(t, "default", "web", 1, nil)
	rec := e.detached(t, "default", "web", restart.Spec{})
	srv := serve(t, e.newAgent(t, "agent", e.sim.BootstrapToken(), nil), nil)
	status, body := post(t, srv.URL+"/restart/"+rec.ID+"/cancel", nil, "")
	if status != http.StatusNotImplemented || !strings.Contains(body, "nomad-restart cancel <id>") {
		t.Errorf("cancel without steering: %d %s", status, body)
	}
}

func TestSteerFailureWording(t *testing.T) {
	denied := &store.PermissionError{Capability: "write", Namespace: "prod", Path: "nomad-restart/web/0123", Prefix: "nomad-restart"}
	tests := []struct {
		name   string
		err    error
		status int
		says   []string
	}{
		{"a denied variable write names the capability and the rule", fmt.Errorf("storing: %w", denied), http.StatusForbidden,
			[]string{"Permission denied", `"write"`, `namespace "prod" { variables { path "nomad-restart/*"`, "deploy/operator-policy.hcl"}},
		{"a pending cancel", &steer.CancelingError{ID: "0123456789abcdef", By: "ops", Verb: "pause"}, http.StatusConflict,
			[]string{"being canceled", "a cancel from this page"}},
		{"a restart the token cannot read", store.ErrNotFound, http.StatusForbidden, []string{"Permission denied", "cannot pause restart 01234567", "cannot read", "ACL Token", `namespace "prod"`}},
		{"another restart of the job runs", &store.JobBusyError{JobID: "web", RestartID: "fedcba9876543210"}, http.StatusConflict,
			[]string{`job "web" already has restart fedcba98 in progress`, "/restart/fedcba9876543210"}},
		{"anything else", errors.New("connection refused"), http.StatusBadGateway, []string{"pause restart 01234567: connection refused"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, text := steerFailure("pause restart 01234567", "prod", tt.err)
			if status != tt.status {
				t.Errorf("status = %d, want %d", status, tt.status)
			}
			for _, s := range tt.says {
				if !strings.Contains(text, s) {
					t.Errorf("%q lacks %q", text, s)
				}
			}
		})
	}
}
