package restart

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestRecordZeroTimesJSON: a zero time is no longer written (omitzero), and a record written
// by an earlier version, which wrote every zero time as "0001-01-01T00:00:00Z", reads the
// same as one written now.
func TestRecordZeroTimesJSON(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := Record{ID: "r1", Status: StatusRunning, StartTime: start, CreateTime: start, ModifyTime: start,
		Allocs: []AllocProgress{{ID: "a1", StartTime: start, Before: &Observation{Restarts: map[string]uint64{"web": 1}}}},
		Surge:  []SurgeGroup{{Group: "web", UpTime: start}},
		Events: []Event{{Time: start, Message: "started"}},
	}
	now, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(now), "0001-01-01") {
		t.Fatalf("a zero time was written: %s", now)
	}
	const zero = `"0001-01-01T00:00:00Z"`
	old := strings.NewReplacer(
		`"StartTime":"2026-03-01T12:00:00Z"`, `"StartTime":"2026-03-01T12:00:00Z","EndTime":`+zero+`,"NextBatchAt":`+zero,
	).Replace(string(now))
	old = strings.Replace(old, `"UpTime":"2026-03-01T12:00:00Z"`, `"UpTime":"2026-03-01T12:00:00Z","DownTime":`+zero, 1)
	old = strings.Replace(old, `"Before":{`, `"Before":{"LastEventTime":`+zero+`,`, 1)
	if old == string(now) || strings.Count(old, "0001-01-01") < 4 {
		t.Fatalf("the earlier encoding was not made: %s", old)
	}
	var fromNow, fromOld Record
	if err := json.Unmarshal(now, &fromNow); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(old), &fromOld); err != nil {
		t.Fatalf("an earlier record does not decode: %v", err)
	}
	if !reflect.DeepEqual(fromNow, fromOld) || !reflect.DeepEqual(fromNow.Allocs, rec.Allocs) || !fromOld.EndTime.IsZero() || !fromOld.NextBatchAt.IsZero() {
		t.Fatalf("records differ:\nnow: %+v\nold: %+v", fromNow, fromOld)
	}
}
