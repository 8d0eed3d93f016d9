package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestNoFixedIntervalPolling restarts the same job twice, once with tasks that start in
// 100 ms and once with tasks that take 30 s (simulated) to start, and compares the requests
// the driver sent: a driver that waits with blocking queries sends as many either way,
// one that polls on an interval sends more the longer it waits. Counts, not timings, are
// compared, so a slow machine cannot make it fail.
func TestNoFixedIntervalPolling(t *testing.T) {
	counts := map[string]nomadsim.Stats{}
	for _, startDelay := range []string{"100ms", "30s"} {
		for _, resched := range []bool{false, true} {
			c := startSim(t, nomadsim.Options{TimeScale: 50, Seed: 21})
			sc := scenario{jobType: "service", count: 4, reschedule: resched, state: "nomad", batchSize: 2}
			job := newJob("patient", "service", sc.count)
			if err := register(context.Background(), c, job); err != nil {
				t.Fatal(err)
			}
			// Only restarts see the slow start: the job ran before the script changed.
			job.TaskGroups[0].Tasks[0].Meta = map[string]string{"nomadsim.start_delay": startDelay}
			// A meta change is an in-place update in Nomad: no new allocations, no deployment.
			if err := register(context.Background(), c, job); err != nil {
				t.Fatal(err)
			}
			env := driverEnv{addr: c.Addr(), stateHome: t.TempDir()}
			c.ResetStats()
			ch, err := env.start(sc.runArgs("patient")...)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			code, err := ch.wait(ctx)
			cancel()
			if err != nil || code != 0 {
				t.Fatalf("%s start_delay %s: exit %d, %v:\n%s", sc, startDelay, code, err, ch.out.String())
			}
			counts[fmt.Sprintf("%v/%s", resched, startDelay)] = c.Stats()
		}
	}
	for _, resched := range []bool{false, true} {
		fast, slow := counts[fmt.Sprintf("%v/100ms", resched)], counts[fmt.Sprintf("%v/30s", resched)]
		t.Logf("reschedule=%v: %d requests with 100 ms starts, %d with 30 s starts", resched, fast.Requests, slow.Requests)
		// Slack: the order in which changes reach a blocking query may differ by a few
		// wake-ups; an interval poller over 30 s × 2 batches would add dozens.
		if slow.Requests > fast.Requests+6 {
			for _, k := range slow.Keys() {
				t.Logf("  %-45s fast %4d  slow %4d", k, fast.Get(slow.Endpoints[k].Method, slow.Endpoints[k].Route).Requests, slow.Endpoints[k].Requests)
			}
			t.Errorf("reschedule=%v: waiting longer cost %d more requests: something polls Nomad on an interval", resched, slow.Requests-fast.Requests)
		}
	}
}
