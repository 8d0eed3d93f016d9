package cli

import (
	"strconv"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// FuzzGateFlags reads any -gate and gate options, as `run` does: no panic or hang; a
// refusal is one line naming an option that was given and its value as given (for a
// refusal of several options together, one of them); accepted options record the gates as
// given with a policy the gates can run.
func FuzzGateFlags(f *testing.F) {
	f.Add(batchErrors, "0s", "10s", "3", "0", "4", "fail")
	f.Add(batchErrors, "3s", "1s", "2", "0", "4", "pass")
	f.Add("errors: up", "0s", "10s", "3", "0", "4", "fail")
	f.Add("x: up < 1", "-1s", "10s", "3", "0", "4", "fail")
	f.Add("x: up < 1", "0s", "0s", "3", "0", "4", "fail")
	f.Add("x: up < 1", "0s", "10s", "0", "0", "4", "fail")
	f.Add("x: up < 1", "0s", "10s", "3", "3", "4", "fail")
	f.Add("x: up < 1", "0s", "0", "1", "0", "0", "ignore")
	f.Add("x: up < 1", "10", "10s", "x", "-1", "1e3", "Pass")
	f.Fuzz(func(t *testing.T, spec, delay, interval, count, failureLimit, errorLimit, noData string) {
		g := gateFlags{gates: stringsFlag{spec}, delay: delay, interval: interval, count: count,
			failureLimit: failureLimit, errorLimit: errorLimit, noData: noData}
		given := map[string]string{"-gate": spec, "-gate-delay": delay, "-gate-interval": interval, "-gate-count": count,
			"-gate-failure-limit": failureLimit, "-gate-error-limit": errorLimit, "-gate-no-data": noData}
		raw := runFlagValues{gates: g}
		set := map[string]bool{"gate": true, "gate-delay": true, "gate-interval": true, "gate-count": true,
			"gate-failure-limit": true, "gate-error-limit": true, "gate-no-data": true}
		fuzztest.Bound(t, "the gate flags", func() {
			res, err := raw.options(set).Resolve(restart.Detached)
			s := res.Spec
			what := "gate flags " + strconv.Quote(strings.Join([]string{spec, delay, interval, count, failureLimit, errorLimit, noData}, " | "))
			if err != nil {
				fuzztest.OneLine(t, what, err)
				if !namesAnOption(err.Error(), given) {
					t.Errorf("%s: the error %q names no option with its value", what, err)
				}
				return
			}
			if s.Gates == nil || len(s.Gates.Specs) != 1 || s.Gates.Specs[0] != strings.TrimSpace(spec) {
				t.Errorf("%s: recorded the gates %+v", what, s.Gates)
				return
			}
			if err := s.Gates.Policy.Validate(); err != nil {
				t.Errorf("%s: accepted the policy %+v: %v", what, s.Gates.Policy, err)
			}
		})
	})
}

// namesAnOption reports whether msg names one of the given options and its value (as
// written, or as Go quotes it, or, for a number, as the policy reads it).
func namesAnOption(msg string, given map[string]string) bool {
	for flag, value := range given {
		if !strings.Contains(msg, flag) {
			continue
		}
		v := strings.TrimSpace(value)
		if strings.Contains(msg, value) || strings.Contains(msg, strconv.Quote(value)) || (v != "" && strings.Contains(msg, v)) {
			return true
		}
		if flag == "-gate" && strings.Contains(msg, "gate \"") {
			return true // a -gate refusal names the gate by its name
		}
	}
	return false
}
