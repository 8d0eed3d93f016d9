package cli

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/page"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// TestOneRestartWhoeverFilesIt files the same request through every entry point that takes
// a restart's options: run's flags (-detach, as the others are detached), a schedule
// (-every), a fleet (-jobs), the page's form (a repeatable option's values one a line of
// its text area), its JSON API (them as a list), and a job's meta (a fleet's child, a
// config-change rollout), and asserts the same resolved spec, or the same refusal.
func TestOneRestartWhoeverFilesIt(t *testing.T) {
	type option struct{ flag, value string }
	cases := []struct {
		name    string
		options []option
		refusal string // the reason every entry point gives; "" when accepted
	}{
		{"nothing given", nil, ""},
		{"every option", []option{{"batch-size", "25%"}, {"batch-wait", "10s"}, {"health", "checks"},
			{"healthy-deadline", "2m"}, {"min-healthy-time", "10s"}, {"max-unavailable", "2"},
			{"on-error", "fail"}, {"surge", "1"}, {"drain", "0"}}, ""},
		{"questions answered later", []option{{"batch-wait", "ask"}, {"on-error", "ask"}}, ""},
		{"batch size over 100%", []option{{"batch-size", "101%"}}, "a percentage must be at most 100%"},
		{"batch size zero", []option{{"batch-size", "0"}}, "it must be greater than zero"},
		{"batch wait too long", []option{{"batch-wait", "99999999999h"}}, "it is too long"},
		{"batch wait without a unit", []option{{"batch-wait", "10"}}, "give a duration with a unit"},
		{"empty health", []option{{"health", ""}}, `it is empty; valid options are "auto"`},
		{"blank batch size", []option{{"batch-size", " "}}, "it is empty; give a number of allocations"},
		{"empty filter", []option{{"filter", ""}}, "it is empty; give a filter expression"},
		{"unknown on-error", []option{{"on-error", "ignore"}}, `valid options are "ask" and "fail"`},
		{"min healthy time past the deadline", []option{{"min-healthy-time", "10m"}}, "it must be shorter than"},
		{"surge zero", []option{{"surge", "0"}}, "1 or more"},
		{"drain too long", []option{{"drain", "1h"}}, "from 0 (no drain)"},
		{"drain until balancers drop the instance", []option{{"drain-until", "traefik=http://traefik:8080"},
			{"drain-until", `prometheus:sum(rate(http_requests_total{instance="{{address}}"}[30s])) == 0`},
			{"balancer-refresh", "traefik=5s"}, {"balancer-refresh", "fabio=1s"}}, ""},
		{"drain until an unknown balancer", []option{{"drain-until", "nginx=http://lb:80"}}, "give traefik=http://HOST:8080"},
		{"balancer refresh without a unit", []option{{"balancer-refresh", "traefik=5"}}, "give a duration from 0"},
		{"balancer refresh of an unknown balancer", []option{{"balancer-refresh", "nginx=5s"}}, "NAME one of traefik, fabio"},
	}
	// camel is a flag's name in the page's API.
	camel := func(flag string) string {
		var b strings.Builder
		for part := range strings.SplitSeq(flag, "-") {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
		return b.String()
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var flags []string
			body := map[string]string{"Job": "web"}
			meta := map[string]string{}
			lists := map[string][]string{} // the repeatable options' values
			inMeta := true                 // a job's meta has run's options but -filter, -group and the like
			for _, o := range tc.options {
				flags = append(flags, "-"+o.flag+"="+o.value)
				if o.flag == "drain-until" || o.flag == "balancer-refresh" {
					lists[o.flag] = append(lists[o.flag], o.value)
					o.value = strings.Join(lists[o.flag], "\n") // as the form and meta take them
				}
				body[camel(o.flag)] = o.value
				meta[onchange.MetaPrefix+o.flag] = o.value
				inMeta = inMeta && o.flag != "filter"
			}
			type outcome struct {
				spec restart.Spec
				err  string
			}
			got := map[string]outcome{}
			cli := func(name string, extra ...string) {
				args := append(append(extra, flags...), "web")
				if slices.Contains(extra, "-jobs") {
					args = args[:len(args)-1] // a fleet names no job
				}
				o, err := parseRunArgs(args, false)
				if err != nil {
					got[name] = outcome{err: err.Error()}
					return
				}
				got[name] = outcome{spec: o.spec}
			}
			cli("run -detach", "-detach")
			cli("run -every", "-every", "0 3 * * *")
			// A fleet's spec, made of the flags; its children take it as the jobs' meta
			// leaves it (below).
			cli("run -jobs -detach", "-detach", "-jobs", `Name == "web"`)

			listBody := map[string]any{}
			for k, v := range body {
				listBody[k] = v
			}
			for flag, values := range lists {
				listBody[camel(flag)] = values
			}
			for name, body := range map[string]any{"page form": body, "page API": listBody} {
				b, _ := json.Marshal(body)
				if req, err := page.NewRestart(strings.NewReader(string(b))); err != nil {
					got[name] = outcome{err: err.Error()}
				} else {
					got[name] = outcome{spec: req.Spec}
				}
			}

			base, err := restart.Options{}.Resolve(restart.Detached)
			if err != nil {
				t.Fatal(err)
			}
			spec, problems := onchange.JobOptions(base.Spec, meta)
			switch {
			case !inMeta:
			case len(problems) > 0:
				got["job meta"] = outcome{err: problems[0].String()}
			default:
				got["job meta"] = outcome{spec: spec}
			}

			want := got["run -detach"]
			for from, out := range got {
				if tc.refusal != "" {
					if !strings.Contains(out.err, tc.refusal) {
						t.Errorf("%s: err = %q, want it refused with %q", from, out.err, tc.refusal)
					}
					if strings.Contains(out.err, "\n") {
						t.Errorf("%s: err is not one line: %q", from, out.err)
					}
					continue
				}
				if out.err != "" {
					t.Errorf("%s: refused: %s", from, out.err)
					continue
				}
				if !reflect.DeepEqual(out.spec, want.spec) {
					t.Errorf("%s: spec = %+v\nrun -detach's    %+v", from, out.spec, want.spec)
				}
			}
		})
	}
}
