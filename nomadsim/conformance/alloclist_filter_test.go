package conformance

import (
	"net/url"
	"reflect"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestAllocListFilter checks the filter of Nomad's allocations list (what -filter sends):
// Nomad applies it to the allocation of its state store, not to the stub it answers, so a
// field no allocation has (a typo) or one of the stub alone (JobVersion) fails the list with a
// 400 in plain text, while a clause before it that is false for every allocation (the job's
// own, as nomad-restart puts first) keeps the expression from reaching that field.
func TestAllocListFilter(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		job := tg.id("allocflt")
		running := tg.runSleepJob(t, job, 1)
		mine := `JobID == "` + job + `"`

		for _, c := range []struct {
			filter string
			want   []string
		}{
			{mine + ` and ClientStatus == "running"`, []string{running[0].ID}},
			{mine + ` and TaskStates.main.State == "running"`, []string{running[0].ID}},
			{mine + ` and TaskGroup == "nosuch"`, nil},
			{`JobID == "` + tg.id("nosuch") + `" and Nope == "x"`, nil},
		} {
			stubs, _, err := tg.api.Allocations().List((&api.QueryOptions{Filter: c.filter}).WithContext(tg.ctx(t)))
			if err != nil {
				t.Errorf("filter %q: %v", c.filter, err)
				continue
			}
			var ids []string
			for _, s := range stubs {
				ids = append(ids, s.ID)
			}
			if !reflect.DeepEqual(ids, c.want) {
				t.Errorf("filter %q: allocations %v, want %v", c.filter, ids, c.want)
			}
		}

		for _, c := range []struct{ filter, text string }{
			{mine + ` and Nope == "x"`, `failed to read result page: error finding value in datum: /Nope at part 0: couldn't find key: struct field with name "Nope"`},
			{mine + ` and JobVersion == 0`, `failed to read result page: error finding value in datum: /JobVersion at part 0: couldn't find key: struct field with name "JobVersion"`},
		} {
			r := tg.do(t, "GET", "/v1/allocations?"+url.Values{"filter": {c.filter}}.Encode(), tg.token, nil)
			if r.status != 400 || string(r.body) != c.text {
				t.Errorf("GET /v1/allocations filter %q = %d %q, want 400 %q", c.filter, r.status, r.body, c.text)
			}
			if idx := r.header.Get("X-Nomad-Index"); idx != "" {
				t.Errorf("GET /v1/allocations filter %q: X-Nomad-Index %q on an error of the servers, want none", c.filter, idx)
			}
		}
	})
}
