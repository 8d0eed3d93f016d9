package health

import (
	"fmt"
	"strings"
	"time"
)

// Check statuses as the providers report them.
const (
	NomadSuccess   = "success"
	NomadFailure   = "failure"
	NomadPending   = "pending"
	ConsulPassing  = "passing"
	ConsulWarning  = "warning"
	ConsulCritical = "critical"
	// Nomad-native check modes.
	ModeHealthiness = "healthiness"
	ModeReadiness   = "readiness"
)

// Check is one observed result of a check of the allocation.
type Check struct {
	Provider Provider
	ID       string
	Name     string
	Service  string
	Task     string // empty for group services, or where the source cannot tell
	// Status is success|failure|pending for Nomad, passing|warning|critical for Consul.
	Status string
	// Mode is Nomad's healthiness|readiness; empty for Consul checks.
	Mode   string
	Output string
}

// Snapshot is what a source read of one allocation's checks of one provider.
type Snapshot struct {
	Provider Provider
	AllocID  string
	// At is when the results were read, on Nomad's clock.
	At     time.Time
	Checks []Check
	// Err is set when the source could not read the checks; the gate then treats the
	// provider's checks as unknown (never as passing).
	Err error
}

// counts reports whether an observed check blocks health, by Nomad's rules, and why.
// onUpdate is the on_update of the check's definition (require_healthy when unknown).
func counts(c Check, onUpdate string) (ok bool, why string) {
	switch c.Provider {
	case ProviderNomad:
		switch c.Status {
		case NomadSuccess:
			return true, ""
		case NomadFailure:
			mode := c.Mode
			if mode == "" && onUpdate == OnUpdateIgnore {
				mode = ModeReadiness
			}
			// Readiness checks (on_update = "ignore") never hold health back by failing.
			if mode == ModeReadiness {
				return true, ""
			}
		}
		// Pending counts as not passing, in either mode, as in Nomad's tracker.
	case ProviderConsul:
		switch c.Status {
		case ConsulPassing:
			return true, ""
		case ConsulWarning:
			if onUpdate == OnUpdateIgnoreWarnings || onUpdate == OnUpdateIgnore {
				return true, ""
			}
		case ConsulCritical:
			if onUpdate == OnUpdateIgnore {
				return true, ""
			}
		}
		// Any other status (a service in maintenance, say) holds health back: Nomad
		// would let it pass, but the gate never guesses.
	}
	return false, describe(c)
}

// describe is the operator's line for a check that holds health back:
// `check http (consul) critical: connection refused`.
func describe(c Check) string {
	s := fmt.Sprintf("check %s (%s) %s", c.Name, c.Provider, orUnknown(c.Status))
	if out := firstLine(c.Output); out != "" {
		s += ": " + out
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "status unknown"
	}
	return s
}

// firstLine keeps check output to one short line: outputs can be whole HTTP bodies.
func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	const max = 160
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// evaluate matches the provider's observed checks to the specs and reports whether all of
// them let health through, with the reasons of those that do not. Every spec must be
// matched by an observation (a check not registered yet is not passing); observed checks
// without a spec (sidecar checks, say) count with on_update require_healthy.
func evaluate(p Provider, specs []CheckSpec, observed []Check) (ok bool, reasons []string) {
	used := make([]bool, len(observed))
	onUpdate := make([]string, len(observed))
	// byName holds, per service and check name, the indexes of the observed checks not yet
	// matched (check names need not be unique, as Nomad counts them).
	type key struct{ service, name string }
	byName := map[key][]int{}
	for i, c := range observed {
		if c.Provider == p {
			k := key{c.Service, c.Name}
			byName[k] = append(byName[k], i)
		}
	}
	match := func(s CheckSpec, loose bool) int {
		if !loose {
			k := key{s.Service, s.Name}
			if idx := byName[k]; len(idx) > 0 {
				byName[k] = idx[1:]
				return idx[0]
			}
			return -1
		}
		for i, c := range observed {
			if !used[i] && c.Provider == p && (Unresolved(s.Service) || c.Service == s.Service) {
				return i
			}
		}
		return -1
	}
	var pending []CheckSpec
	var mine []CheckSpec
	for _, s := range specs {
		if s.Provider == p {
			mine = append(mine, s)
		}
	}
	// Exact matches first, so that a check whose name could not be interpolated only
	// takes what no exactly named check claims.
	for _, s := range mine {
		if Unresolved(s.Name) || Unresolved(s.Service) {
			pending = append(pending, s)
			continue
		}
		if i := match(s, false); i >= 0 {
			used[i], onUpdate[i] = true, s.OnUpdate
			continue
		}
		pending = append(pending, s)
	}
	ok = true
	for _, s := range pending {
		if Unresolved(s.Name) || Unresolved(s.Service) {
			if i := match(s, true); i >= 0 {
				used[i], onUpdate[i] = true, s.OnUpdate
				continue
			}
		}
		ok = false
		reasons = append(reasons, fmt.Sprintf("check %s (%s) not registered", s.Name, p))
	}
	for i, c := range observed {
		if c.Provider != p {
			continue
		}
		u := onUpdate[i]
		if !used[i] {
			u = OnUpdateRequireHealthy
		}
		if good, why := counts(c, u); !good {
			ok = false
			reasons = append(reasons, why)
		}
	}
	return ok, reasons
}
