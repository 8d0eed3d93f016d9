package health

import (
	"fmt"
	"strings"
)

// Mode is what a restart waits for before it counts an allocation done (-health).
type Mode string

const (
	// ModeAuto is ModeChecks where the targeted groups define checks, else ModeRunning.
	ModeAuto Mode = "auto"
	// ModeNone waits for nothing, as `nomad job restart` does (parity).
	ModeNone Mode = "none"
	// ModeRunning waits until the allocation runs and every targeted task runs again.
	ModeRunning Mode = "running"
	// ModeChecks is ModeRunning plus every check that counts passing.
	ModeChecks Mode = "checks"
)

// ParseMode reads a -health value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case ModeAuto, ModeNone, ModeRunning, ModeChecks:
		return m, nil
	case "":
		return ModeAuto, nil
	default:
		return "", fmt.Errorf("invalid health mode %q: choose auto, none, running or checks", s)
	}
}

// Provider is a service registration provider, whose checks are read from different places.
type Provider string

const (
	// ProviderNomad checks are read from Nomad's allocation checks endpoint.
	ProviderNomad Provider = "nomad"
	// ProviderConsul checks are read from Consul's health API.
	ProviderConsul Provider = "consul"
)
