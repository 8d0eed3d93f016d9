package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	every := func(spec string) *Schedule {
		return &Schedule{ID: "s", Cron: spec, Status: StatusActive, Next: t0, Grace: 5 * time.Minute}
	}
	at := &Schedule{ID: "s", At: t0, Status: StatusActive, Next: t0, Grace: 5 * time.Minute}
	cases := []struct {
		name       string
		s          *Schedule
		now        time.Time
		run        time.Time
		missed     int
		lastMissed time.Time
		next       time.Time
		reason     string
	}{
		{"not yet due", every("0 2 * * *"), t0.Add(-time.Second), time.Time{}, 0, time.Time{}, t0, ""},
		{"due on time", every("0 2 * * *"), t0, t0, 0, time.Time{}, t0.Add(24 * time.Hour), ""},
		{"late within the grace", every("0 2 * * *"), t0.Add(5 * time.Minute), t0, 0, time.Time{}, t0.Add(24 * time.Hour), ""},
		{"past the grace: missed", every("0 2 * * *"), t0.Add(5*time.Minute + time.Second), time.Time{}, 1, t0, t0.Add(24 * time.Hour), "grace of 5m0s"},
		{"days without agent: one report", every("0 2 * * *"), t0.Add(72*time.Hour + time.Hour), time.Time{}, 4, t0.Add(72 * time.Hour), t0.Add(96 * time.Hour), "no agent was running"},
		{"backlog whose latest is in the grace: run it only", every("*/1 * * * *"), t0.Add(10*time.Minute + 30*time.Second), t0.Add(10 * time.Minute), 10, t0.Add(9 * time.Minute), t0.Add(11 * time.Minute), "only the latest"},
		{"two due at once", every("*/1 * * * *"), t0.Add(time.Minute), t0.Add(time.Minute), 1, t0, t0.Add(2 * time.Minute), "only the latest"},
		{"per-second cron, long outage: capped count, latest runs", every("* * * * * * *"), t0.Add(48 * time.Hour), t0.Add(48 * time.Hour), 48*3600 - 0, time.Time{}, t0.Add(48*time.Hour + time.Second), "only the latest"},
		{"at: due", at, t0.Add(time.Minute), t0, 0, time.Time{}, time.Time{}, ""},
		{"at: missed", at, t0.Add(time.Hour), time.Time{}, 1, t0, time.Time{}, "grace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := tc.s.Plan(tc.now)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Run.Equal(tc.run) || !st.Next.Equal(tc.next) {
				t.Fatalf("run %v next %v; want run %v next %v", st.Run, st.Next, tc.run, tc.next)
			}
			if strings.HasPrefix(tc.name, "per-second") {
				// The count of a capped backlog is a floor.
				if st.Missed < maxCount-1 {
					t.Fatalf("missed %d; want at least %d", st.Missed, maxCount-1)
				}
			} else if st.Missed != tc.missed || !st.LastMissed.Equal(tc.lastMissed) {
				t.Fatalf("missed %d (last %v); want %d (last %v)", st.Missed, st.LastMissed, tc.missed, tc.lastMissed)
			}
			if !strings.Contains(st.MissedReason, tc.reason) || (tc.reason == "") != (st.MissedReason == "") {
				t.Fatalf("reason %q; want one containing %q", st.MissedReason, tc.reason)
			}
		})
	}
}

// Applying steps one after the other never runs an occurrence twice nor skips one
// without recording it: every occurrence is started, skipped or missed exactly once.
func TestApplyAccountsForEveryOccurrence(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := &Schedule{ID: "s", Cron: "*/1 * * * *", Status: StatusActive, Next: t0, Grace: 90 * time.Second}
	// An agent that looks at irregular moments, with an outage between 20m and 40m.
	looks := []time.Duration{0, 30 * time.Second, time.Minute, 2*time.Minute + 10*time.Second, 3 * time.Minute, 20 * time.Minute, 40*time.Minute + 5*time.Second, 41 * time.Minute}
	started := map[time.Time]int{}
	for i, d := range looks {
		now := t0.Add(d)
		st, err := s.Plan(now)
		if err != nil {
			t.Fatal(err)
		}
		out := Outcome{Result: ResultStarted, RestartID: OccurrenceID(s.ID, st.Run)}
		if i%3 == 2 {
			out = Outcome{Result: ResultSkipped, Reason: "job busy"}
		}
		if !st.Run.IsZero() && out.Result == ResultStarted {
			started[st.Run]++
		}
		s.Apply(st, out, now)
		if s.Due(now) {
			t.Fatalf("still due at %v after Apply", now)
		}
	}
	for due, n := range started {
		if n != 1 {
			t.Fatalf("occurrence %v started %d times", due, n)
		}
	}
	total := s.Started + s.Skipped + s.Failed + s.Missed
	if want := 42; total != want { // occurrences 00:00 .. 00:41
		t.Fatalf("started %d + skipped %d + missed %d = %d; want %d", s.Started, s.Skipped, s.Missed, total, want)
	}
	if !s.Next.Equal(t0.Add(42*time.Minute)) || s.Status != StatusActive {
		t.Fatalf("next %v status %s", s.Next, s.Status)
	}
	if s.Missed == 0 || s.LastMissed.IsZero() || s.MissedReason == "" {
		t.Fatalf("the outage's occurrences are not reported: %+v", s)
	}
}

func TestApplyEndsAtSchedule(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	for _, res := range []Result{ResultStarted, ResultSkipped, ResultFailed, ResultMissed} {
		s := &Schedule{ID: "s", At: t0, Status: StatusActive, Next: t0}
		now := t0.Add(time.Second)
		if res == ResultMissed {
			now = t0.Add(time.Hour)
		}
		st, err := s.Plan(now)
		if err != nil {
			t.Fatal(err)
		}
		s.Apply(st, Outcome{Result: res}, now)
		if s.Status != StatusDone || !s.Next.IsZero() || s.Due(now.Add(time.Hour)) {
			t.Fatalf("%s: status %s next %v; want done", res, s.Status, s.Next)
		}
		if len(s.History) != 1 || s.History[0].Result != res {
			t.Fatalf("%s: history %+v", res, s.History)
		}
	}
}

func TestHistoryIsBounded(t *testing.T) {
	s := &Schedule{ID: "s", Cron: "* * * * *", Status: StatusActive}
	for i := 0; i < 3*HistoryLimit; i++ {
		s.remember(Occurrence{Count: i})
	}
	if len(s.History) != HistoryLimit || s.History[HistoryLimit-1].Count != 3*HistoryLimit-1 {
		t.Fatalf("history of %d, last %+v", len(s.History), s.History[len(s.History)-1])
	}
}
