package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func named(ids ...string) []Job {
	var out []Job
	for _, id := range ids {
		ns, job, ok := strings.Cut(id, "/")
		if !ok {
			ns, job = "default", id
		}
		out = append(out, Job{Namespace: ns, JobID: job, Status: JobPending})
	}
	return out
}

func deps(t *testing.T, values ...string) []Dependency {
	t.Helper()
	var out []Dependency
	for _, v := range values {
		d, err := ParseAfter(v)
		if err != nil {
			t.Fatalf("ParseAfter(%q): %v", v, err)
		}
		out = append(out, d)
	}
	return out
}

func existsOnly(names ...string) func(Ref) bool {
	return func(r Ref) bool { return slices.Contains(names, r.String()) }
}

func TestPlanWaves(t *testing.T) {
	tests := []struct {
		name    string
		jobs    []Job
		meta    []Named
		after   []string
		outside AfterOutside
		exists  []string
		// want is each job in the planned order as "wave:id", or wantErr the refusal.
		want         []string
		wantOutside  []string
		wantErr      string
		wantNoWaves  bool
		wantErrCycle bool
	}{
		{name: "no upstream: no waves, order kept", jobs: named("b", "a"), want: []string{"0:b", "0:a"}, wantNoWaves: true},
		{name: "a chain from -after", jobs: named("api", "db-proxy", "web"), after: []string{"web: api", "api: db-proxy"},
			want: []string{"1:db-proxy", "2:api", "3:web"}},
		{name: "meta and -after merge", jobs: named("api", "auth", "db", "web"),
			meta:  []Named{{Job: Ref{"default", "web"}, Upstreams: []string{"api"}}},
			after: []string{"web: auth", "api: db", "auth: db"},
			want:  []string{"1:db", "2:api", "2:auth", "3:web"}},
		{name: "the latest upstream decides the wave", jobs: named("a", "b", "c", "d"), after: []string{"d: a, c", "c: b", "b: a"},
			want: []string{"1:a", "2:b", "3:c", "4:d"}},
		{name: "an upstream outside the selection is kept apart", jobs: named("web"), after: []string{"web: mesh/gateway"}, exists: []string{"mesh/gateway"},
			want: []string{"1:web"}, wantOutside: []string{"mesh/gateway"}},
		{name: "-after-outside ignore drops it", jobs: named("web", "api"), after: []string{"web: gateway, api"}, exists: []string{"default/gateway"}, outside: AfterOutsideIgnore,
			want: []string{"1:api", "2:web"}},
		{name: "a missing upstream is refused, named", jobs: named("web"), after: []string{"web: db-proxy"},
			wantErr: `job "web" (namespace "default") restarts after "db-proxy" (namespace "default"), named by -after, but no such job exists`},
		{name: "a missing upstream is refused under ignore too", jobs: named("web"), meta: []Named{{Job: Ref{"default", "web"}, Upstreams: []string{"nope"}}}, outside: AfterOutsideIgnore,
			wantErr: `named by its meta nomad-restart.after, but no such job exists`},
		{name: "a cycle is refused, named", jobs: named("api", "web", "db"), after: []string{"web: api", "api: web"},
			wantErr: "cycle, api -> web -> api", wantErrCycle: true},
		{name: "a job after itself is a cycle", jobs: named("web"), after: []string{"web: web"}, wantErr: "cycle, web -> web", wantErrCycle: true},
		{name: "a cycle across namespaces names them", jobs: named("a/x", "b/y"), after: []string{"a/x: b/y", "b/y: a/x"}, wantErr: "cycle, a/x -> b/y -> a/x", wantErrCycle: true},
		{name: "-after of a job not selected", jobs: named("web"), after: []string{"api: web"}, wantErr: `-after names job "api", which -jobs did not select`},
		{name: "-after of an ambiguous job", jobs: named("a/web", "b/web", "a/api"), after: []string{"web: api"}, wantErr: `name it "namespace/web"`},
		{name: "-after in a namespace: upstream in the job's namespace", jobs: named("a/web", "a/api", "b/api"), after: []string{"a/web: api"},
			want: []string{"1:api", "1:api", "2:web"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, outside, err := PlanWaves(tt.jobs, tt.meta, deps(t, tt.after...), tt.outside, existsOnly(tt.exists...))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErr)
				}
				var cycle *CycleError
				if errors.As(err, &cycle) != tt.wantErrCycle {
					t.Errorf("error %v: a CycleError = %v, want %v", err, !tt.wantErrCycle, tt.wantErrCycle)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			for _, j := range got {
				order = append(order, itoa(j.Wave)+":"+j.JobID)
			}
			if !slices.Equal(order, tt.want) {
				t.Errorf("waves = %v, want %v", order, tt.want)
			}
			var outs []string
			for _, o := range outside {
				outs = append(outs, o.Namespace+"/"+o.JobID)
			}
			if !slices.Equal(outs, tt.wantOutside) {
				t.Errorf("outside = %v, want %v", outs, tt.wantOutside)
			}
			if f := (Fleet{Jobs: got}); f.HasWaves() == tt.wantNoWaves {
				t.Errorf("HasWaves = %v", f.HasWaves())
			}
		})
	}
}

