package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestAllocationNotFoundKeepsNomadsText(t *testing.T) {
	n, rec := replayNomad(t, "20-allocation-unknown")
	_, err := n.Allocation(context.Background(), "00000000-0000-0000-0000-000000000000")
	if !errors.Is(err, ErrAllocNotFound) {
		t.Fatalf("want ErrAllocNotFound, got %v", err)
	}
	want := `reading allocation "00000000-0000-0000-0000-000000000000": Unexpected response code: 404 (alloc not found)`
	if err.Error() != want {
		t.Fatalf("error\n got %q\nwant %q", err, want)
	}
	if len(rec.seen()) != 1 {
		t.Fatalf("a 404 was retried: %d requests", len(rec.seen()))
	}
}

func TestWatchAllocationSkipsOtherChanges(t *testing.T) {
	before, after := loadExchange(t, "19-allocation-read"), loadExchange(t, "22-allocation-after-restart")
	var calls atomic.Int32
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			// Another allocation changed (table index 27): ours is still at 26.
			var a api.Allocation
			before.decodeBody(t, &a)
			jsonAt(w, 27, a)
		case 2:
			// Nomad's wait ended with no change at all.
			var a api.Allocation
			before.decodeBody(t, &a)
			jsonAt(w, 27, a)
		default:
			after.write(w)
		}
	})
	a, idx, err := n.WatchAllocation(context.Background(), "0c167182-0c38-d4a7-de65-1e23946d2e45", 26)
	if err != nil {
		t.Fatal(err)
	}
	if a.ModifyIndex != 31 || idx != 31 || a.Tasks["main"].Restarts != 1 {
		t.Fatalf("got modify index %d, next index %d, restarts %d", a.ModifyIndex, idx, a.Tasks["main"].Restarts)
	}
	reqs := rec.seen()
	if len(reqs) != 3 {
		t.Fatalf("want 3 blocking reads, got %d", len(reqs))
	}
	for i, want := range []string{"26", "27", "27"} {
		q := reqs[i].URL.Query()
		if q.Get("index") != want || q.Get("wait") != "1000ms" {
			t.Errorf("read %d: index=%s wait=%s, want index=%s wait=1000ms", i, q.Get("index"), q.Get("wait"), want)
		}
	}
}

func TestWatchAllocationFromZeroAnswersAtOnce(t *testing.T) {
	n, rec := replayNomad(t, "19-allocation-read")
	a, idx, err := n.WatchAllocation(context.Background(), "0c167182-0c38-d4a7-de65-1e23946d2e45", 0)
	if err != nil || a == nil || idx != 26 {
		t.Fatalf("got %v at %d: %v", a, idx, err)
	}
	if q := rec.seen()[0].URL.Query(); q.Has("index") {
		t.Fatalf("a read from index 0 should not block: %v", q)
	}
}

func TestWatchAllocationEndsWithContext(t *testing.T) {
	ex := loadExchange(t, "19-allocation-read")
	n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		ex.write(w)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := n.WatchAllocation(ctx, "0c167182-0c38-d4a7-de65-1e23946d2e45", 26)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want the context's error, got %v", err)
	}
}

func TestWatchJobAllocations(t *testing.T) {
	var stubs []*api.AllocationListStub
	loadExchange(t, "11-job-allocations").decodeBody(t, &stubs)
	var calls atomic.Int32
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			jsonAt(w, 30, stubs) // another job's allocation changed
			return
		}
		changed := *stubs[1]
		changed.ModifyIndex = 31
		changed.ClientStatus = "complete"
		jsonAt(w, 31, []*api.AllocationListStub{stubs[0], &changed, stubs[2]})
	})
	allocs, idx, err := n.WatchJobAllocations(context.Background(), "default", "sleepy", 28)
	if err != nil {
		t.Fatal(err)
	}
	if idx != 31 || len(allocs) != 3 {
		t.Fatalf("got %d allocs at %d", len(allocs), idx)
	}
	var found bool
	for _, a := range allocs {
		if a.ModifyIndex == 31 {
			found = a.ClientStatus == "complete" && a.Tasks != nil
		}
	}
	if !found {
		t.Fatalf("changed allocation missing: %+v", allocs)
	}
	reqs := rec.seen()
	if len(reqs) != 2 || reqs[0].URL.Query().Get("index") != "28" || reqs[1].URL.Query().Get("index") != "30" ||
		reqs[0].URL.Query().Get("all") != "true" {
		t.Fatalf("requests: %v", reqs)
	}
}

