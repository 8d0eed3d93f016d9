package simtest

// This file checks the exactly-once invariant from Nomad's own facts, for tests that drive
// restarts against a Nomad API (nomadsim or a real agent).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Counts are the restarts Nomad recorded per allocation of a job.
type Counts struct {
	// InPlace is, per allocation ID, the number of restart requests its tasks received: the
	// most "Restart Signaled" task events of any one task (Nomad logs one per request and
	// task; a task's own crash logs none, so crashes are not counted).
	InPlace map[string]int
	// Replaced is, per allocation ID, the number of allocations whose PreviousAllocation
	// names it: more than one means it was stopped and replaced more than once.
	Replaced map[string]int
	// Allocs are the job's allocations as read.
	Allocs []*api.Allocation
}

// CountRestarts reads every allocation of the job (with its task events) and counts, from
// Nomad's facts only, how often each was restarted in place and replaced. Nomad keeps the last
// 10 events per task, enough for tests that restart each allocation a few times at most.
func CountRestarts(ctx context.Context, client *api.Client, namespace, jobID string) (*Counts, error) {
	q := (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
	stubs, _, err := client.Jobs().Allocations(jobID, true, q)
	if err != nil {
		return nil, fmt.Errorf("listing allocations of job %q: %w", jobID, err)
	}
	c := &Counts{InPlace: map[string]int{}, Replaced: map[string]int{}}
	for _, s := range stubs {
		a, _, err := client.Allocations().Info(s.ID, q)
		if err != nil {
			return nil, fmt.Errorf("reading allocation %q: %w", s.ID, err)
		}
		c.Allocs = append(c.Allocs, a)
		most := 0
		for _, ts := range a.TaskStates {
			n := 0
			for _, e := range ts.Events {
				if e.Type == api.TaskRestartSignal {
					n++
				}
			}
			most = max(most, n)
		}
		if most > 0 {
			c.InPlace[a.ID] = most
		}
		if a.PreviousAllocation != "" {
			c.Replaced[a.PreviousAllocation]++
		}
	}
	return c, nil
}

// ExactlyOnce checks that every allocation in ids was restarted exactly once (in place, or
// replaced once with reschedule) and that no other allocation was restarted. It returns a
// description of every violation, or nil.
func (c *Counts) ExactlyOnce(ids []string, reschedule bool) []string {
	got := c.InPlace
	if reschedule {
		got = c.Replaced
	}
	want := map[string]bool{}
	var bad []string
	for _, id := range ids {
		want[id] = true
		if got[id] != 1 {
			bad = append(bad, fmt.Sprintf("allocation %s restarted %d times, want 1", id, got[id]))
		}
	}
	for id, n := range got {
		if !want[id] {
			if reschedule {
				// A replacement replaced again (a failed replacement) is Nomad's doing, not ours,
				// unless it is one of ours: only planned allocations count.
				continue
			}
			bad = append(bad, fmt.Sprintf("allocation %s not in the plan was restarted %d times", id, n))
		}
	}
	return bad
}

// CheckOnce fails the test, naming each violation of ExactlyOnce, unless Nomad's facts of job
// namespace/jobID (read within d) show every allocation in ids restarted exactly once and no
// other restarted.
func CheckOnce(t testing.TB, client *api.Client, namespace, jobID string, ids []string, reschedule bool, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := CountRestarts(ctx, client, namespace, jobID)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range c.ExactlyOnce(ids, reschedule) {
		t.Error(bad)
	}
}
