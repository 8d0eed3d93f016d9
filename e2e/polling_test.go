package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestNoFixedIntervalPolling catches a driver that polls Nomad on an interval where a
// blocking query exists. The tasks take 200 s (simulated; 10 s of real time) to start: the
// driver stores that it waits on them within 2 s (its progress linger); once it waits on
// the first batch to run again, nothing changes in the cluster, and
// the requests it sends in the next 2 s of real time are counted: a driver waiting on blocking queries sends none
// (a lease renewal, every 7.5 s, may fall in the window: one is allowed), a poller sends
// one or more per poll. Requests are counted, not time: a slow machine cannot fail it.
func TestNoFixedIntervalPolling(t *testing.T) {
	for _, resched := range []bool{false, true} {
		sc := scenario{jobType: "service", count: 4, reschedule: resched, state: "nomad", batchSize: 2}
		t.Run(fmt.Sprintf("reschedule=%v", resched), func(t *testing.T) {
			// 20, not simtest.TimeScale: the timings above (200 s of starts in 10 s) are at 20.
			c := simtest.Start(t, nomadsim.Options{TimeScale: 20, Seed: 21})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			job := newJob("patient", "service", sc.count)
			job.TaskGroups[0].Tasks[0].Meta = map[string]string{"nomadsim.start_delay": "200s"}
			if err := register(ctx, c, job); err != nil {
				t.Fatal(err)
			}
			client := apiClient(t, c)
			st := nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
			env := driverEnv{addr: c.Addr(), stateHome: t.TempDir()}
			ch, err := env.start(sc.runArgs("patient")...)
			if err != nil {
				t.Fatal(err)
			}
			defer ch.kill()
			allWaiting := func(r *restart.Record) bool {
				n := 0
				for _, a := range r.Allocs {
					if a.Batch == 1 && a.State == restart.AllocWaiting {
						n++
					}
				}
				return n == sc.batchSize
			}
			if _, ok := waitForRecord(ctx, st, "patient", allWaiting); !ok {
				t.Fatalf("the first batch never waited on its allocations:\n%s", ch.out.String())
			}
			// Let the driver settle into its waits (its last write and the watches it
			// starts after it) before counting.
			time.Sleep(300 * time.Millisecond)
			c.ResetStats()
			time.Sleep(2 * time.Second)
			idle := c.Stats()
			for _, k := range idle.Keys() {
				t.Logf("while waiting: %-40s %d", k, idle.Endpoints[k].Requests)
			}
			renewals := idle.Get("PUT", "/v1/var/:path").Requests
			if others := idle.Requests - renewals; others > 0 || renewals > 1 {
				t.Errorf("the driver sent %d requests in 2 s while nothing changed (%d variable writes): something polls Nomad on an interval", idle.Requests, renewals)
			}
		})
	}
}
