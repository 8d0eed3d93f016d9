package conformance

import (
	"slices"
	"testing"

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
