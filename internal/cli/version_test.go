package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/buildinfo"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// TestVersionTextIsNomads lays a release out as `nomad version` lays out Nomad's:
// "Nomad v1.9.3", "BuildDate <RFC 3339>", "Revision <sha>", then the Go and Nomad API
// module versions.
func TestVersionTextIsNomads(t *testing.T) {
	release := buildinfo.Info{
		Version: "v1.2.3", Release: true, Revision: "0123456789abcdef0123456789abcdef01234567",
		BuildDate: time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC), GoVersion: "go1.26.8",
		NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a",
	}
	want := "nomad-restart v1.2.3\n" +
		"BuildDate 2026-12-01T08:30:00Z\n" +
		"Revision 0123456789abcdef0123456789abcdef01234567\n" +
		"GoVersion go1.26.8\n" +
		"NomadAPIVersion v0.0.0-20261016150620-df630b26e78a\n"
	if got := versionText(release); got != want {
		t.Errorf("release:\n%s\nwant:\n%s", got, want)
	}
}

// TestVersionTextOfADevelopmentBuild says it is not a release, with what the toolchain
// knew of the checkout, and leaves out what is unknown.
func TestVersionTextOfADevelopmentBuild(t *testing.T) {
	dev := buildinfo.Info{Version: buildinfo.Dev, Revision: "4ccd94c9d6e0", Modified: true, GoVersion: "go1.26.8"}
	want := "nomad-restart dev (a development build, not a release)\n" +
		"Revision 4ccd94c9d6e0 (with changes not committed)\n" +
		"GoVersion go1.26.8\n"
	if got := versionText(dev); got != want {
		t.Errorf("development build:\n%s\nwant:\n%s", got, want)
	}
}

// TestVersionCommand runs `version`, `-version` and `version -json` as a user would: a
// test binary is a development build, and the JSON says the same as the text.
func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"-version"}, {"--version"}} {
		code, out, errOut := runCLI(args...)
		if code != 0 || !strings.HasPrefix(out, "nomad-restart dev (a development build, not a release)\n") || !strings.Contains(out, "\nGoVersion go") {
			t.Errorf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
	}

	code, out, errOut := runCLI("-version", "-json")
	if code != 0 {
		t.Fatalf("-version -json: exit %d\n%s%s", code, out, errOut)
	}
	var got versionOutput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-version -json: %v\n%s", err, out)
	}
	if got.Version != buildinfo.Dev || got.Release || !strings.HasPrefix(got.GoVersion, "go") {
		t.Errorf("-version -json: %+v", got)
	}

	code, out, _ = runCLI("version", "-help")
	if code != 0 || !strings.Contains(out, "Usage: nomad-restart version [-json]") {
		t.Errorf("version -help: exit %d\n%s", code, out)
	}
	code, _, errOut = runCLI("version", "-jsn")
	if code != 1 || !strings.Contains(errOut, "unknown option -jsn") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("version -jsn: exit %d, stderr %q; want exit 1 and one line naming the option", code, errOut)
	}
}

// runCLI runs the command line in-process, off a terminal, with an empty environment.
func runCLI(args ...string) (code int, out, errOut string) {
	var o, e simtest.SyncBuffer
	a := newApp(strings.NewReader(""), &o, &e, func(string) string { return "" })
	code = a.run(context.Background(), args)
	return code, o.String(), e.String()
}