func TestRestartTasksRequests(t *testing.T) {
	for _, tc := range []struct {
		name     string
		task     string
		allTasks bool
		want     api.AllocationRestartRequest
	}{
		{"running tasks", "", false, api.AllocationRestartRequest{}},
		{"one task", "main", false, api.AllocationRestartRequest{TaskName: "main"}},
		{"all tasks", "", true, api.AllocationRestartRequest{AllTasks: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"Index":0}`))
			})
			if err := n.RestartTasks(context.Background(), "a1", tc.task, tc.allTasks); err != nil {
				t.Fatal(err)
			}
			r := rec.seen()[0]
			if r.Method != http.MethodPut || r.URL.Path != "/v1/client/allocation/a1/restart" {
				t.Fatalf("%s %s", r.Method, r.URL.Path)
			}
			var got api.AllocationRestartRequest
			if err := json.Unmarshal([]byte(rec.body(0)), &got); err != nil || got != tc.want {
				t.Fatalf("body %s, want %+v (%v)", rec.body(0), tc.want, err)
			}
		})
	}
}

func TestWritesAreNotRetried(t *testing.T) {
	for _, tc := range []answerCase{
		{"no leader", 500, "No cluster leader", true, nil},
		{"unknown task", 500, "Could not find task runner for task: nosuch", false, nil},
		{"task not running", 500, "Task not running", false, nil},
		{"denied", 403, "Permission denied", false, ErrPermissionDenied},
		{"unknown alloc", 404, "alloc not found", false, ErrAllocNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { plain(w, tc.code, tc.text) })
			ctx := context.Background()
			errs := []error{
				n.RestartTasks(ctx, "a1", "nosuch", false),
				func() error { _, err := n.StopAlloc(ctx, "a1", false); return err }(),
				n.ForceEvaluate(ctx, "default", "web"),
			}
			if got := len(rec.seen()); got != 3 {
				t.Fatalf("3 writes made %d requests", got)
			}
			for i, err := range errs {
				if err == nil || !strings.Contains(err.Error(), tc.text) {
					t.Fatalf("write %d: error %v should keep Nomad's text %q", i, err, tc.text)
				}
				if IsTransient(err) != tc.transient {
					t.Errorf("write %d: IsTransient(%v) = %v", i, err, !tc.transient)
				}
				if tc.kind != nil && i < 2 && !errors.Is(err, tc.kind) {
					t.Errorf("write %d: %v is not %v", i, err, tc.kind)
				}
			}
			if !strings.HasPrefix(errs[0].Error(), `restarting task "nosuch" of allocation "a1": `) {
				t.Errorf("restart error lacks context: %v", errs[0])
			}
		})
	}
}

func TestRecordedRestartDenied(t *testing.T) {
	n, _ := replayNomad(t, "55-acl-reader-restart-denied")
	err := n.RestartTasks(context.Background(), "5e6a97b0", "", false)
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("got %v", err)
	}
}

func TestStopAlloc(t *testing.T) {
	ex := loadExchange(t, "25-allocation-stop")
	for _, noDelay := range []bool{false, true} {
		n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { ex.write(w) })
		idx, err := n.StopAlloc(context.Background(), "44eb8390-df98-4a7c-8a57-efff508744e6", noDelay)
		if err != nil {
			t.Fatal(err)
		}
		if idx != 33 {
			t.Fatalf("stop index %d, want 33 (the recorded X-Nomad-Index)", idx)
		}
		r := rec.seen()[0]
		if r.Method != http.MethodPut || r.URL.Path != "/v1/allocation/44eb8390-df98-4a7c-8a57-efff508744e6/stop" {
			t.Fatalf("%s %s", r.Method, r.URL.Path)
		}
		if got := r.URL.Query().Get("no_shutdown_delay"); (got == "true") != noDelay {
			t.Fatalf("no_shutdown_delay=%q with noShutdownDelay %v", got, noDelay)
		}
	}
}

func TestReadsRetryTransientErrors(t *testing.T) {
	ex := loadExchange(t, "19-allocation-read")
	var calls atomic.Int32
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		switch calls.Add(1) {
		case 1:
			plain(w, 500, "No cluster leader")
		case 2:
			plain(w, 503, "")
		case 3:
			// A connection cut in the middle of the answer.
			hj, ok := w.(http.Hijacker)
			if !ok {
				t.Error("no hijacker")
				return
			}
			conn, _, _ := hj.Hijack()
			_ = conn.Close()
		default:
			ex.write(w)
		}
	})
	a, err := n.Allocation(context.Background(), "0c167182-0c38-d4a7-de65-1e23946d2e45")
	if err != nil || a.ModifyIndex != 26 {
		t.Fatalf("got %v, %v", a, err)
	}
	if len(rec.seen()) != 4 {
		t.Fatalf("want 4 attempts, got %d", len(rec.seen()))
	}
}

func TestReadsGiveUpAfterMaxElapsed(t *testing.T) {
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { plain(w, 500, "No cluster leader") })
	n.retry = RetryPolicy{Initial: time.Millisecond, Max: 2 * time.Millisecond, MaxElapsed: 30 * time.Millisecond}
	_, err := n.Allocation(context.Background(), "a1")
	if err == nil || !strings.Contains(err.Error(), "No cluster leader") || !strings.Contains(err.Error(), `reading allocation "a1"`) {
		t.Fatalf("got %v", err)
	}
	if !IsTransient(err) {
		t.Fatalf("the final error should still read as transient: %v", err)
	}
	if len(rec.seen()) < 2 {
		t.Fatalf("not retried: %d requests", len(rec.seen()))
	}
}

func TestStopAllocWithoutIndexHeader(t *testing.T) {
	stopped := loadExchange(t, "19-allocation-read")
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"EvalID":"e1","Index":33}`))
			return
		}
		stopped.write(w)
	})
	idx, err := n.StopAlloc(context.Background(), "0c167182-0c38-d4a7-de65-1e23946d2e45", false)
	if err != nil || idx != 26 {
		t.Fatalf("index %d, %v: want the allocation's ModifyIndex 26", idx, err)
	}
	if reqs := rec.seen(); len(reqs) != 2 || reqs[1].Method != http.MethodGet {
		t.Fatalf("requests %v", reqs)
	}
}

func TestAllocChecksRecorded(t *testing.T) {
	n, rec := replayNomad(t, "49-allocation-checks")
	got, err := n.AllocChecks(context.Background(), "420beacf-6468-9f8a-46e0-e89720c8e6d1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("got %d checks", len(got))
	}
	c := got[0]
	want := CheckResult{
		ID:   "1f648be662684b0c28c2af518de9b88b7ec80787a86f7630f507abead607e60d",
		Name: `service: "web" check`, Group: "web.web[0]", Service: "web", Mode: "healthiness",
		Status: "success", StatusCode: 200, Output: "nomad: http ok", Time: time.Unix(1796008707, 0).UTC(),
	}
	if c != want {
		t.Fatalf("got %+v\nwant %+v", c, want)
	}
	if p := rec.seen()[0].URL.Path; p != "/v1/client/allocation/420beacf-6468-9f8a-46e0-e89720c8e6d1/checks" {
		t.Fatalf("asked %s", p)
	}
}

func TestAllocChecksUnknownAllocation(t *testing.T) {
	n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { plain(w, 404, "alloc not found") })
	if _, err := n.AllocChecks(context.Background(), "nosuch"); !errors.Is(err, ErrAllocNotFound) {
		t.Fatalf("got %v", err)
	}
}
