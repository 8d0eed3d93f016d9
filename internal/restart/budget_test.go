package restart

import "testing"

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
