package acl

import (
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
)

func TestParseRejects(t *testing.T) {
	tests := []struct {
		name, rules, wantErr string
	}{
		{"empty document", `# nothing`, "Invalid policy"},
		{"bad namespace policy", `namespace "default" { policy = "admin" }`, "Invalid namespace policy"},
		{"bad capability", `namespace "default" { capabilities = ["fly"] }`, "Invalid namespace capability 'fly'"},
		{"bad namespace name", `namespace "a b" { policy = "read" }`, "Invalid namespace name"},
		{"variables without paths", `namespace "default" { variables {} }`, "Invalid variable policy: no variable paths in namespace default"},
		{"bad variable capability", `namespace "default" { variables { path "a" { capabilities = ["own"] } } }`, "Invalid variable capability 'own' in namespace default"},
		{"leading slash", `namespace "default" { variables { path "/a" { capabilities = ["read"] } } }`, "cannot start with a leading '/'"},
		{"bad node policy", `node { policy = "all" }`, "Invalid node policy"},
		{"syntax", `namespace "default" {`, "Failed to parse ACL Policy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.rules)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// tokenWith builds a client token holding the given policies.
func tokenWith(t *testing.T, rules ...string) *Token {
	t.Helper()
	a := New(true, index.New(0))
	names := map[string]string{}
	for i, r := range rules {
		names[string(rune('a'+i))] = r
	}
	secret, err := a.CreateToken("t", names)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := a.Resolve(secret)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestNamespaceDecisions(t *testing.T) {
	tok := tokenWith(t,
		`namespace "default" { policy = "read" }
		 namespace "prod" { policy = "write" }
		 namespace "ops" { capabilities = ["alloc-lifecycle", "read-job"] }
		 namespace "team-*" { policy = "read" }
		 namespace "team-secret" { policy = "deny" }
		 node { policy = "read" }`,
		// A second policy cannot lift a deny, and adds to what it grants.
		`namespace "team-secret" { policy = "write" }
		 namespace "default" { capabilities = ["submit-job"] }`,
	)
	tests := []struct {
		ns, capability string
		want           bool
	}{
		{"default", "read-job", true},
		{"default", "list-jobs", true},
		{"default", "read", true},
		{"default", "submit-job", true},
		{"default", "alloc-lifecycle", false},
		{"default", "write", false},
		{"prod", "alloc-lifecycle", true},
		{"prod", "dispatch-job", true},
		{"prod", "write", true},
		{"prod", "register-job", false},
		{"ops", "alloc-lifecycle", true},
		{"ops", "list-jobs", false},
		{"team-a", "read-job", true},
		{"team-a", "submit-job", false},
		{"team-secret", "read-job", false},
		{"elsewhere", "read-job", false},
		{"*", "alloc-lifecycle", true},
		{"*", "purge-job", false},
	}
	for _, tc := range tests {
		if got := tok.AllowNamespace(tc.ns, tc.capability); got != tc.want {
			t.Errorf("AllowNamespace(%q, %q) = %v, want %v", tc.ns, tc.capability, got, tc.want)
		}
	}
	if !tok.AllowNode("read") || tok.AllowNode("write") || tok.AllowAgent("read") {
		t.Errorf("node and agent rules")
	}
	if tok.Management() {
		t.Errorf("a client token is not management")
	}
}

func TestVariableDecisions(t *testing.T) {
	tok := tokenWith(t, `
namespace "default" {
  variables {
    path "nomad-restart/*" { capabilities = ["read"] }
    path "nomad-restart/web/*" { capabilities = ["write", "read"] }
    path "nomad-restart/web/secret" { capabilities = ["deny"] }
    path "exact" { capabilities = ["list"] }
  }
}
namespace "prod-*" {
  variables {
    path "*" { capabilities = ["destroy"] }
  }
}`)
	tests := []struct {
		ns, path, op string
		want         bool
	}{
		{"default", "nomad-restart/a", "read", true},
		{"default", "nomad-restart/a", "list", true}, // read implies list
		{"default", "nomad-restart/a", "write", false},
		{"default", "nomad-restart/web/a", "write", true}, // the closest glob wins
		{"default", "nomad-restart/web/secret", "read", false},
		{"default", "exact", "list", true},
		{"default", "exact", "read", false},
		{"default", "exactly", "list", false},
		{"default", "other", "read", false},
		{"prod-eu", "anything/here", "destroy", true},
		{"prod-eu", "anything/here", "read", false},
		{"prod", "anything", "destroy", false},
	}
	for _, tc := range tests {
		if got := tok.AllowVariable(tc.ns, tc.path, tc.op); got != tc.want {
			t.Errorf("AllowVariable(%q, %q, %q) = %v, want %v", tc.ns, tc.path, tc.op, got, tc.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, subj string
		want          bool
	}{
		{"*", "anything", true},
		{"a*", "abc", true},
		{"a*", "ba", false},
		{"*c", "abc", true},
		{"a*c", "abxc", true},
		{"a*c", "abxd", false},
		{"a*b*c", "a1b2c", true},
		{"abc", "abc", true},
		{"abc", "abcd", false},
		{"", "", true},
		{"", "x", false},
	}
	for _, tc := range tests {
		if got := globMatch(tc.pattern, tc.subj); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.subj, got, tc.want)
		}
	}
}

func TestResolve(t *testing.T) {
	off := New(false, index.New(0))
	tok, err := off.Resolve("whatever")
	if err != nil || !tok.Management() || tok.AccessorID != "acls-disabled" || !tok.AllowVariable("x", "y", "write") {
		t.Fatalf("disabled: %+v %v", tok, err)
	}

	on := New(true, index.New(0))
	if _, err := on.Resolve("00000000-0000-0000-0000-000000000000"); err == nil || err.Error() != "Permission denied" {
		t.Fatalf("unknown secret: %v", err)
	}
	anon, err := on.Resolve("")
	if err != nil || anon.AccessorID != "anonymous" || anon.AllowNamespace("default", "list-jobs") {
		t.Fatalf("anonymous without a policy: %+v %v", anon, err)
	}
	if err := on.UpsertPolicy(AnonymousPolicy, "", `namespace "default" { policy = "read" }`); err != nil {
		t.Fatal(err)
	}
	anon, _ = on.Resolve("")
	if !anon.AllowNamespace("default", "list-jobs") {
		t.Fatalf("the anonymous policy applies to requests without a token")
	}
	mgmt, err := on.Resolve(on.BootstrapSecret())
	if err != nil || !mgmt.Management() || mgmt.Name != "Bootstrap Token" {
		t.Fatalf("bootstrap: %+v %v", mgmt, err)
	}
	// Policies are read at resolution: a later change applies to the same token.
	secret, err := on.CreateToken("c", map[string]string{"p": `namespace "default" { policy = "read" }`})
	if err != nil {
		t.Fatal(err)
	}
	if tok, _ := on.Resolve(secret); tok.AllowNamespace("default", "alloc-lifecycle") {
		t.Fatalf("read policy allows alloc-lifecycle")
	}
	if err := on.UpsertPolicy("p", "", `namespace "default" { policy = "write" }`); err != nil {
		t.Fatal(err)
	}
	if tok, _ := on.Resolve(secret); !tok.AllowNamespace("default", "alloc-lifecycle") {
		t.Fatalf("updated policy not applied")
	}
}
