package fleet

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// FuzzFleetRecord decodes any stored fleet record (anyone who may write nomad-restart's
// variables can write one) and has the rules decide on it, as a driver that adopts it
// does: no panic or hang; a decision starts only pending jobs that wait for no other
// restart nor for an upstream's evidence, within -max-parallel-jobs, holds only pending
// jobs whose upstream failed, steers only running ones, abandons only pending ones;
// an answer either changes nothing and names itself, or settles the question.
func FuzzFleetRecord(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	jobs := []Job{
		{Namespace: "default", JobID: "a", Status: JobPending},
		{Namespace: "default", JobID: "b", Status: JobRunning, RestartID: "c1"},
		{Namespace: "default", JobID: "c", Status: JobPending, BusyWith: "r9"},
		{Namespace: "team", JobID: "d", Status: JobFailed, Reason: "x"},
	}
	for _, r := range []*Record{
		{Fleet: Fleet{ID: "f1", Options: DefaultOptions(), Jobs: jobs, Status: restart.StatusRunning}},
		{Fleet: Fleet{ID: "f1", Options: Options{MaxParallelJobs: 3, MaxFailedJobs: 1}, Jobs: jobs, Status: restart.StatusRunning,
			Control: restart.Control{Intent: restart.IntentPause, By: "ops"}}},
		{Fleet: Fleet{ID: "f1", Options: DefaultOptions(), Jobs: jobs, Status: restart.StatusWaiting},
			Question: BudgetQuestion("q1", "1 job failed", now)},
		{Fleet: Fleet{ID: "f1", Options: Options{MaxParallelJobs: -5, MaxFailedJobs: -1}, Jobs: jobs, Status: "bogus",
			Control: restart.Control{Intent: restart.IntentCancel}}},
		{Fleet: Fleet{ID: "f1", Options: DefaultOptions(), Status: restart.StatusRunning, Jobs: []Job{
			{Namespace: "default", JobID: "a", Status: JobSucceeded, RestartID: "c1", Wave: 1, Evidence: Evidence{Waits: "1 of 2 allocations healthy"}},
			{Namespace: "default", JobID: "b", Status: JobPending, Wave: 2, After: []Ref{{"default", "a"}, {"mesh", "gw"}, {"default", "b"}}},
			{Namespace: "default", JobID: "c", Status: JobFailed, RestartID: "c3", Wave: 1, Evidence: Evidence{Unready: "x", Released: true}},
		}, Outside: []Upstream{{Namespace: "mesh", JobID: "gw", Evidence: Evidence{Unready: "gone"}}}}},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "y")
		f.Add(b, "maybe")
	}
	f.Add([]byte(`{"Jobs":[{"Status":"pending"},{"Status":"pending"}],"Options":{"MaxParallelJobs":9223372036854775807}}`), "")
	f.Fuzz(func(t *testing.T, b []byte, answer string) {
		var r Record
		if json.Unmarshal(b, &r) != nil {
			return
		}
		fuzztest.Bound(t, "the rules on a stored fleet", func() {
			checkDecision(t, r.Fleet, Next(r.Fleet))
			for _, i := range Upcoming(r.Fleet, 3) {
				if i < 0 || i >= len(r.Jobs) || r.Jobs[i].Status != JobPending {
					t.Errorf("Upcoming names job %d of %d", i, len(r.Jobs))
				}
			}
			if err := r.Options.Validate(); err != nil {
				var ve *restart.ValueError
				if !errors.As(err, &ve) {
					t.Errorf("Validate(%+v) = %v, want a *ValueError naming the flag", r.Options, err)
				}
			}
			before := cloneRecord(t, &r)
			proceed, err := ApplyAnswer(&r, answer)
			if err != nil {
				if !reflect.DeepEqual(&r, before) {
					t.Errorf("a refused answer %q changed the fleet", answer)
				}
				fuzztest.OneLine(t, "answer", err)
				return
			}
			if r.Question != nil || (proceed && r.Status != restart.StatusRunning) || (!proceed && r.Status != restart.StatusFailed) {
				t.Errorf("answer %q: proceed %v, status %s, question %v", answer, proceed, r.Status, r.Question)
			}
			if !proceed && slices.ContainsFunc(r.Jobs, func(j Job) bool { return j.Status == JobPending }) {
				t.Errorf("answer %q stopped the fleet with jobs left pending", answer)
			}
		})
	})
}

func cloneRecord(t *testing.T, r *Record) *Record {
	b, err := json.Marshal(r)
	if err != nil {
		t.Errorf("a decoded fleet does not encode: %v", err)
		return r
	}
	var c Record
	if err := json.Unmarshal(b, &c); err != nil {
		t.Errorf("a fleet's JSON does not decode: %v", err)
	}
	if reflect.DeepEqual(&c, r) {
		return &c
	}
	return r // a value JSON does not keep exactly (a monotonic clock, an empty map): compare with itself
}

