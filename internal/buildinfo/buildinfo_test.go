package buildinfo

import (
	"runtime/debug"
	"testing"
	"time"
)

// toolchainRecord is what the Go toolchain records for a build of the command without VCS
// information (-buildvcs=false, or go install of a module): the main module's version and
// the Nomad API module among the deps.
func toolchainRecord(mainVersion string) *debug.BuildInfo {
	return &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/nomad-restart/nomad-restart", Version: mainVersion},
		Deps: []*debug.Module{
			{Path: "github.com/hashicorp/consul/api", Version: "v1.34.5"},
			{Path: NomadAPIModule, Version: "v0.0.0-20261016150620-df630b26e78a"},
		},
	}
}

// checkoutRevision is the commit that checkoutRecord's build was made from.
const checkoutRevision = "4ccd94c9d6e0f1a2b3c4d5e6f708192a3b4c5d6e"

// checkoutRecord is what the toolchain records for a build from a checkout with changes:
// toolchainRecord and the VCS settings (commit checkoutRevision, of 2026-11-30 12:00 UTC).
func checkoutRecord(mainVersion string) *debug.BuildInfo {
	bi := toolchainRecord(mainVersion)
	bi.Settings = []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: checkoutRevision},
		{Key: "vcs.time", Value: "2026-11-30T12:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}
	return bi
}

func TestDescribe(t *testing.T) {
	commitTime := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name  string
		stamp stamp
		bi    *debug.BuildInfo
		want  Info
	}{
		{
			name:  "release build: the stamp wins over the toolchain's record",
			stamp: stamp{version: "1.2.3", commit: "0123456789abcdef0123456789abcdef01234567", date: "2026-12-01T09:30:00+01:00"},
			bi:    checkoutRecord("(devel)"),
			want: Info{
				Version: "v1.2.3", Release: true, Revision: "0123456789abcdef0123456789abcdef01234567",
				BuildDate: time.Date(2026, 12, 1, 8, 30, 0, 0, time.UTC), GoVersion: "go1.26.8",
				NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a",
			},
		},
		{
			name:  "snapshot from a checkout with changes",
			stamp: stamp{version: "0.0.0-snapshot-4ccd94c", commit: "4ccd94c9d6e0f1a2b3c4d5e6f708192a3b4c5d6e", date: "2026-11-30T12:00:00Z", dirty: "true"},
			bi:    toolchainRecord("(devel)"),
			want: Info{
				Version: "v0.0.0-snapshot-4ccd94c", Release: true, Revision: "4ccd94c9d6e0f1a2b3c4d5e6f708192a3b4c5d6e", Modified: true,
				BuildDate: commitTime, GoVersion: "go1.26.8", NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a",
			},
		},
		{
			name:  "a stamped version given with its v keeps one",
			stamp: stamp{version: "v1.2.3"},
			bi:    toolchainRecord("(devel)"),
			want:  Info{Version: "v1.2.3", Release: true, GoVersion: "go1.26.8", NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a"},
		},
		{
			name: "development build from a checkout: dev, with the checkout's revision",
			bi:   checkoutRecord("(devel)"),
			want: Info{
				Version: Dev, Revision: checkoutRevision, Modified: true, BuildDate: commitTime,
				GoVersion: "go1.26.8", NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a",
			},
		},
		{
			name: "development build whose version the toolchain derived from the checkout",
			bi:   checkoutRecord("v0.1.1-0.20261130120000-4ccd94c9d6e0+dirty"),
			want: Info{
				Version: Dev, Revision: checkoutRevision, Modified: true, BuildDate: commitTime,
				GoVersion: "go1.26.8", NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a",
			},
		},
		{
			name: "go install of a pseudo-version is not a release",
			bi:   toolchainRecord("v0.0.0-20261130120000-4ccd94c9d6e0"),
			want: Info{Version: Dev, GoVersion: "go1.26.8", NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a"},
		},
		{
			name: "go install ...@v1.4.0 is that release",
			bi:   toolchainRecord("v1.4.0"),
			want: Info{Version: "v1.4.0", Release: true, GoVersion: "go1.26.8", NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a"},
		},
		{
			name: "built with -buildvcs=false: dev and nothing more",
			bi:   toolchainRecord("(devel)"),
			want: Info{Version: Dev, GoVersion: "go1.26.8", NomadAPIVersion: "v0.0.0-20261016150620-df630b26e78a"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := describe(tc.stamp, tc.bi)
			if got != tc.want {
				t.Errorf("describe:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestDescribeReplacedNomadAPI reports the version a replace directive put in, which is
// what was compiled.
func TestDescribeReplacedNomadAPI(t *testing.T) {
	bi := toolchainRecord("(devel)")
	bi.Deps[1].Replace = &debug.Module{Path: NomadAPIModule, Version: "v0.0.0-20270101000000-aaaaaaaaaaaa"}
	if got := describe(stamp{}, bi).NomadAPIVersion; got != "v0.0.0-20270101000000-aaaaaaaaaaaa" {
		t.Errorf("NomadAPIVersion %q, want the replacement's version", got)
	}
}

// TestDescribeWithoutModuleInfo covers a binary without module information: still an
// answer, with the running Go version.
func TestDescribeWithoutModuleInfo(t *testing.T) {
	got := describe(stamp{}, nil)
	if got.Version != Dev || got.Release || got.GoVersion == "" || got.NomadAPIVersion != "" {
		t.Errorf("describe without build info: %+v", got)
	}
}

// TestReadInTestBinary reads the test binary's own record: it links the Nomad API module
// only if this package imports it (it does not), but the Go version is always known.
func TestReadInTestBinary(t *testing.T) {
	got := Read()
	if got.Release {
		t.Errorf("a test binary is not a release build: %+v", got)
	}
	if got.Version != Dev || got.GoVersion == "" {
		t.Errorf("Read in a test binary: %+v", got)
	}
}
