package engine

import "testing"

// TestGlobMatch holds globMatch to Nomad's matching of a job's datacenters against a node's
// (github.com/ryanuber/go-glob): "*" matches any run, nothing else is special.
func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"", "", true},
		{"", "dc1", false},
		{"*", "", true},
		{"*", "dc1", true},
		{"dc1", "dc1", true},
		{"dc1", "dc10", false},
		{"dc*", "dc1", true},
		{"dc*", "east", false},
		{"*1", "dc1", true},
		{"*1", "dc2", false},
		{"us-*-1", "us-east-1", true},
		{"us-*-1", "us-east-2", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"*b*", "abc", true},
		{"dc?", "dc1", false},
		{"dc[12]", "dc1", false},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}
