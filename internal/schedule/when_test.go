package schedule

import (
	"strings"
	"testing"
	"time"
)

func TestParseAt(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC) // 11:00 in Berlin
	cases := []struct {
		in      string
		loc     *time.Location
		want    time.Time
		wantErr string
	}{
		{"2026-12-01T02:00:00Z", berlin, time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC), ""},
		{"2026-12-01T02:00:00+01:00", time.UTC, time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), ""},
		{"2026-12-01 02:00", berlin, time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), ""},
		{"2026-12-01 02:00:30", time.UTC, time.Date(2026, 12, 1, 2, 0, 30, 0, time.UTC), ""},
		{"12:30", berlin, time.Date(2026, 11, 30, 11, 30, 0, 0, time.UTC), ""}, // later today
		{"02:00", berlin, time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC), ""},    // passed today: tomorrow
		{"11:00", berlin, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), ""},   // now exactly: tomorrow
		{"2026-11-30T09:59:59Z", time.UTC, time.Time{}, "in the past"},
		{"2026-11-30T10:00:00Z", time.UTC, time.Time{}, "in the past"},
		{"2025-01-01 00:00", berlin, time.Time{}, "in the past"},
		{"tomorrow", time.UTC, time.Time{}, "give an RFC 3339 time"},
		{"25:00", time.UTC, time.Time{}, "give an RFC 3339 time"},
		{"", time.UTC, time.Time{}, "give an RFC 3339 time"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseAt(tc.in, now, tc.loc)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "-at") {
					t.Fatalf("ParseAt(%q) = %v, %v; want an error about -at containing %q", tc.in, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("ParseAt(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseCron(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		spec, zone string
		want       time.Time // first occurrence after now
		wantErr    string
	}{
		{"0 2 * * *", "", time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC), ""},
		{"0 2 * * *", "UTC", time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC), ""},
		{"0 2 * * *", "America/New_York", time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC), ""},
		{"@daily", "Europe/Berlin", time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC), ""},
		{"*/15 * * * *", "", time.Date(2026, 11, 30, 10, 15, 0, 0, time.UTC), ""},
		{"*/10 * * * * * *", "", time.Date(2026, 11, 30, 10, 0, 10, 0, time.UTC), ""}, // with seconds
		{"0 0 1 1 * 2020", "", time.Time{}, "names no time after now"},
		{"61 * * * *", "", time.Time{}, "Invalid -every"},
		{"", "", time.Time{}, "Invalid -every"},
		{"0 2 * *", "", time.Time{}, "Invalid -every"},
		{"0 2 * * *", "Mars/Olympus", time.Time{}, "Invalid -time-zone"},
	}
	for _, tc := range cases {
		t.Run(tc.spec+" "+tc.zone, func(t *testing.T) {
			c, err := ParseCron(tc.spec, tc.zone, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(strings.Replace(err.Error(), "invalid", "Invalid", 1), tc.wantErr) {
					t.Fatalf("ParseCron(%q, %q) = %v; want an error containing %q", tc.spec, tc.zone, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Next(now)
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("Next = %v, %v; want %v", got.UTC(), err, tc.want)
			}
		})
	}
}

func TestOccurrenceIDIsStableAndDistinct(t *testing.T) {
	due := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	a := OccurrenceID("s1", due)
	if b := OccurrenceID("s1", due.In(time.FixedZone("x", 3600))); a != b {
		t.Fatalf("the same instant in another zone gave %s and %s", a, b)
	}
	if a == OccurrenceID("s1", due.Add(time.Second)) || a == OccurrenceID("s2", due) {
		t.Fatal("distinct occurrences share an ID")
	}
	if len(a) != 36 || !validID(a) {
		t.Fatalf("%q is not a UUID", a)
	}
}
