package engine

import (
	"net/http"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestE2EFeed restarts a job while the job's event stream works, is refused, or keeps
// breaking: each ends with every allocation restarted exactly once. With the stream, the
// allocations are neither read before their requests nor followed with blocking queries;
// refused, the driver reads and follows them as before.
func TestE2EFeed(t *testing.T) {
	cases := []struct {
		name  string
		fault *nomadsim.Fault
		// maxReads bounds the allocation reads per restarted allocation.
		maxReads float64
		// minReads: at least this many per allocation (the fallback's reads).
		minReads float64
	}{
		{name: "stream", maxReads: 0.2},
		{name: "stream refused", fault: &nomadsim.Fault{Path: "/v1/event/stream", Status: http.StatusForbidden, Body: "Permission denied"}, minReads: 2},
		{name: "stream breaking", fault: &nomadsim.Fault{Path: "/v1/event/stream", ErrorRate: 0.5, Drop: true}, maxReads: 4},
	}
	for _, tc := range cases {
		for _, resched := range []bool{false, true} {
			name := tc.name + "/in place"
			if resched {
				name = tc.name + "/reschedule"
			}
			t.Run(name, func(t *testing.T) {
				env := startSim(t, true)
				env.register(t, "web", "service", map[string]int{"api": 6, "web": 4})
				if tc.fault != nil {
					env.sim.SetFault(*tc.fault)
				}
				rec := env.plan(t, "web", restart.Spec{BatchSizes: []restart.BatchSize{{N: 4}}, Reschedule: resched, Yes: true})
				env.sim.ResetStats()
				var l eventLog
				final := drive(t, env.e, rec, &l)
				if final.Status != restart.StatusSucceeded {
					t.Fatalf("status %s (%s)\n%s", final.Status, final.Reason, l.messages())
				}
				reads := float64(env.sim.Stats().Get("GET", "/v1/allocation/:id").Requests) / float64(len(final.Allocs))
				env.checkOnce(t, final)
				if tc.maxReads > 0 && reads > tc.maxReads {
					t.Errorf("%.2f allocation reads per allocation, want at most %.2f", reads, tc.maxReads)
				}
				if reads < tc.minReads {
					t.Errorf("%.2f allocation reads per allocation, want at least %.2f (the driver must follow them somehow)", reads, tc.minReads)
				}
				t.Logf("%.2f allocation reads per allocation", reads)
			})
		}
	}
}
