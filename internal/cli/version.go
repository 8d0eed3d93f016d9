package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/buildinfo"
	"github.com/nomad-restart/nomad-restart/internal/cli/output"
)

// versionOutput is `version -json`.
type versionOutput struct {
	Version         string
	Release         bool
	Revision        string
	Modified        bool
	BuildDate       string // RFC 3339, "" when unknown
	GoVersion       string
	NomadAPIVersion string
}

// versionCommand is `nomad-restart version`.
type versionCommand struct{}

func (versionCommand) Run(_ context.Context, a *app, args []string) error {
	fs := newFlagSet("version")
	var jsonOut bool
	fs.BoolVar(&jsonOut, "json", false, "")
	if err := parseFlags(fs, "version", args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("version takes no arguments; run `nomad-restart version` (or `nomad-restart version -json`)")
	}
	info := buildinfo.Read()
	if jsonOut {
		out := versionOutput{
			Version: info.Version, Release: info.Release, Revision: info.Revision, Modified: info.Modified,
			GoVersion: info.GoVersion, NomadAPIVersion: info.NomadAPIVersion,
		}
		if !info.BuildDate.IsZero() {
			out.BuildDate = info.BuildDate.Format(time.RFC3339)
		}
		return output.WriteJSON(a.stdout, out)
	}
	fmt.Fprint(a.stdout, versionText(info))
	return nil
}

// Help is `nomad-restart version -help`.
func (versionCommand) Help() string {
	return `Usage: nomad-restart version [-json]

  Print the version of nomad-restart, as "nomad version" prints Nomad's: the
  version, the date of the commit it was built from and its revision, then
  the Go toolchain and the version of Nomad's API module it was built with.
  A development build (not from a release) says "dev" and, when the toolchain
  recorded them, the revision and date of the checkout it was built from.
  "nomad-restart -version" is the same.

  -json    Print the same as one JSON object.
`
}

func (versionCommand) Synopsis() string { return "Print the version" }

// versionText lays info out as Nomad's `nomad version` does ("Nomad v1.9.3", then
// "BuildDate <RFC 3339>" and "Revision <sha>" when known), with the Go toolchain and the
// Nomad API module after them.
func versionText(info buildinfo.Info) string {
	var b strings.Builder
	if info.Release {
		fmt.Fprintf(&b, "nomad-restart %s\n", info.Version)
	} else {
		fmt.Fprintf(&b, "nomad-restart %s (a development build, not a release)\n", info.Version)
	}
	if !info.BuildDate.IsZero() {
		fmt.Fprintf(&b, "BuildDate %s\n", info.BuildDate.Format(time.RFC3339))
	}
	if info.Revision != "" {
		rev := info.Revision
		if info.Modified {
			rev += " (with changes not committed)"
		}
		fmt.Fprintf(&b, "Revision %s\n", rev)
	}
	fmt.Fprintf(&b, "GoVersion %s\n", info.GoVersion)
	if info.NomadAPIVersion != "" {
		fmt.Fprintf(&b, "NomadAPIVersion %s\n", info.NomadAPIVersion)
	}
	return b.String()
}
