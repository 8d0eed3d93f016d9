package conformance

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// readerRules may read jobs and allocations of the default namespace, nothing more.
const readerRules = `namespace "default" { policy = "read" }`

// createToken makes a client token bound to a policy of the given rules: on a real agent
// through the ACL API, on the sim through its Go API (tests do not exercise its ACL writes).
func (tg *target) createToken(t *testing.T, name, rules string) string {
	t.Helper()
	if tg.sim != nil {
		secret, err := tg.sim.CreateToken(name, map[string]string{name: rules})
		if err != nil {
			t.Fatalf("create token %s: %v", name, err)
		}
		return secret
	}
	policy := &api.ACLPolicy{Name: name, Rules: rules}
	if _, err := tg.api.ACLPolicies().Upsert(policy, nil); err != nil {
		t.Fatalf("upsert ACL policy %s: %v", name, err)
	}
	tok, _, err := tg.api.ACLTokens().Create(&api.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
	if err != nil {
		t.Fatalf("create ACL token %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		wo := (&api.WriteOptions{}).WithContext(ctx)
		_, _ = tg.api.ACLTokens().Delete(tok.AccessorID, wo)
		_, _ = tg.api.ACLPolicies().Delete(name, wo)
	})
	return tok.SecretID
}

// denied checks a 403 answer with Nomad's plain-text reason.
func denied(t *testing.T, what string, r rawResponse, text string) {
	t.Helper()
	if r.status != 403 || string(r.body) != text || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
		t.Errorf("%s: %d %q (%s), want 403 %q as plain text", what, r.status, r.body, r.header.Get("Content-Type"), text)
	}
}

func TestACLs(t *testing.T) {
	forEachTarget(t, targetOptions{acls: true}, func(t *testing.T, tg *target) {
		denied(t, "list jobs without a token", tg.do(t, "GET", "/v1/jobs", "", nil), "Permission denied")
		// An unknown token is denied like no token (checked on a real Nomad 2.0 agent).
		unknown := "00000000-0000-0000-0000-000000000001"
		denied(t, "list jobs with an unknown token", tg.do(t, "GET", "/v1/jobs", unknown, nil), "Permission denied")
		denied(t, "token self with an unknown token", tg.do(t, "GET", "/v1/acl/token/self", unknown, nil), "Permission denied")

		self := tg.do(t, "GET", "/v1/acl/token/self", tg.token, nil)
		var tok api.ACLToken
		if err := json.Unmarshal(self.body, &tok); err != nil || self.status != 200 {
			t.Fatalf("token self: %d %.200q (%v)", self.status, self.body, err)
		}
		if tok.Type != "management" || tok.SecretID != tg.token || tok.AccessorID == "" || self.header.Get("X-Nomad-Index") == "" {
			t.Errorf("token self: Type %q AccessorID %q, SecretID matches %v, X-Nomad-Index %q", tok.Type, tok.AccessorID, tok.SecretID == tg.token, self.header.Get("X-Nomad-Index"))
		}

		// A reader may read but not restart allocations nor write variables.
		id := tg.id("acl")
		stub := tg.runSleepJob(t, id, 1)[0]
		reader := tg.createToken(t, tg.id("reader"), readerRules)
		if r := tg.do(t, "GET", "/v1/job/"+id, reader, nil); r.status != 200 {
			t.Errorf("reader reads the job: %d %q, want 200", r.status, r.body)
		}
		denied(t, "reader restarts an allocation", tg.do(t, "PUT", "/v1/client/allocation/"+stub.ID+"/restart", reader, strings.NewReader(`{"TaskName":""}`)), "Permission denied")
		path := "nomad-restart/" + tg.id("acl")
		denied(t, "reader writes a variable", tg.do(t, "PUT", "/v1/var/"+path, reader, strings.NewReader(varBody(path, map[string]string{"a": "b"}, ""))), "Permission denied")

		rt := tg.do(t, "GET", "/v1/acl/token/self", reader, nil)
		var rtok api.ACLToken
		if err := json.Unmarshal(rt.body, &rtok); err != nil || rt.status != 200 || rtok.Type != "client" || len(rtok.Policies) != 1 {
			t.Errorf("reader's token self: %d %.300q", rt.status, rt.body)
		}
	})
}
