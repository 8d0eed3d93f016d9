package variables

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/testhttp"
)

const readerRules = `
namespace "default" {
  policy = "read"
  variables {
    path "nomad-restart/*" { capabilities = ["read"] }
    path "team/*" { capabilities = ["write", "list", "read", "destroy"] }
  }
}`

func TestVariablesHonourACLs(t *testing.T) {
	e := newEnv(t, true)
	put(t, e.client, "default", "nomad-restart/x")
	put(t, e.client, "default", "team/y")
	put(t, e.client, "default", "secret/z")
	reader, err := e.acl.CreateToken("reader", map[string]string{"reader": readerRules})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, body, token string
		wantStatus                      int
	}{
		{"no token read", "GET", "/v1/var/nomad-restart/x", "", "", 403},
		{"unknown token", "GET", "/v1/var/nomad-restart/x", "", "00000000-0000-0000-0000-000000000000", 403},
		{"reader reads", "GET", "/v1/var/nomad-restart/x", "", reader, 200},
		{"reader denied elsewhere", "GET", "/v1/var/secret/z", "", reader, 403},
		{"reader write denied", "PUT", "/v1/var/nomad-restart/x", `{"Items":{"a":"b"}}`, reader, 403},
		{"reader lock denied", "PUT", "/v1/var/nomad-restart/x?lock-acquire", `{}`, reader, 403},
		{"reader delete denied", "DELETE", "/v1/var/nomad-restart/x", "", reader, 403},
		{"team write", "PUT", "/v1/var/team/y", `{"Items":{"a":"b"}}`, reader, 200},
		{"team delete", "DELETE", "/v1/var/team/y", "", reader, 204},
		{"management", "PUT", "/v1/var/secret/z", `{"Items":{"a":"b"}}`, e.acl.BootstrapSecret(), 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := e.do(t, tc.method, tc.path, tc.body, tc.token)
			if raw.status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", raw.status, tc.wantStatus, raw.body)
			}
			if tc.wantStatus == 403 && raw.body != "Permission denied" {
				t.Fatalf("403 body %q", raw.body)
			}
			if tc.wantStatus == 403 && tc.method == "PUT" && raw.header.Get("X-Nomad-Index") != "0" {
				t.Fatalf("denied write index %q, want 0 as Nomad sends", raw.header.Get("X-Nomad-Index"))
			}
		})
	}

	rc := testhttp.NomadClient(t, e.srv.URL, reader)
	list, _, err := rc.Variables().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, m := range list {
		paths = append(paths, m.Path)
	}
	if strings.Join(paths, ",") != "nomad-restart/x" {
		t.Fatalf("reader lists only what it may: %v", paths)
	}

	// A conflict a caller may not read shows only the metadata.
	writer, err := e.acl.CreateToken("writer", map[string]string{"writer": `namespace "default" { variables { path "w/*" { capabilities = ["write"] } } }`})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.client.Variables().Create(&api.Variable{Path: "w/v", Items: api.VariableItems{"secret": "s"}}, nil); err != nil {
		t.Fatal(err)
	}
	raw := e.do(t, "PUT", "/v1/var/w/v?cas=0", `{"Items":{"a":"b"}}`, writer)
	if raw.status != http.StatusConflict || strings.Contains(raw.body, "secret") || !strings.Contains(raw.body, `"ModifyIndex":`) {
		t.Fatalf("redacted conflict: %d %s", raw.status, raw.body)
	}
}

func TestLockHiddenFromNonManagementReads(t *testing.T) {
	e := newEnv(t, true)
	rules := `namespace "default" { variables { path "*" { capabilities = ["write", "read"] } } }`
	tok, err := e.acl.CreateToken("rw", map[string]string{"rw": rules})
	if err != nil {
		t.Fatal(err)
	}
	raw := e.do(t, "PUT", "/v1/var/l/x?lock-acquire", `{"Items":{"a":"b"}}`, tok)
	if raw.status != 200 || decodeVar(t, raw.body).Lock == nil {
		t.Fatalf("acquire: %d %s", raw.status, raw.body)
	}
	if v := decodeVar(t, e.do(t, "GET", "/v1/var/l/x", "", tok).body); v.Lock != nil {
		t.Fatalf("client token sees the lock: %+v", v)
	}
	if v := decodeVar(t, e.do(t, "GET", "/v1/var/l/x", "", e.acl.BootstrapSecret()).body); v.Lock == nil {
		t.Fatalf("management token should see the lock")
	}
}
