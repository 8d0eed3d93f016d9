// Package buildinfo says which build of nomad-restart is running: the release version,
// commit and date that a release build stamps in, and what the Go toolchain recorded (its
// version, the VCS state of a build from a checkout, the Nomad API module it was built
// with).
//
// A release build sets the three variables below with the linker (.goreleaser.yaml):
//
//	go build -ldflags "-X github.com/nomad-restart/nomad-restart/internal/buildinfo.version=1.2.3
//	  -X github.com/nomad-restart/nomad-restart/internal/buildinfo.commit=<sha>
//	  -X github.com/nomad-restart/nomad-restart/internal/buildinfo.date=<RFC 3339>
//	  -X github.com/nomad-restart/nomad-restart/internal/buildinfo.dirty=<true|false>"
//
// Any other build (go run, go build, go install) leaves them empty and is reported from
// runtime/debug.ReadBuildInfo alone. The package imports nothing of the project, so that
// the linker flags name a package that every command links and nothing else depends on.
package buildinfo

import (
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
)

// Set by the linker in release builds; see the package comment. They are variables, not
// constants, because -X can only set variables.
var (
	version string // "1.2.3", as the release's tag without its "v"
	commit  string // the full commit hash the release was built from
	date    string // the commit's time, RFC 3339, as Nomad's own BuildDate
	dirty   string // "true" when built from a checkout with changes not committed (a snapshot)
)

// NomadAPIModule is the module whose version Info reports as NomadAPIVersion: the client
// nomad-restart talks to Nomad with.
const NomadAPIModule = "github.com/hashicorp/nomad/api"

// Dev is the version a build without a release version reports.
const Dev = "dev"

// Info describes the running build.
type Info struct {
	// Version is the release version with its "v" ("v1.2.3"), or Dev.
	Version string
	// Release is true for a build made by the release process (stamped) or installed
	// with `go install ...@vX.Y.Z`; false for a development build.
	Release bool
	// Revision is the commit the build was made from, when known.
	Revision string
	// Modified is true when the build was made from a checkout with changes not
	// committed: Revision is then only where they started from.
	Modified bool
	// BuildDate is the time of that commit, as in Nomad's `nomad version`; zero when
	// unknown.
	BuildDate time.Time
	// GoVersion is the Go toolchain the binary was built with.
	GoVersion string
	// NomadAPIVersion is the version of github.com/hashicorp/nomad/api compiled in.
	NomadAPIVersion string
}

// Read returns the running binary's build information.
func Read() Info {
	bi, _ := debug.ReadBuildInfo() // nil when the binary has no module information
	return describe(stamp{version: version, commit: commit, date: date, dirty: dirty}, bi)
}

// stamp is what the linker set.
type stamp struct{ version, commit, date, dirty string }

// pseudoVersion matches the end of a Go pseudo-version (v0.0.0-20260101120000-abcdef123456):
// the version the toolchain gives a build from a commit that no release tag names.
var pseudoVersion = regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`)

// describe combines the stamped values and the toolchain's record; bi may be nil.
func describe(s stamp, bi *debug.BuildInfo) Info {
	info := Info{Version: Dev, GoVersion: runtime.Version()}
	vcs := map[string]string{}
	if bi != nil {
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
		for _, dep := range bi.Deps {
			if dep.Path == NomadAPIModule {
				info.NomadAPIVersion = dep.Version
				if dep.Replace != nil && dep.Replace.Version != "" {
					info.NomadAPIVersion = dep.Replace.Version
				}
			}
		}
		for _, setting := range bi.Settings {
			vcs[setting.Key] = setting.Value
		}
	}

	if s.version != "" {
		info.Version = "v" + strings.TrimPrefix(s.version, "v")
		info.Release = true
		info.Revision = s.commit
		info.Modified = s.dirty == "true"
		info.BuildDate = parseTime(s.date)
		return info
	}

	// `go install .../cmd/nomad-restart@v1.2.3` builds the module's tagged version:
	// a release, though the toolchain records neither its commit nor its date.
	if bi != nil && isReleaseVersion(bi.Main.Version) {
		info.Version = bi.Main.Version
		info.Release = true
	}
	// A build from a checkout: the toolchain's VCS stamping, unless -buildvcs=false.
	info.Revision = vcs["vcs.revision"]
	info.Modified = vcs["vcs.modified"] == "true"
	info.BuildDate = parseTime(vcs["vcs.time"])
	return info
}

// isReleaseVersion reports whether v, a main module's version as the toolchain records
// it, names a tagged release: not "(devel)", not a pseudo-version, not a dirty checkout.
func isReleaseVersion(v string) bool {
	if !strings.HasPrefix(v, "v") || strings.Contains(v, "+dirty") {
		return false
	}
	return !pseudoVersion.MatchString(strings.TrimSuffix(v, "+incompatible"))
}

// parseTime reads an RFC 3339 time, zero when s is empty or not one.
func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}
