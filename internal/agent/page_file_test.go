package agent

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// Filing from the page refuses what `run` refuses with the same words, files only the plan
// the user reviewed, and refuses cross-site requests; a refusal records nothing.
func TestPageFilingRefusals(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	e.register(t, "default", "web", 2, nil)
	a := e.newAgent(t, "agent", e.sim.BootstrapToken(), func(c *Config) { c.Steer = e.tokenSteer(nil) })
	srv := serve(t, a, nil)
	tests := []struct {
		name   string
		path   string
		header map[string]string
		body   string
		status int
		says   string
	}{
		{"no job", "/restarts/plan", nil, `{"Job":" "}`, http.StatusBadRequest, "give the job to restart"},
		{"a bad batch size", "/restarts/plan", nil, `{"Job":"web","BatchSize":"0"}`, http.StatusBadRequest, `invalid -batch-size value "0"`},
		{"a bad health mode", "/restarts/plan", nil, `{"Job":"web","Health":"soon"}`, http.StatusBadRequest, `invalid -health value "soon"`},
		{"an unknown job", "/restarts/plan", nil, `{"Job":"nope"}`, http.StatusBadRequest, `No job(s) with prefix or ID "nope"`},
		{"a plan other than the one reviewed", "/restarts", nil, `{"Job":"web","Expect":["not-an-alloc"]}`, http.StatusConflict, "review the new plan"},
		{"from another site", "/restarts", map[string]string{"Sec-Fetch-Site": "cross-site"}, `{"Job":"web"}`, http.StatusForbidden, "cross-origin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, srv.URL+tt.path, tt.header, tt.body)
			var res actionResult
			if json.Unmarshal([]byte(body), &res) == nil {
				body = res.Error
			}
			if status != tt.status || !strings.Contains(body, tt.says) {
				t.Errorf("status %d %s, want %d saying %q", status, body, tt.status, tt.says)
			}
		})
	}
	recs, err := e.store.List(testContext(t), store.Filter{Namespace: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 0 {
		t.Errorf("refused filings recorded %d restarts", len(recs))
	}

	status, body := post(t, srv.URL+"/restarts/plan", nil, `{"Job":"web","BatchSize":"50%","Health":"none"}`)
	if status != http.StatusOK || !strings.Contains(body, "in 2 batches of 50%") || !strings.Contains(body, "health none") {
		t.Fatalf("plan: %d %s", status, body)
	}
	if recs, _ := e.store.List(testContext(t), store.Filter{Namespace: "*"}); len(recs) != 0 {
		t.Errorf("a plan recorded %d restarts: it must be a dry run", len(recs))
	}
	p, err := e.planner.Plan(testContext(t), engine.Request{Namespace: "default", Job: "web"})
	if err != nil {
		t.Fatal(err)
	}
	expect := `["` + strings.Join(planAllocs(p), `","`) + `"]`
	status, body = post(t, srv.URL+"/restarts", nil, `{"Job":"web","BatchSize":"50%","Health":"none","Expect":`+expect+`}`)
	if status != http.StatusOK || !strings.Contains(body, `"id"`) {
		t.Fatalf("filing the reviewed plan: %d %s", status, body)
	}
	recs, err = e.store.List(testContext(t), store.Filter{Namespace: "*"})
	if err != nil || len(recs) != 1 || recs[0].Spec.Health != restart.HealthNone || recs[0].Batches != 2 {
		t.Fatalf("after filing: %d records (%v)", len(recs), err)
	}
}
