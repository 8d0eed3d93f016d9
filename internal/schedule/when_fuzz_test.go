package schedule

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
)

// fuzzNow is a moment between 2000 and about 2090 from any number: cron's years end at
// 2099, and an -at or a schedule is written for the years around now.
func fuzzNow(n int64) time.Time {
	const span = 90 * 365 * 24 * 3600
	return time.Unix(946684800+((n%span)+span)%span, 0).UTC()
}

// fuzzZones are -time-zone's shapes: UTC, IANA names with and without daylight saving, the
// machine's zone, and names that are none.
var fuzzZones = []string{"", "UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Local", "Mars/Olympus", "../etc/passwd"}

// FuzzParseAt reads any -at value, at any moment, in any zone: a refusal names -at and the
// value in one line; an accepted time is after now.
func FuzzParseAt(f *testing.F) {
	for _, s := range []string{"2026-12-01T02:00:00Z", "2026-12-01T02:00:00+01:00", "2026-12-01 02:00", "2026-12-01 02:00:30",
		"12:30", "02:00", "11:00", "2026-11-30T09:59:59Z", "2026-11-30T10:00:00Z", "2025-01-01 00:00", "tomorrow", "25:00", "",
		"2026-03-29 02:30", "24:00", "2026-02-30 01:00", "9999-12-31T23:59:59Z", " 12:30 \n"} {
		f.Add(s, int64(1795946400), uint8(2)) // 2026-11-30 10:00 UTC, in Berlin
	}
	f.Fuzz(func(t *testing.T, s string, now int64, zone uint8) {
		loc, err := LoadZone(fuzzZones[int(zone)%len(fuzzZones)])
		if err != nil {
			loc = nil // ParseAt's default: the machine's zone
		}
		at := fuzzNow(now)
		fuzztest.Bound(t, "ParseAt", func() {
			got, err := ParseAt(s, at, loc)
			what := "-at " + strconv.Quote(s)
			if err != nil {
				fuzztest.Names(t, what, err, "-at", strings.TrimSpace(s))
				fuzztest.OneLine(t, what, err)
				return
			}
			if !got.After(at) {
				t.Errorf("%s at %s = %s, not after now", what, at, got)
			}
		})
	})
}

// FuzzParseCron reads any -every and -time-zone: a refusal names the flag and its value in
// one line; an accepted expression's next time is after now, and a schedule of it plans
// any moment after it (a backlog as long as the span fuzzed) without failing: at most one
// occurrence to run, due by now and within the grace, the next one after now.
func FuzzParseCron(f *testing.F) {
	for _, c := range []struct{ spec, zone string }{
		{"0 2 * * *", ""}, {"0 2 * * *", "UTC"}, {"0 2 * * *", "America/New_York"}, {"@daily", "Europe/Berlin"},
		{"*/15 * * * *", ""}, {"*/10 * * * * * *", ""}, {"0 0 1 1 * 2020", ""}, {"61 * * * *", ""}, {"", ""},
		{"0 2 * * *", "Mars/Olympus"}, {"* * * * * * *", ""}, {"*/1 * * * *", ""}, {"0 0 30 2 *", ""}, {"@every 1h", ""},
		{"0 0 29 2 * 2096", "Local"}, {"L W * * *", ""}, {"0 2 * * *", "Australia/Lord_Howe"}, {"30 2 * * *", "Europe/Berlin"},
	} {
		f.Add(c.spec, c.zone, int64(1795946400), uint32(3600), int64(5*time.Minute))
	}
	f.Fuzz(func(t *testing.T, spec, zone string, now int64, late uint32, grace int64) {
		at := fuzzNow(now)
		fuzztest.Bound(t, "ParseCron and Plan", func() {
			c, err := ParseCron(spec, zone, at)
			what := "-every " + strconv.Quote(spec) + " -time-zone " + strconv.Quote(zone)
			if err != nil {
				if _, zerr := LoadZone(zone); zerr != nil {
					fuzztest.Names(t, what, err, "-time-zone", zone)
				} else {
					fuzztest.Names(t, what, err, "-every", spec)
				}
				fuzztest.OneLine(t, what, err)
				return
			}
			next, err := c.Next(at)
			if err != nil || !next.After(at) {
				t.Errorf("%s at %s: next %s, %v", what, at, next, err)
				return
			}
			// A backlog of up to three hours: a per-second cron walks 10800 occurrences.
			s := &Schedule{ID: "s", Cron: spec, TimeZone: zone, Status: StatusActive, Next: next, Grace: time.Duration(grace)}
			checkPlan(t, what, s, next.Add(time.Duration(late%(3*3600))*time.Second))
		})
	})
}

