package acl

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/testhttp"
)

func serve(t *testing.T, enabled bool) (*ACL, *httptest.Server) {
	t.Helper()
	a := New(enabled, index.New(0))
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return a, srv
}

func get(t *testing.T, url string, header map[string]string) (int, http.Header, string) {
	t.Helper()
	r, err := testhttp.Exchange(context.Background(), nil, http.MethodGet, url, nil, header)
	if err != nil {
		t.Fatal(err)
	}
	return r.Status, r.Header, string(r.Body)
}

func TestTokenSelfWithACLsDisabled(t *testing.T) {
	_, srv := serve(t, false)
	code, h, body := get(t, srv.URL+"/v1/acl/token/self", nil)
	if code != 200 || h.Get("X-Nomad-Index") != "0" || h.Get("X-Nomad-KnownLeader") != "true" {
		t.Fatalf("self: %d %v", code, h)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	// The fields and values of the recorded answer of a real agent.
	want := map[string]any{
		"AccessorID": "acls-disabled", "Name": "ACLs disabled token", "Type": "client", "SecretID": "",
		"Global": false, "ExpirationTTL": "", "ExpirationTime": nil, "Hash": nil, "Policies": nil, "Roles": nil,
		"CreateIndex": 0.0, "ModifyIndex": 0.0, "CreateTime": "0001-01-01T00:00:00Z",
	}
	if len(got) != len(want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %#v, want %#v", k, got[k], v)
		}
	}
	code, _, body = get(t, srv.URL+"/v1/acl/tokens", nil)
	if code != 400 || body != "ACL support disabled" {
		t.Fatalf("tokens with ACLs off: %d %q", code, body)
	}
}

func TestTokenSelf(t *testing.T) {
	a, srv := serve(t, true)
	self, _, err := testhttp.NomadClient(t, srv.URL, a.BootstrapSecret()).ACLTokens().Self(nil)
	if err != nil {
		t.Fatal(err)
	}
	if self.Type != "management" || self.Name != "Bootstrap Token" || self.SecretID != a.BootstrapSecret() || !self.Global {
		t.Fatalf("self: %+v", self)
	}
	code, _, body := get(t, srv.URL+"/v1/acl/token/self", map[string]string{"Authorization": "Bearer " + a.BootstrapSecret()})
	if code != 200 || !strings.Contains(body, `"Bootstrap Token"`) {
		t.Fatalf("bearer token: %d %s", code, body)
	}
	code, _, body = get(t, srv.URL+"/v1/acl/token/self", map[string]string{"X-Nomad-Token": "00000000-0000-0000-0000-000000000000"})
	if code != 403 || body != "Permission denied" {
		t.Fatalf("unknown token: %d %q", code, body)
	}
	code, _, body = get(t, srv.URL+"/v1/acl/token/self", nil)
	if code != 200 || !strings.Contains(body, `"AccessorID":"anonymous"`) {
		t.Fatalf("anonymous: %d %s", code, body)
	}
}

func TestPoliciesAndTokensThroughClient(t *testing.T) {
	a, srv := serve(t, true)
	mgmt := testhttp.NomadClient(t, srv.URL, a.BootstrapSecret())
	rules := `namespace "default" { policy = "read" }`
	if _, err := mgmt.ACLPolicies().Upsert(&api.ACLPolicy{Name: "reader", Rules: rules}, nil); err != nil {
		t.Fatalf("upsert policy: %v", err)
	}
	if _, err := mgmt.ACLPolicies().Upsert(&api.ACLPolicy{Name: "broken", Rules: `namespace "x" { policy = "nope" }`}, nil); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("invalid policy accepted: %v", err)
	}
	p, _, err := mgmt.ACLPolicies().Info("reader", nil)
	if err != nil || p.Rules != rules || p.CreateIndex == 0 {
		t.Fatalf("info: %+v %v", p, err)
	}
	tok, _, err := mgmt.ACLTokens().Create(&api.ACLToken{Name: "r", Type: "client", Policies: []string{"reader"}}, nil)
	if err != nil || tok.SecretID == "" || tok.AccessorID == "" {
		t.Fatalf("create token: %+v %v", tok, err)
	}
	resolved, err := a.Resolve(tok.SecretID)
	if err != nil || !resolved.AllowNamespace("default", "read-job") || resolved.AllowNamespace("default", "submit-job") {
		t.Fatalf("resolved: %+v %v", resolved, err)
	}

	reader := testhttp.NomadClient(t, srv.URL, tok.SecretID)
	if _, _, err := reader.ACLTokens().List(nil); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("client token lists tokens: %v", err)
	}
	own, _, err := reader.ACLPolicies().List(nil)
	if err != nil || len(own) != 1 || own[0].Name != "reader" {
		t.Fatalf("a client token lists its own policies: %+v %v", own, err)
	}
	list, _, err := mgmt.ACLTokens().List(nil)
	if err != nil || len(list) != 2 {
		t.Fatalf("tokens: %+v %v", list, err)
	}
	if _, err := mgmt.ACLTokens().Delete(tok.AccessorID, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := a.Resolve(tok.SecretID); err == nil {
		t.Fatalf("deleted token still resolves")
	}
	if _, _, err := mgmt.ACLTokens().Info(tok.AccessorID, nil); err == nil || !strings.Contains(err.Error(), "ACL token not found") {
		t.Fatalf("info of a deleted token: %v", err)
	}
	if _, _, err := mgmt.ACLTokens().Bootstrap(nil); err == nil || !strings.Contains(err.Error(), "ACL bootstrap already done") {
		t.Fatalf("second bootstrap: %v", err)
	}
}
