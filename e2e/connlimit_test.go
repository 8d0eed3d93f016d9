package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestConnLimitBatchOf100 restarts a 150-allocation service job in batches of 100 against a
// cluster that enforces Nomad's default limit of 100 concurrent HTTP connections per client
// address. A driver holding a connection per allocation of a batch (plus its store's lease
// renewals) is refused with 429 there, as it was on a real agent; nomad-restart must
// succeed without a single refusal, restarting every allocation exactly once.
func TestConnLimitBatchOf100(t *testing.T) {
	const (
		allocs = 150
		batch  = 100
		limit  = 100 // Nomad's limits.http_max_conns_per_client default
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// Slower than simtest.TimeScale: a batch's restarts must overlap in real time for the
	// driver's connections to meet the limit at once.
	c := simtest.Start(t, nomadsim.Options{NodesPerDatacenter: 10, TimeScale: 20, Seed: 21, MaxConnsPerClient: limit})
	client := apiClient(t, c)
	job := newJob("connlimit", "service", allocs)
	job.TaskGroups[0].Tasks[0].Resources = &api.Resources{CPU: new(20), MemoryMB: new(16)}
	if err := register(ctx, c, job); err != nil {
		t.Fatal(err)
	}
	pre, err := snapshot(client, "connlimit")
	if err != nil {
		t.Fatal(err)
	}
	if len(pre) != allocs {
		t.Fatalf("%d running allocations, want %d", len(pre), allocs)
	}
	// Only the driver's connections from here on: the test's own client's pool is closed.
	client.Close()
	c.ResetConnStats()

	env := driverEnv{addr: c.Addr(), stateHome: t.TempDir()}
	ch, err := env.start("run", "-yes", "-json", "-on-error", "fail", "-state", "nomad", "-batch-size", fmt.Sprint(batch), "connlimit")
	if err != nil {
		t.Fatal(err)
	}
	code, err := ch.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conns := c.ConnStats()
	out := ch.out.String()
	t.Logf("driver's connections: peak %d at once from its address (limit %d), %d refused", conns.PeakPerClient, limit, conns.Refused)
	if conns.Refused != 0 {
		t.Errorf("nomadsim refused %d of the driver's connections with 429 (peak %d open at once, limit %d)", conns.Refused, conns.PeakPerClient, limit)
	}
	if code != 0 {
		t.Fatalf("nomad-restart exited %d:\n%s", code, tail(out, 4000))
	}
	_, rec, err := parseJSONRun(out)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != restart.StatusSucceeded || len(rec.Allocs) != allocs {
		t.Fatalf("restart %s with %d allocations, want succeeded with %d", rec.Status, len(rec.Allocs), allocs)
	}
	bad := checkRecord(rec, pre)
	more, err := checkInPlace(apiClient(t, c), "connlimit", pre, []string{"main"})
	if err != nil {
		t.Fatal(err)
	}
	if bad = append(bad, more...); len(bad) > 0 {
		t.Errorf("exactly-once broken:\n%s", joinLines(bad))
	}
}