// checkDecision checks what Next decided for f.
func checkDecision(t *testing.T, f Fleet, d Decision) {
	t.Helper()
	running := 0
	for _, j := range f.Jobs {
		if j.Status == JobRunning {
			running++
		}
	}
	if f.Status.Terminal() && (len(d.Start) > 0 || len(d.Steer) > 0 || len(d.Abandon) > 0) {
		t.Errorf("a %s fleet: decision %+v", f.Status, d)
	}
	if len(d.Start) > max(f.Options.MaxParallelJobs-running, 0) {
		t.Errorf("%d running of -max-parallel-jobs %d: starts %d", running, f.Options.MaxParallelJobs, len(d.Start))
	}
	seen := map[int]bool{}
	for _, i := range d.Start {
		if i < 0 || i >= len(f.Jobs) || f.Jobs[i].Status != JobPending || f.Jobs[i].BusyWith != "" || seen[i] {
			t.Errorf("starts job %d of %d (%+v)", i, len(f.Jobs), f.Jobs[min(max(i, 0), len(f.Jobs)-1)])
		}
		seen[i] = true
		if i >= 0 && i < len(f.Jobs) && !f.GateOf(i).Free() {
			t.Errorf("starts job %d before its upstreams' evidence: %+v", i, f.GateOf(i))
		}
	}
	for _, h := range d.Held {
		if h.Job < 0 || h.Job >= len(f.Jobs) || f.Jobs[h.Job].Status != JobPending || h.Gate.Failed == "" {
			t.Errorf("holds job %d of %d (%+v)", h.Job, len(f.Jobs), h.Gate)
		}
	}
	for _, s := range d.Steer {
		if s.Job < 0 || s.Job >= len(f.Jobs) || f.Jobs[s.Job].Status != JobRunning {
			t.Errorf("steers job %d of %d", s.Job, len(f.Jobs))
		}
	}
	for _, i := range d.Abandon {
		if i < 0 || i >= len(f.Jobs) || f.Jobs[i].Status != JobPending {
			t.Errorf("abandons job %d of %d", i, len(f.Jobs))
		}
	}
	g := f
	g.Jobs = slices.Clone(f.Jobs)
	d.Record(&g)
	if g.Status != d.Status {
		t.Errorf("Record left the status %s, want %s", g.Status, d.Status)
	}
}

// FuzzFleetFlags reads any -busy, -order, -on-error, -max-parallel-jobs and
// -max-failed-jobs: each refusal is a *restart.ValueError naming the flag and the value on
// one line; accepted options order any jobs.
func FuzzFleetFlags(f *testing.F) {
	f.Add("wait", "name", "ask", 1, 0)
	f.Add("skip", "priority", "fail", 4, 2)
	f.Add("Wait", "listed", "", 0, -1)
	f.Add("", "random", "ask", -3, 0)
	f.Fuzz(func(t *testing.T, busy, order, onError string, maxParallel, maxFailed int) {
		o := Options{MaxParallelJobs: maxParallel, MaxFailedJobs: maxFailed, Order: OrderBy(order), Busy: Busy(busy), OnError: restart.OnError(onError)}
		fuzztest.Bound(t, "the fleet's options", func() {
			if _, err := ParseBusy(busy); err != nil {
				checkValueError(t, err, "busy", busy)
			}
			if _, err := ParseOrderBy(order); err != nil {
				checkValueError(t, err, "order", order)
			}
			err := o.Validate()
			if err != nil {
				var ve *restart.ValueError
				if !errors.As(err, &ve) {
					t.Errorf("Validate(%+v) = %v, want a *ValueError", o, err)
					return
				}
				fuzztest.Names(t, "fleet options", err, "-"+ve.Flag, ve.Value)
				fuzztest.OneLine(t, "fleet options", err)
				return
			}
			jobs := []Job{{Namespace: "b", JobID: "x", Priority: 1}, {Namespace: "a", JobID: "y", Priority: 9}, {Namespace: "a", JobID: "x", Priority: 1}}
			out, err := Order(jobs, o.Order)
			if err != nil || len(out) != len(jobs) {
				t.Errorf("valid options %+v: Order = %v, %v", o, out, err)
			}
		})
	})
}

func checkValueError(t *testing.T, err error, flag, value string) {
	t.Helper()
	var ve *restart.ValueError
	if !errors.As(err, &ve) || ve.Flag != flag || ve.Value != value {
		t.Errorf("-%s %s: %v (%T), want a *ValueError naming the flag and the value", flag, strconv.Quote(value), err, err)
	}
	fuzztest.Names(t, "-"+flag, err, "-"+flag, value)
	fuzztest.OneLine(t, "-"+flag, err)
}
