package conformance

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestEventStreamFiltersAllocationsByJob(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		mine, other := tg.id("events-mine"), tg.id("events-other")
		ctx := tg.ctx(t)
		stream, err := tg.api.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicAllocation: {mine}}, 0, nil)
		if err != nil {
			t.Fatalf("open event stream: %v", err)
		}
		tg.register(t, sleepJob(other, 1))
		tg.register(t, sleepJob(mine, 1))

		// Read until this job's allocation is reported running; every event on the way
		// must be about this job's allocations only.
		var types []string
		for running := false; !running; {
			var batch *api.Events
			select {
			case batch = <-stream:
			case <-ctx.Done():
				t.Fatalf("no event showing %s's allocation running within %v; event types seen: %v", mine, tg.patience, types)
			}
			if batch == nil {
				t.Fatalf("event stream closed early; event types seen: %v", types)
			}
			if batch.Err != nil {
				t.Fatalf("event stream: %v", batch.Err)
			}
			if batch.IsHeartbeat() {
				continue
			}
			for _, e := range batch.Events {
				types = append(types, e.Type)
				if e.Topic != api.TopicAllocation || e.Index == 0 || e.Index > batch.Index {
					t.Errorf("event %s: Topic %q Index %d (frame index %d)", e.Type, e.Topic, e.Index, batch.Index)
				}
				alloc, err := e.Allocation()
				if err != nil || alloc == nil {
					t.Fatalf("event %s %s: payload is not an allocation: %v", e.Type, e.Key, err)
				}
				if alloc.JobID != mine || e.Key != alloc.ID || !slices.Contains(e.FilterKeys, mine) {
					t.Errorf("event %s about job %q allocation %s (Key %s, FilterKeys %v): the stream is filtered to job %s", e.Type, alloc.JobID, alloc.ID, e.Key, e.FilterKeys, mine)
				}
				if alloc.Job != nil {
					t.Errorf("event %s: the allocation payload carries its Job; Nomad's events omit it", e.Type)
				}
				if alloc.ClientStatus == api.AllocClientStatusRunning {
					running = true
				}
			}
		}
		for _, typ := range types {
			switch typ {
			case "PlanResult", "AllocationUpdated", "AllocationUpdateDesiredStatus", "AllocationCreated":
			default:
				t.Errorf("unexpected allocation event type %q", typ)
			}
		}
	})
}

// TestEventStreamDeniedWithoutToken: on a cluster with ACLs, an event stream whose token
// may not read (none here) is answered as any stream is, 200 with the stream's headers,
// and then nothing: no heartbeat, no event, no 403 to read (Nomad's HTTP handler writes
// the headers before its RPC checks the token, and closes the connection some 10 to 35 s
// later). A client that waits for the first heartbeat must bound that wait itself.
func TestEventStreamDeniedWithoutToken(t *testing.T) {
	forEachTarget(t, targetOptions{acls: true}, func(t *testing.T, tg *target) {
		ctx, cancel := context.WithTimeout(tg.ctx(t), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", tg.addr+"/v1/event/stream?topic=Job", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tg.http.Do(req)
		if err != nil {
			t.Fatalf("event stream without a token: %v", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Cache-Control") != "no-cache" {
			t.Errorf("event stream without a token: %d, Content-Type %q, Cache-Control %q; want the stream's 200 and headers",
				resp.StatusCode, resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"))
		}
		got := make(chan string, 1)
		go func() {
			b := make([]byte, 64)
			n, _ := resp.Body.Read(b)
			got <- string(b[:n])
		}()
		select {
		case body := <-got:
			if body != "" {
				t.Errorf("event stream without a token sent %q; want nothing (no heartbeat)", body)
			}
		case <-time.After(2 * time.Second):
			// Nothing within 2 s: a real agent's heartbeat comes at once for a token that
			// may read.
		}
	})
}
