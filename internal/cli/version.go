package cli

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
)

// Version is nomad-restart's release version.
const Version = "v0.1.0"

func (a *app) cmdVersion(_ context.Context, args []string) error {
	fs := newFlagSet("version")
	if err := parseFlags(fs, "version", args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("version takes no arguments; run `nomad-restart version`")
	}
	fmt.Fprintf(a.stdout, "nomad-restart %s (%s)\n", Version, revision())
	return nil
}

// revision is the VCS revision the binary was built from, as recorded by the Go toolchain
// ("unknown" when built without VCS stamping, e.g. -buildvcs=false).
func revision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev string
	var dirty bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return strings.TrimSpace(rev)
}