func itoa(n int) string { return string(rune('0' + n)) }

func TestParseAfter(t *testing.T) {
	good := map[string]Dependency{
		"web: api, auth":       {Job: "web", Upstreams: []string{"api", "auth"}},
		" web :api":            {Job: "web", Upstreams: []string{"api"}},
		"ns/web: db/db-proxy ": {Job: "ns/web", Upstreams: []string{"db/db-proxy"}},
		"web: api, api":        {Job: "web", Upstreams: []string{"api"}},
	}
	for in, want := range good {
		got, err := ParseAfter(in)
		if err != nil || got.Job != want.Job || !slices.Equal(got.Upstreams, want.Upstreams) {
			t.Errorf("ParseAfter(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"web", "web:", ": api", "web: api,,auth", "web: my api", "web: /api", "w eb: api", "web: n s/api", "web: a:b"} {
		if d, err := ParseAfter(in); err == nil {
			t.Errorf("ParseAfter(%q) = %+v, want an error", in, d)
		} else if !strings.HasPrefix(err.Error(), "Invalid -after value") && !strings.Contains(err.Error(), "-after") {
			t.Errorf("ParseAfter(%q) error %q does not name -after", in, err)
		}
	}
}

// chain is a fleet of three waves, db -> api -> web, plus a job of its own in wave 1.
func chain() Fleet {
	jobs := named("db", "solo", "api", "web")
	jobs[0].Wave, jobs[1].Wave = 1, 1
	jobs[2].Wave, jobs[2].After = 2, []Ref{{"default", "db"}}
	jobs[3].Wave, jobs[3].After = 3, []Ref{{"default", "api"}}
	return Fleet{ID: "f", Jobs: jobs, Status: restart.StatusRunning, Options: opts(4, 0, restart.OnErrorAsk), Control: restart.Control{Intent: restart.IntentRun}}
}

func TestNextWithWaves(t *testing.T) {
	ended := func(status JobStatus, ev Evidence) func(*Job) {
		return func(j *Job) { j.Status, j.RestartID, j.Evidence = status, "r-"+j.JobID, ev }
	}
	tests := []struct {
		name      string
		change    map[int]func(*Job)
		outside   []Upstream
		after3    []Ref // replaces web's upstreams
		failures  int
		wantStart []int
		wantHeld  map[int]string
		wantWaits map[int]string
		unproven  []string
	}{
		{name: "only wave 1 starts, however many slots", wantStart: []int{0, 1},
			wantWaits: map[int]string{2: "waits for db: its turn (wave 1)", 3: "waits for api: its turn (wave 2)"}},
		{name: "an upstream running holds its downstream", change: map[int]func(*Job){0: func(j *Job) { j.Status, j.RestartID = JobRunning, "r" }},
			wantStart: []int{1}, wantWaits: map[int]string{2: "waits for db: its restart, in progress"}},
		{name: "succeeded is not enough: its evidence is measured", change: map[int]func(*Job){0: ended(JobSucceeded, Evidence{Waits: "2 of 3 allocations healthy"}), 1: ended(JobSucceeded, Evidence{})},
			wantWaits: map[int]string{2: "waits for db: 2 of 3 allocations healthy"}, unproven: []string{"default/db"}},
		{name: "ready lets the next wave start", change: map[int]func(*Job){0: ended(JobSucceeded, Evidence{Ready: true}), 1: ended(JobSucceeded, Evidence{})},
			wantStart: []int{2}},
		{name: "a skipped upstream must still prove healthy", change: map[int]func(*Job){0: ended(JobSkipped, Evidence{}), 1: ended(JobSucceeded, Evidence{})},
			unproven: []string{"default/db"}, wantWaits: map[int]string{2: "waits for db: its evidence, not measured yet"}},
		{name: "a failed upstream holds its downstream while the budget holds", failures: 1,
			change:   map[int]func(*Job){0: ended(JobFailed, Evidence{}), 1: ended(JobSucceeded, Evidence{})},
			wantHeld: map[int]string{2: "its upstream db failed: its restart failed"}},
		{name: "evidence that failed holds its downstream", failures: 1,
			change:   map[int]func(*Job){0: ended(JobFailed, Evidence{Unready: "1 of 3 allocations healthy after 5m"}), 1: ended(JobSucceeded, Evidence{})},
			wantHeld: map[int]string{2: "its upstream db 1 of 3 allocations healthy after 5m"}},
		{name: "a spent budget measures nothing: no job would start on it", failures: 0,
			change:    map[int]func(*Job){0: ended(JobSucceeded, Evidence{}), 1: ended(JobFailed, Evidence{})},
			wantWaits: map[int]string{2: "waits for db: its evidence, not measured yet"}},
		{name: "a released failure lets it go on", change: map[int]func(*Job){0: ended(JobFailed, Evidence{Released: true}), 1: ended(JobSucceeded, Evidence{})},
			failures: 1, wantStart: []int{2}},
		{name: "an outside upstream is measured once the inside ones are ready", after3: []Ref{{"default", "api"}, {"mesh", "gw"}}, outside: []Upstream{{Namespace: "mesh", JobID: "gw"}},
			change:   map[int]func(*Job){0: ended(JobSucceeded, Evidence{Ready: true}), 1: ended(JobSucceeded, Evidence{}), 2: ended(JobSucceeded, Evidence{Ready: true})},
			unproven: []string{"mesh/gw"}, wantWaits: map[int]string{3: "waits for mesh/gw (outside the fleet): its health, not measured yet"}},
		{name: "an outside upstream that failed holds its downstream while the budget holds", after3: []Ref{{"mesh", "gw"}}, outside: []Upstream{{Namespace: "mesh", JobID: "gw", Evidence: Evidence{Unready: "was not healthy"}}},
			failures: 1,
			change:   map[int]func(*Job){0: ended(JobSucceeded, Evidence{Ready: true}), 1: ended(JobSucceeded, Evidence{}), 2: ended(JobSucceeded, Evidence{Ready: true})},
			wantHeld: map[int]string{3: "its upstream mesh/gw, outside the fleet, was not healthy"}},
		{name: "an outside upstream that failed spends the budget: nothing held, the fleet asks", after3: []Ref{{"mesh", "gw"}}, outside: []Upstream{{Namespace: "mesh", JobID: "gw", Evidence: Evidence{Unready: "was not healthy"}}},
			change: map[int]func(*Job){0: ended(JobSucceeded, Evidence{Ready: true}), 1: ended(JobSucceeded, Evidence{}), 2: ended(JobSucceeded, Evidence{Ready: true})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := chain()
			f.Options.MaxFailedJobs = tt.failures
			f.Outside = tt.outside
			if tt.after3 != nil {
				f.Jobs[3].After = tt.after3
			}
			for i, c := range tt.change {
				c(&f.Jobs[i])
			}
			d := Next(f)
			if !slices.Equal(d.Start, tt.wantStart) {
				t.Errorf("Start = %v, want %v", d.Start, tt.wantStart)
			}
			got := map[int]string{}
			for _, h := range d.Held {
				got[h.Job] = h.Gate.Failed
			}
			if len(got) != len(tt.wantHeld) {
				t.Errorf("Held = %v, want %v", got, tt.wantHeld)
			}
			for i, w := range tt.wantHeld {
				if got[i] != w {
					t.Errorf("held %d = %q, want %q", i, got[i], w)
				}
			}
			for i, w := range tt.wantWaits {
				if g := f.GateOf(i); g.Waits != w {
					t.Errorf("job %d waits %q, want %q", i, g.Waits, w)
				}
			}
			var unproven []string
			for _, r := range Unproven(f) {
				unproven = append(unproven, r.String())
			}
			if !slices.Equal(unproven, tt.unproven) {
				t.Errorf("Unproven = %v, want %v", unproven, tt.unproven)
			}
		})
	}
}

// TestHeldJobsFollowTheRules walks a fleet through an upstream's failure: its downstream
// jobs are skipped with the reason and hold theirs in turn; the fleet ends failed.
func TestHeldJobsFollowTheRules(t *testing.T) {
	f := chain()
	f.Options.MaxFailedJobs = 1
	f.Jobs[0].Status, f.Jobs[0].RestartID, f.Jobs[0].Reason = JobFailed, "r0", "batch 1 failed"
	f.Jobs[1].Status, f.Jobs[1].RestartID = JobSucceeded, "r1"
	for range 3 {
		d := Next(f)
		d.Record(&f)
	}
	if f.Jobs[2].Status != JobSkipped || !strings.Contains(f.Jobs[2].Reason, "its upstream db failed: batch 1 failed") {
		t.Errorf("api: %s %q, want skipped naming db", f.Jobs[2].Status, f.Jobs[2].Reason)
	}
	if f.Jobs[3].Status != JobSkipped || !strings.Contains(f.Jobs[3].Reason, "its upstream api was not restarted") {
		t.Errorf("web: %s %q, want skipped naming api", f.Jobs[3].Status, f.Jobs[3].Reason)
	}
	if f.Status != restart.StatusFailed {
		t.Errorf("fleet %s, want failed", f.Status)
	}
	if got := f.WaveReached(); got != 1 {
		t.Errorf("WaveReached = %d, want 1: the jobs skipped before their turn started no wave", got)
	}
}

// TestAnswerYesReleasesHeldJobs: with the budget spent, held jobs wait for the operator;
// yes lets them go on without their failed upstream's evidence.
func TestAnswerYesReleasesHeldJobs(t *testing.T) {
	f := chain()
	f.Jobs[0].Status, f.Jobs[0].RestartID = JobFailed, "r0"
	f.Jobs[1].Status, f.Jobs[1].RestartID = JobSucceeded, "r1"
	d := Next(f)
	if d.Status != restart.StatusWaiting || len(d.Held) != 0 {
		t.Fatalf("Next = %+v, want waiting and nothing held", d)
	}
	rec := &Record{Fleet: f}
	d.Record(&rec.Fleet)
	rec.Question = BudgetQuestion("q", d.Reason, time.Time{})
	if ok, err := ApplyAnswer(rec, "y"); !ok || err != nil {
		t.Fatalf("ApplyAnswer = %v, %v", ok, err)
	}
	if d := Next(rec.Fleet); !slices.Equal(d.Start, []int{2}) {
		t.Errorf("after yes, Start = %v, want [2] (api)", d.Start)
	}
}

func TestObserveEvidence(t *testing.T) {
	f := chain()
	f.Outside = []Upstream{{Namespace: "mesh", JobID: "gw"}}
	f.Jobs[0].Status, f.Jobs[0].RestartID = JobSucceeded, "r0"
	obs := func(ns, id string, ev Evidence) error {
		return Observe(&f, Observation{Namespace: ns, JobID: id, Evidence: &ev})
	}
	if err := obs("default", "db", Evidence{Waits: "1 of 2 allocations healthy"}); err != nil || f.Jobs[0].Evidence.Waits != "1 of 2 allocations healthy" {
		t.Fatalf("progress: %v %+v", err, f.Jobs[0].Evidence)
	}
	if err := obs("default", "db", Evidence{Unready: "a gate failed: errors 0.3 >= 0.02"}); err != nil {
		t.Fatal(err)
	}
	if f.Jobs[0].Status != JobFailed || !strings.Contains(f.Jobs[0].Reason, "its restart succeeded, but a gate failed") {
		t.Errorf("db after unready: %s %q", f.Jobs[0].Status, f.Jobs[0].Reason)
	}
	if err := obs("default", "db", Evidence{Ready: true}); err != nil || f.Jobs[0].Evidence.Ready {
		t.Errorf("a verdict must be final: %v %+v", err, f.Jobs[0].Evidence)
	}
	if err := obs("default", "api", Evidence{Ready: true}); err != nil || f.Jobs[2].Evidence.Ready {
		t.Errorf("a pending job's evidence must not be taken: %v %+v", err, f.Jobs[2].Evidence)
	}
	f.Jobs[1].Status, f.Jobs[1].Reason = JobSkipped, "it had no allocation to restart when its turn came"
	if err := obs("default", "solo", Evidence{Unready: "is gone from Nomad"}); err != nil {
		t.Fatal(err)
	}
	if j := f.Jobs[1]; j.Status != JobFailed || j.Reason != "it was skipped (it had no allocation to restart when its turn came), but as an upstream it is gone from Nomad" {
		t.Errorf("a skipped upstream without evidence: %s %q, want failed: the jobs after it are not restarted for it", j.Status, j.Reason)
	}
	if err := obs("mesh", "gw", Evidence{Ready: true}); err != nil || !f.Outside[0].Evidence.Ready {
		t.Errorf("outside: %v %+v", err, f.Outside[0].Evidence)
	}
	if err := obs("x", "y", Evidence{Ready: true}); err == nil {
		t.Error("evidence of a job unknown to the fleet was taken")
	}
}

func TestMeasuringText(t *testing.T) {
	for m, want := range map[Measuring]string{
		{Healthy: 2, Total: 3, Why: "allocation 3f2a91c0: check http (nomad) critical"}: "2 of 3 allocations healthy (allocation 3f2a91c0: check http (nomad) critical)",
		{Healthy: 3, Total: 3, GatesHeld: "4s", WaveWait: "10s"}:                        "allocations healthy, gates held 4s of -wave-wait 10s",
		{Why: `Deployment "1a2b3c4d" is "running"`}:                                     `Deployment "1a2b3c4d" is "running"`,
	} {
		if got := m.Text(); got != want {
			t.Errorf("%+v.Text() = %q, want %q", m, got, want)
		}
	}
}

// TestOnErrorFailSkipsHeldJobs: once the budget is spent under -on-error fail, the jobs a
// failed upstream holds are skipped naming it, the others canceled.
func TestOnErrorFailSkipsHeldJobs(t *testing.T) {
	f := chain()
	f.Options.OnError = restart.OnErrorFail
	f.Jobs = append(f.Jobs, Job{Namespace: "default", JobID: "free", Status: JobPending, Wave: 1})
	f.Jobs[0].Status, f.Jobs[0].RestartID = JobFailed, "r0"
	f.Jobs[1].Status, f.Jobs[1].RestartID = JobSucceeded, "r1"
	d := Next(f)
	d.Record(&f)
	if f.Status != restart.StatusFailed {
		t.Fatalf("fleet %s, want failed", f.Status)
	}
	if j := f.Jobs[2]; j.Status != JobSkipped || !strings.Contains(j.Reason, "its upstream db failed") {
		t.Errorf("api: %s %q, want skipped naming db", j.Status, j.Reason)
	}
	if j := f.Jobs[4]; j.Status != JobCanceled {
		t.Errorf("free: %s, want canceled", j.Status)
	}
}

// outsideHeld is a fleet of three jobs, two of them after mesh/gw, an upstream outside the
// fleet that was measured unhealthy, and a third job of its own that succeeded.
func outsideHeld(failures int, onError restart.OnError) Fleet {
	jobs := named("api", "web", "solo")
	jobs[0].Wave, jobs[0].After = 1, []Ref{{"mesh", "gw"}}
	jobs[1].Wave, jobs[1].After = 1, []Ref{{"mesh", "gw"}}
	jobs[2].Wave, jobs[2].Status, jobs[2].RestartID = 1, JobSucceeded, "r-solo"
	return Fleet{ID: "f", Jobs: jobs, Status: restart.StatusRunning, Options: opts(2, failures, onError),
		Control: restart.Control{Intent: restart.IntentRun},
		Outside: []Upstream{{Namespace: "mesh", JobID: "gw", Evidence: Evidence{Unready: "was not healthy (-health checks): allocation 1a2b3c4d: check up critical"}}}}
}

// TestOutsideUpstreamFailureSkipsItsDownstream: an upstream outside the fleet that gives
// no evidence is a failed upstream like one in the fleet: the jobs after it are recorded
// skipped with the reason, its failure counts once against the budget however many jobs
// it holds, the fleet ends failed saying so, -on-error decides once the budget is spent,
// and an operator's yes lets the held jobs go on (no: skipped with the reason).
func TestOutsideUpstreamFailureSkipsItsDownstream(t *testing.T) {
	const reason = "its upstream mesh/gw, outside the fleet, was not healthy"
	settleAll := func(f *Fleet) {
		for range 3 {
			Next(*f).Record(f)
		}
	}
	wantSkipped := func(t *testing.T, f Fleet) {
		t.Helper()
		for _, j := range f.Jobs[:2] {
			if j.Status != JobSkipped || j.RestartID != "" || !strings.HasPrefix(j.Reason, reason) {
				t.Errorf("%s: %s (restart %q) %q, want skipped, never started, naming mesh/gw", j.JobID, j.Status, j.RestartID, j.Reason)
			}
		}
	}

	// Whether the budget holds (the held jobs settled at once) or is spent under -on-error
	// fail (settled as the fleet fails), they end skipped naming the upstream, and the
	// fleet failed saying why.
	for _, budget := range []int{1, 0} {
		t.Run(fmt.Sprintf("-max-failed-jobs %d: skipped, the fleet fails naming the upstream", budget), func(t *testing.T) {
			f := outsideHeld(budget, restart.OnErrorFail)
			settleAll(&f)
			wantSkipped(t, f)
			if f.Status != restart.StatusFailed {
				t.Errorf("fleet %s, want failed", f.Status)
			}
			if d := finish(f, tallyOf(f)); d.Reason != "1 upstream outside the fleet gave no evidence: the jobs after it were skipped" {
				t.Errorf("finish = %s %q, want failed naming the upstream outside", d.Status, d.Reason)
			}
		})
	}
	t.Run("counted once: two held jobs spend one failure", func(t *testing.T) {
		f := outsideHeld(1, restart.OnErrorFail)
		f.Jobs = append(f.Jobs, Job{Namespace: "default", JobID: "later", Status: JobPending, Wave: 1})
		f.Options.MaxParallelJobs = 3
		Next(f).Record(&f) // the held jobs settled; "later" not started yet
		if d := Next(f); !slices.Equal(d.Start, []int{3}) || d.Status != restart.StatusRunning {
			t.Errorf("Next = %s Start %v, want running, [3]: one upstream's failure is one of the budget's", d.Status, d.Start)
		}
	})
	t.Run("budget spent, ask, yes: the held jobs go on", func(t *testing.T) {
		f := outsideHeld(0, restart.OnErrorAsk)
		d := Next(f)
		if d.Status != restart.StatusWaiting || len(d.Held) != 0 || !strings.Contains(d.Reason, "1 upstream outside the fleet failed") {
			t.Fatalf("Next = %s %q held %v, want waiting, naming the upstream, nothing held", d.Status, d.Reason, d.Held)
		}
		rec := &Record{Fleet: f}
		d.Record(&rec.Fleet)
		rec.Question = BudgetQuestion("q", d.Reason, time.Time{})
		if ok, err := ApplyAnswer(rec, "y"); !ok || err != nil {
			t.Fatalf("ApplyAnswer = %v, %v", ok, err)
		}
		if d := Next(rec.Fleet); !slices.Equal(d.Start, []int{0, 1}) {
			t.Errorf("after yes, Start = %v, want [0 1]", d.Start)
		}
		// Every job restarted, as the operator let them: the fleet succeeds.
		for i := range rec.Jobs[:2] {
			rec.Jobs[i].Status, rec.Jobs[i].RestartID = JobSucceeded, "r"
		}
		if d := Next(rec.Fleet); d.Status != restart.StatusSucceeded {
			t.Errorf("every job restarted after yes: fleet %s %q, want succeeded", d.Status, d.Reason)
		}
	})
	t.Run("budget spent, ask, no: skipped naming it", func(t *testing.T) {
		rec := &Record{Fleet: outsideHeld(0, restart.OnErrorAsk)}
		d := Next(rec.Fleet)
		d.Record(&rec.Fleet)
		rec.Question = BudgetQuestion("q", d.Reason, time.Time{})
		if ok, err := ApplyAnswer(rec, "n"); ok || err != nil {
			t.Fatalf("ApplyAnswer = %v, %v", ok, err)
		}
		wantSkipped(t, rec.Fleet)
		if rec.Status != restart.StatusFailed {
			t.Errorf("fleet %s, want failed", rec.Status)
		}
	})
}

// TestWaveSummaries: each wave's state, and what its pending jobs wait for, or that a
// failed upstream holds them while the fleet asks.
func TestWaveSummaries(t *testing.T) {
	f := chain()
	got := f.WaveSummaries()
	want := []WaveSummary{
		{Wave: 1, Jobs: []string{"db", "solo"}, State: "waiting"},
		{Wave: 2, Jobs: []string{"api"}, State: "waiting", Waits: []string{"api: waits for db: its turn (wave 1)"}},
		{Wave: 3, Jobs: []string{"web"}, State: "waiting", Waits: []string{"web: waits for api: its turn (wave 2)"}},
	}
	if !slices.EqualFunc(got, want, sameSummary) {
		t.Errorf("pending fleet: %+v, want %+v", got, want)
	}
	// db failed and spent the budget: the fleet asks, api is held until the answer.
	f.Jobs[0].Status, f.Jobs[0].RestartID, f.Jobs[0].Reason = JobFailed, "r0", "batch 1 failed"
	f.Jobs[1].Status, f.Jobs[1].RestartID = JobRunning, "r1"
	got = f.WaveSummaries()
	want[0].State = "running"
	want[1].Waits = []string{"api: held: its upstream db failed: batch 1 failed"}
	if !slices.EqualFunc(got, want, sameSummary) {
		t.Errorf("held fleet: %+v, want %+v", got, want)
	}
}

func sameSummary(a, b WaveSummary) bool {
	return a.Wave == b.Wave && a.State == b.State && slices.Equal(a.Jobs, b.Jobs) && slices.Equal(a.Waits, b.Waits)
}
