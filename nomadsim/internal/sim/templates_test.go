package sim

import (
	"slices"
	"strings"
	"testing"
)

// The reads a template's text names, as the sim finds them.
func TestTemplateReads(t *testing.T) {
	got := templateReads(`a {{ with nomadVar "nomad/jobs/web" }}{{ .x }}{{ end }} nomadVar "outside"
[[ nomadVar "not/an/action" ]] {{ range nomadVarList "cfg/" }}{{ end }}{{ nomadVarExists "/x@other.global" }}
{{ nomadVar (printf "nomad/jobs/%s" "web") }}{{ nomadVarListSafe `+"`all@*`"+` }}`, "{{", "}}", "ns")
	var s []string
	for _, r := range got {
		s = append(s, r.fn+" "+r.namespace+" "+r.path)
	}
	want := []string{"nomadVar ns nomad/jobs/web", "nomadVarList ns cfg/", "nomadVarExists other x", "nomadVarListSafe * all"}
	if !slices.Equal(s, want) {
		t.Errorf("reads\n%s\nwant\n%s", strings.Join(s, "\n"), strings.Join(want, "\n"))
	}
	if got := templateFile("web", "../alloc/x"); got != "alloc/x" {
		t.Errorf("../alloc/x: %q", got)
	}
	if got := templateFile("web", "../../x"); got != "" {
		t.Errorf("../../x: %q", got)
	}
}
