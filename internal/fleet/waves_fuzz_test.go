package fleet

import (
	"slices"
	"strings"
	"testing"
)

// FuzzParseAfter parses any -after value and any nomad-restart.after meta value (both are
// typed by people, the meta by whoever may submit a job): no panic; a value taken names
// jobs without spaces, commas or colons, each once, and prints back to a value that parses
// to the same order.
func FuzzParseAfter(f *testing.F) {
	for _, s := range []string{"web: api, auth", "ns/web: db/db-proxy", "web:", "web: a,,b", "a/b/c: d", "web: api, api", "x: \x00", "é: ü", ":"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ups, err := ParseUpstreams(s); err == nil {
			checkNames(t, s, ups)
		}
		d, err := ParseAfter(s)
		if err != nil {
			if !strings.Contains(err.Error(), "-after") {
				t.Fatalf("ParseAfter(%q) error %q does not name -after", s, err)
			}
			return
		}
		checkNames(t, s, append([]string{d.Job}, d.Upstreams...))
		again, err := ParseAfter(d.String())
		if err != nil || again.Job != d.Job || !slices.Equal(again.Upstreams, d.Upstreams) {
			t.Fatalf("ParseAfter(%q) = %+v, printed %q, parsed back to %+v, %v", s, d, d.String(), again, err)
		}
	})
}

func checkNames(t *testing.T, s string, names []string) {
	t.Helper()
	if len(names) == 0 {
		t.Fatalf("%q parsed to no job", s)
	}
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, " \t\n\r,:\x00") {
			t.Fatalf("%q parsed to the name %q", s, n)
		}
	}
	if len(names) > 1 && slices.Contains(names[2:], names[1]) {
		t.Fatalf("%q parsed to %q twice", s, names[1])
	}
}
