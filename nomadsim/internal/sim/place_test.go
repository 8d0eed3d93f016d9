package sim

import "testing"

// TestDatacenterGlob holds the placement's datacenter match to Nomad's
// (structs.Node.IsInAnyDC with github.com/ryanuber/go-glob): "*" matches any run of
// characters and nothing else is special, unlike a shell pattern.
func TestDatacenterGlob(t *testing.T) {
	for _, tc := range []struct {
		dcs  []string
		dc   string
		want bool
	}{
		{[]string{"*"}, "dc1", true},
		{[]string{"dc1"}, "dc1", true},
		{[]string{"dc1"}, "dc10", false},
		{[]string{"dc*"}, "dc10", true},
		{[]string{"us-*-1"}, "us-east-1", true},
		{[]string{"east", "*2"}, "dc2", true},
		{[]string{"dc?"}, "dc1", false},
		{[]string{"dc[12]"}, "dc1", false},
	} {
		if got := dcMatch(tc.dcs, tc.dc); got != tc.want {
			t.Errorf("dcMatch(%q, %q) = %v, want %v", tc.dcs, tc.dc, got, tc.want)
		}
	}
}
