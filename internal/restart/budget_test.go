package restart

import (
	"strings"
	"testing"
	"time"
)

func TestParseMaxUnavailable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want BatchSize
		bad  bool
	}{
		{"1", BatchSize{N: 1}, false},
		{"25%", BatchSize{N: 25, Percent: true}, false},
		{" 3 ", BatchSize{N: 3}, false},
		{"0", BatchSize{}, true},
		{"0%", BatchSize{}, true},
		{"101%", BatchSize{}, true},
		{"-1", BatchSize{}, true},
		{"x", BatchSize{}, true},
		{"", BatchSize{}, true},
	} {
		got, err := ParseMaxUnavailable(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("ParseMaxUnavailable(%q) = %+v, %v", tc.in, got, err)
		}
	}
}

func TestGroupBudget(t *testing.T) {
	running := map[string]TaskState{"main": {State: TaskRunning}}
	serving := &Alloc{DesiredStatus: DesiredRun, ClientStatus: ClientRunning, Tasks: running}
	for _, tc := range []struct {
		name string
		g    GroupBudget
		fits bool
	}{
		{"healthy group, batch within budget", GroupBudget{Count: 4, Serving: 4, InBatch: 1, Budget: 1}, true},
		{"one already down, batch of one, budget one", GroupBudget{Count: 4, Serving: 3, InBatch: 1, Budget: 1}, false},
		{"one already down, budget two", GroupBudget{Count: 4, Serving: 3, InBatch: 1, Budget: 2}, true},
		{"down one accepted by the operator", GroupBudget{Count: 4, Serving: 3, Accepted: 1, InBatch: 1, Budget: 1}, true},
		{"more serving than count (surge)", GroupBudget{Count: 2, Serving: 3, InBatch: 1, Budget: 1}, true},
		{"one failing its checks, budget one", GroupBudget{Count: 4, Serving: 3, Failing: 1, InBatch: 1, Budget: 1}, false},
		{"one failing its checks, budget two", GroupBudget{Count: 4, Serving: 3, Failing: 1, InBatch: 1, Budget: 2}, true},
		{"surge covers one failing its checks", GroupBudget{Count: 2, Serving: 2, Failing: 1, InBatch: 1, Budget: 1}, true},
	} {
		if got := tc.g.Fits(); got != tc.fits {
			t.Errorf("%s: Fits() = %v (%s)", tc.name, got, tc.g.Why())
		}
	}
	for _, tc := range []struct {
		name string
		g    GroupBudget
		want string
	}{
		{"task states only", GroupBudget{Group: "web", Count: 4, Serving: 3, InBatch: 1, Budget: 1},
			`availability budget of group "web": 1 of 4 allocations out of service, 1 more to restart, at most 1 at once`},
		{"one failing checks", GroupBudget{Group: "web", Count: 4, Serving: 3, Failing: 1, InBatch: 1, Budget: 1},
			`availability budget of group "web": 1 of 4 allocations out of service (1 failing its health checks), 1 more to restart, at most 1 at once`},
		{"failing checks", GroupBudget{Group: "web", Count: 4, Serving: 2, Failing: 2, FailingWhy: "allocation 1a2b3c4d: check http (consul) critical", InBatch: 1, Budget: 1},
			`availability budget of group "web": 2 of 4 allocations out of service (2 failing their health checks, allocation 1a2b3c4d: check http (consul) critical), 1 more to restart, at most 1 at once`},
	} {
		if got := tc.g.Why(); got != tc.want {
			t.Errorf("%s: Why() = %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		a    *Alloc
		want bool
	}{
		{"running", serving, true},
		{"pending", &Alloc{DesiredStatus: DesiredRun, ClientStatus: ClientPending, Tasks: running}, false},
		{"task restarting", &Alloc{DesiredStatus: DesiredRun, ClientStatus: ClientRunning, Tasks: map[string]TaskState{"main": {State: TaskPending}}}, false},
		{"finished prestart", &Alloc{DesiredStatus: DesiredRun, ClientStatus: ClientRunning, Tasks: map[string]TaskState{"main": {State: TaskRunning}, "init": {State: TaskDead}}}, true},
		{"failed sidecar", &Alloc{DesiredStatus: DesiredRun, ClientStatus: ClientRunning, Tasks: map[string]TaskState{"main": {State: TaskRunning}, "s": {State: TaskDead, Failed: true}}}, false},
		{"stopping", &Alloc{DesiredStatus: DesiredStop, ClientStatus: ClientRunning, Tasks: running}, false},
		{"replaced", &Alloc{DesiredStatus: DesiredRun, ClientStatus: ClientRunning, NextAllocation: "x", Tasks: running}, false},
	} {
		if got := Serving(tc.a); got != tc.want {
			t.Errorf("Serving(%s) = %v", tc.name, got)
		}
	}
}

// budgetRecord is a restart of group "web" (and one "api" allocation) in batches: a1 and
// api1 in the first, a2 in the second, a3 in the third.
func budgetRecord() *Record {
	return &Record{Batches: 3, Allocs: []AllocProgress{
		{ID: "a1", Group: "web", Batch: 1}, {ID: "api1", Group: "api", Batch: 1},
		{ID: "a2", Group: "web", Batch: 2}, {ID: "a3", Group: "web", Batch: 3},
	}}
}

func budgetAlloc(id, group string, state string) *Alloc {
	return &Alloc{ID: id, Group: group, DesiredStatus: DesiredRun, ClientStatus: ClientRunning,
		Tasks: map[string]TaskState{"main": {State: state}}}
}

// TestBudgets: how a batch would spend each group's budget, from the job's allocations.
func TestBudgets(t *testing.T) {
	job := &Job{ID: "web", Type: "service", Groups: []Group{{Name: "web", Count: 3}, {Name: "api", Count: 1}}}
	healthy := []*Alloc{budgetAlloc("a1", "web", TaskRunning), budgetAlloc("a2", "web", TaskRunning), budgetAlloc("a3", "web", TaskRunning), budgetAlloc("api1", "api", TaskRunning)}
	for _, tc := range []struct {
		name    string
		rec     func(r *Record)
		spec    Spec
		job     *Job
		allocs  []*Alloc
		failing map[string]string
		batch   int
		want    []GroupBudget
	}{
		{name: "healthy job, batches of one's share", allocs: healthy, batch: 1, want: []GroupBudget{
			{Group: "api", Count: 1, Serving: 1, InBatch: 1, Budget: 2},
			{Group: "web", Count: 3, Serving: 3, InBatch: 1, Budget: 2},
		}},
		{name: "explicit -max-unavailable of each group's count", allocs: healthy, batch: 2, spec: Spec{MaxUnavailable: &BatchSize{N: 50, Percent: true}}, want: []GroupBudget{
			{Group: "web", Count: 3, Serving: 3, InBatch: 1, Budget: 2},
		}},
		{name: "one down before the batch", batch: 2, allocs: []*Alloc{budgetAlloc("a1", "web", TaskPending), budgetAlloc("a2", "web", TaskRunning), budgetAlloc("a3", "web", TaskRunning)}, want: []GroupBudget{
			{Group: "web", Count: 3, Serving: 2, InBatch: 1, Budget: 1},
		}},
		{name: "one failing its checks outside the batch", batch: 2, allocs: healthy, failing: map[string]string{"a3abcdef12": "check http critical", "a3": "check http critical"}, want: []GroupBudget{
			{Group: "web", Count: 3, Serving: 2, Failing: 1, FailingWhy: "allocation a3: check http critical", InBatch: 1, Budget: 1},
		}},
		{name: "the batch's own failing its checks counts in the batch", batch: 2, allocs: healthy, failing: map[string]string{"a2": "check http critical"}, want: []GroupBudget{
			{Group: "web", Count: 3, Serving: 3, InBatch: 1, Budget: 1},
		}},
		{name: "a failure the operator went on past is accepted", batch: 2,
			rec:    func(r *Record) { r.Allocs[0].State, r.Allocs[0].Replacement = AllocFailed, "a1-new" },
			allocs: []*Alloc{budgetAlloc("a1-new", "web", TaskPending), budgetAlloc("a2", "web", TaskRunning), budgetAlloc("a3", "web", TaskRunning)}, want: []GroupBudget{
				{Group: "web", Count: 3, Serving: 2, Accepted: 1, InBatch: 1, Budget: 1},
			}},
		{name: "system job: the count is what runs", batch: 2, job: &Job{ID: "web", Type: "system", Groups: []Group{{Name: "web", Count: 1}}},
			allocs: []*Alloc{budgetAlloc("a1", "web", TaskRunning), budgetAlloc("a2", "web", TaskRunning)}, want: []GroupBudget{
				{Group: "web", Count: 2, Serving: 2, InBatch: 1, Budget: 1},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := budgetRecord()
			if tc.rec != nil {
				tc.rec(r)
			}
			j := job
			if tc.job != nil {
				j = tc.job
			}
			got := Budgets(r, tc.spec, j, tc.batch, tc.allocs, tc.failing)
			if len(got) != len(tc.want) {
				t.Fatalf("budgets %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("budget %+v, want %+v", got[i], tc.want[i])
				}
			}
		})
	}
}

// TestBatchWaitsFor: the batch starts when every group fits, else waits for the first
// group's budget that does not.
func TestBatchWaitsFor(t *testing.T) {
	fits := GroupBudget{Group: "api", Count: 2, Serving: 2, InBatch: 1, Budget: 1}
	spent := GroupBudget{Group: "web", Count: 3, Serving: 2, InBatch: 1, Budget: 1}
	for _, tc := range []struct {
		name string
		bs   []GroupBudget
		want string
	}{
		{"every group fits: start now", []GroupBudget{fits}, ""},
		{"no group to spend: start now", nil, ""},
		{"one group spent: wait for it", []GroupBudget{fits, spent}, `availability budget of group "web": 1 of 3 allocations out of service`},
	} {
		if got := BatchWaitsFor(tc.bs); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestBudgetDeadline: the wait is bounded by the longest healthy deadline of the batch's
// groups; BudgetGaveUp says what it waited for.
func TestBudgetDeadline(t *testing.T) {
	spec := Spec{HealthyDeadline: time.Minute, GroupHealth: map[string]GroupHealth{"api": {HealthyDeadline: 3 * time.Minute}}}
	for _, tc := range []struct {
		name  string
		batch int
		want  time.Duration
	}{
		{"a batch with a group of a longer deadline", 1, 3 * time.Minute},
		{"a batch of the default deadline", 2, time.Minute},
		{"no such batch", 9, 0},
	} {
		if got := BudgetDeadline(budgetRecord(), spec, tc.batch); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	want := `gave up after 1m0s waiting for the availability budget of group "web"`
	if err := BudgetGaveUp(time.Minute, `availability budget of group "web"`); err.Error() != want {
		t.Errorf("BudgetGaveUp: %q, want %q", err, want)
	}
}

// TestBudgetAtHand: the job's counts spare a read of its allocations only when every group
// of the batch runs all its allocations, nothing starting or queued.
func TestBudgetAtHand(t *testing.T) {
	job := &Job{ID: "web", Type: "service", Groups: []Group{{Name: "web", Count: 3}, {Name: "api", Count: 1}}}
	full := map[string]GroupCounts{"web": {Running: 3}, "api": {Running: 1}}
	for _, tc := range []struct {
		name   string
		job    *Job
		counts map[string]GroupCounts
		want   bool
	}{
		{"every group full", job, full, true},
		{"no counts", job, nil, false},
		{"a group short", job, map[string]GroupCounts{"web": {Running: 2}, "api": {Running: 1}}, false},
		{"one starting", job, map[string]GroupCounts{"web": {Running: 3, Starting: 1}, "api": {Running: 1}}, false},
		{"one queued", job, map[string]GroupCounts{"web": {Running: 3}, "api": {Running: 1, Queued: 1}}, false},
		{"a group not counted", job, map[string]GroupCounts{"web": {Running: 3}}, false},
		{"a group gone from the job", &Job{ID: "web", Type: "service", Groups: []Group{{Name: "web", Count: 3}}}, full, false},
		{"system job: no count to compare", &Job{ID: "web", Type: "system", Groups: job.Groups}, full, false},
	} {
		if got := BudgetAtHand(budgetRecord(), tc.job, 1, tc.counts); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestBudgetPlanRefusal: an explicit budget smaller than a batch's share of a group is
// refused at planning.
func TestBudgetPlanRefusal(t *testing.T) {
	job := &Job{ID: "web", Type: "service", Groups: []Group{{Name: "web", Count: 4}}}
	rec := func(mu *BatchSize) *Record {
		return &Record{Batches: 1, Spec: Spec{MaxUnavailable: mu}, Allocs: []AllocProgress{{ID: "a1", Group: "web", Batch: 1}, {ID: "a2", Group: "web", Batch: 1}}}
	}
	for _, tc := range []struct {
		name string
		rec  *Record
		job  *Job
		want string
	}{
		{"no explicit budget", rec(nil), job, ""},
		{"budget of the batch", rec(&BatchSize{N: 2}), job, ""},
		{"budget smaller than the batch", rec(&BatchSize{N: 1}), job, "lower -batch-size or raise -max-unavailable"},
		{"a percentage smaller than the batch", rec(&BatchSize{N: 25, Percent: true}), job, "allows 1 allocation(s) of group \"web\""},
		{"system job: no count", rec(&BatchSize{N: 1}), &Job{ID: "web", Type: "system", Groups: job.Groups}, ""},
	} {
		err := BudgetPlanRefusal(tc.rec, tc.job)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
