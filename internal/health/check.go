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
	// Time is when the check ran, on Nomad's clock: Nomad stamps its results to the whole
	// second; zero for Consul, whose statuses carry no time.
	Time time.Time
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

// judged is an observed check with the verdict on its own status.
type judged struct {
	Check
	// spec is the definition the check matched; nil for a check the job does not define
	// (a sidecar's, say), which counts with on_update require_healthy.
	spec *CheckSpec
	ok   bool
	why  string
}

// anyAge reports whether how old the check's status is does not matter: a Consul check with
// on_update = "ignore" lets health through whatever it shows, and a Nomad readiness check
// whatever it shows once it has run (a result of either status lets it through; pending,
// which holds health back, only comes before the first run).
func (j judged) anyAge() bool {
	if j.spec != nil && j.spec.OnUpdate == OnUpdateIgnore {
		return true
	}
	return j.Provider == ProviderNomad && j.Mode == ModeReadiness
}

// match matches the provider's observed checks to the specs and judges each by its own
// status. Every spec must be matched by an observation (a check not registered yet is not
// passing): missing lists those that are not. Observed checks without a spec (sidecar
// checks, say) count with on_update require_healthy.
func match(p Provider, specs []CheckSpec, observed []Check) (checks []judged, missing []string) {
	used := make([]bool, len(observed))
	specOf := make([]*CheckSpec, len(observed))
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
	take := func(s *CheckSpec, loose bool) bool {
		if !loose {
			k := key{s.Service, s.Name}
			idx := byName[k]
			for len(idx) > 0 && used[idx[0]] {
				idx = idx[1:]
			}
			byName[k] = idx
			if len(idx) == 0 {
				return false
			}
			used[idx[0]], specOf[idx[0]] = true, s
			return true
		}
		for i, c := range observed {
			if !used[i] && c.Provider == p && (Unresolved(s.Service) || c.Service == s.Service) {
				used[i], specOf[i] = true, s
				return true
			}
		}
		return false
	}
	var pending []*CheckSpec
	// Exact matches first, so that a check whose name could not be interpolated only
	// takes what no exactly named check claims.
	for i := range specs {
		s := &specs[i]
		if s.Provider != p {
			continue
		}
		if Unresolved(s.Name) || Unresolved(s.Service) || !take(s, false) {
			pending = append(pending, s)
		}
	}
	for _, s := range pending {
		if (Unresolved(s.Name) || Unresolved(s.Service)) && take(s, true) {
			continue
		}
		missing = append(missing, fmt.Sprintf("check %s (%s) not registered", s.Name, p))
	}
	for i, c := range observed {
		if c.Provider != p {
			continue
		}
		onUpdate := OnUpdateRequireHealthy
		if specOf[i] != nil {
			onUpdate = specOf[i].OnUpdate
		}
		ok, why := counts(c, onUpdate)
		checks = append(checks, judged{Check: c, spec: specOf[i], ok: ok, why: why})
	}
	return checks, missing
}