// checkPlan checks what a due schedule asks for at now.
func checkPlan(t *testing.T, what string, s *Schedule, now time.Time) {
	before := s.Next
	st, err := s.Plan(now)
	if err != nil {
		t.Errorf("%s: Plan at %s: %v", what, now, err)
		return
	}
	grace := s.Grace
	if grace <= 0 {
		grace = DefaultGrace
	}
	if !st.Run.IsZero() && (st.Run.After(now) || st.Run.Before(before) || now.Sub(st.Run) > grace) {
		t.Errorf("%s: Plan at %s (due %s, grace %s) runs the occurrence of %s", what, now, before, grace, st.Run)
	}
	if st.Missed < 0 || (st.Missed > 0) != !st.LastMissed.IsZero() || (st.Missed > 0) != (st.MissedReason != "") {
		t.Errorf("%s: Plan at %s misses %d (last %s, %q)", what, now, st.Missed, st.LastMissed, st.MissedReason)
	}
	if st.Run.IsZero() && st.Missed == 0 && s.Due(now) {
		t.Errorf("%s: Plan at %s, due at %s, neither runs nor misses anything", what, now, before)
	}
	if !st.Next.IsZero() && !st.Next.After(now) {
		t.Errorf("%s: Plan at %s: the next occurrence %s is not after now", what, now, st.Next)
	}
}

// FuzzScheduleRecord decodes any stored schedule variable, as the agent reads it, and
// plans it: a variable that is not a schedule of its path is an error, never a panic or a
// schedule; one that decodes plans at any moment with an answer or an error, never a
// panic or a hang.
func FuzzScheduleRecord(f *testing.F) {
	st := NewStore(nomadvars.New(nil, nomadvars.Options{}), "")
	const id = "6f1c3d2e-8a4b-4c5d-9e6f-0a1b2c3d4e5f"
	for _, sc := range []*Schedule{
		{ID: id, JobID: "web", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Status: StatusActive, Next: time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), Grace: 5 * time.Minute},
		{ID: id, JobID: "web", At: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC), Status: StatusActive, Next: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)},
		{ID: id, Fleet: &FleetTarget{}, Cron: "* * * * * * *", Status: StatusActive, Next: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), Grace: -1},
		{ID: id, JobID: "web", Cron: "61 * * * *", Status: StatusActive, Next: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{ID: id, JobID: "web", Cron: "0 2 * * *", TimeZone: "Mars/Olympus", Status: StatusActive, Next: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		b, err := json.Marshal(sc)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(b), st.Path(id), int64(1795946400))
	}
	f.Add(`{"ID":"x"}`, st.Path(id), int64(0))
	f.Add(`[]`, "nomad-restart/schedules/x/schedule", int64(0))
	f.Fuzz(func(t *testing.T, item, path string, now int64) {
		v := &nomadvars.Variable{Namespace: "default", Path: path, Items: map[string]string{"schedule": item}}
		fuzztest.Bound(t, "decoding and planning a schedule", func() {
			sc, err := st.decode(v)
			if err != nil {
				if sc != nil {
					t.Errorf("decode(%q at %q) = %+v and %v", item, path, sc, err)
				}
				fuzztest.Names(t, "schedule variable", err, path)
				return
			}
			if sc.ID == "" || st.Path(sc.ID) != path {
				t.Errorf("decode(%q at %q) = schedule %q, not the one its path names", item, path, sc.ID)
			}
			at := fuzzNow(now)
			if _, err := sc.Plan(at); err == nil && sc.Due(at) {
				checkPlan(t, "stored schedule", sc, at)
			}
		})
	})
}
