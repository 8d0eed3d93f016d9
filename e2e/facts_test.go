package e2e

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// before is what Nomad said about one allocation before the restart began: the facts the
// exactly-once check compares with afterwards.
type before struct {
	ID       string
	Restarts map[string]uint64 // by task
	// LastEvent is the time of the task's newest event, in Nomad's own clock.
	LastEvent map[string]int64
}

// snapshot reads the job's running allocations, the ones a restart is meant to restart.
func snapshot(client *api.Client, jobID string) (map[string]before, error) {
	allocs, err := jobAllocs(client, jobID)
	if err != nil {
		return nil, err
	}
	out := map[string]before{}
	for _, a := range allocs {
		if a.ClientStatus != api.AllocClientStatusRunning || a.DesiredStatus != api.AllocDesiredStatusRun {
			continue
		}
		b := before{ID: a.ID, Restarts: map[string]uint64{}, LastEvent: map[string]int64{}}
		for name, ts := range a.TaskStates {
			b.Restarts[name] = ts.Restarts
			for _, e := range ts.Events {
				if e.Time > b.LastEvent[name] {
					b.LastEvent[name] = e.Time
				}
			}
		}
		out[a.ID] = b
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("job %s has no running allocation", jobID)
	}
	return out, nil
}

// jobAllocs reads every allocation of the job in full.
func jobAllocs(client *api.Client, jobID string) ([]*api.Allocation, error) {
	stubs, _, err := client.Jobs().Allocations(jobID, true, nil)
	if err != nil {
		return nil, fmt.Errorf("allocations of %s: %w", jobID, err)
	}
	out := make([]*api.Allocation, 0, len(stubs))
	for _, s := range stubs {
		a, _, err := client.Allocations().Info(s.ID, nil)
		if err != nil {
			return nil, fmt.Errorf("allocation %s: %w", s.ID, err)
		}
		out = append(out, a)
	}
	return out, nil
}

// checkInPlace lists every breach of exactly-once for an in-place restart of the tasks
// named: each one's Restarts counter rose by exactly one, exactly one "Restart Signaled"
// event came after the restart began, and it runs again.
func checkInPlace(client *api.Client, jobID string, pre map[string]before, tasks []string) ([]string, error) {
	allocs, err := jobAllocs(client, jobID)
	if err != nil {
		return nil, err
	}
	byID := map[string]*api.Allocation{}
	for _, a := range allocs {
		byID[a.ID] = a
	}
	var bad []string
	for _, b := range sortedBefore(pre) {
		a := byID[b.ID]
		if a == nil {
			bad = append(bad, fmt.Sprintf("alloc %s: gone", b.ID[:8]))
			continue
		}
		for _, task := range tasks {
			ts := a.TaskStates[task]
			if ts == nil {
				bad = append(bad, fmt.Sprintf("alloc %s task %s: no state", b.ID[:8], task))
				continue
			}
			if got, want := ts.Restarts, b.Restarts[task]+1; got != want {
				bad = append(bad, fmt.Sprintf("alloc %s task %s: Restarts %d, want %d", b.ID[:8], task, got, want))
			}
			signaled := 0
			for _, e := range ts.Events {
				if e.Type == api.TaskRestartSignal && e.Time > b.LastEvent[task] {
					signaled++
				}
			}
			if signaled != 1 {
				bad = append(bad, fmt.Sprintf("alloc %s task %s: %d %q events after the start, want 1", b.ID[:8], task, signaled, api.TaskRestartSignal))
			}
			if ts.State != "running" {
				bad = append(bad, fmt.Sprintf("alloc %s task %s: state %s, want running", b.ID[:8], task, ts.State))
			}
		}
	}
	return bad, nil
}

// checkRescheduled lists every breach of exactly-once for a restart with -reschedule: each
// original allocation stopped and has exactly one replacement, which runs and was not
// itself stopped or replaced.
func checkRescheduled(client *api.Client, jobID string, pre map[string]before) ([]string, error) {
	allocs, err := jobAllocs(client, jobID)
	if err != nil {
		return nil, err
	}
	byID := map[string]*api.Allocation{}
	next := map[string][]*api.Allocation{}
	for _, a := range allocs {
		byID[a.ID] = a
		if a.PreviousAllocation != "" {
			next[a.PreviousAllocation] = append(next[a.PreviousAllocation], a)
		}
	}
	var bad []string
	for _, b := range sortedBefore(pre) {
		orig := byID[b.ID]
		if orig == nil {
			bad = append(bad, fmt.Sprintf("alloc %s: gone", b.ID[:8]))
			continue
		}
		if orig.DesiredStatus != api.AllocDesiredStatusStop {
			bad = append(bad, fmt.Sprintf("alloc %s: desired status %s, want stop", b.ID[:8], orig.DesiredStatus))
		}
		repl := next[b.ID]
		if len(repl) != 1 {
			bad = append(bad, fmt.Sprintf("alloc %s: %d replacements, want 1", b.ID[:8], len(repl)))
			continue
		}
		r := repl[0]
		if r.DesiredStatus != api.AllocDesiredStatusRun || r.ClientStatus != api.AllocClientStatusRunning {
			bad = append(bad, fmt.Sprintf("replacement %s of %s: %s/%s, want run/running", r.ID[:8], b.ID[:8], r.DesiredStatus, r.ClientStatus))
		}
		if len(next[r.ID]) != 0 {
			bad = append(bad, fmt.Sprintf("replacement %s of %s was itself replaced", r.ID[:8], b.ID[:8]))
		}
	}
	if want := 2 * len(pre); len(allocs) != want {
		bad = append(bad, fmt.Sprintf("job has %d allocations, want %d (each original and one replacement)", len(allocs), want))
	}
	return bad, nil
}

// checkRecord lists what is wrong with a finished restart's record.
func checkRecord(rec *restart.Record, pre map[string]before) []string {
	var bad []string
	if rec.Status != restart.StatusSucceeded {
		bad = append(bad, fmt.Sprintf("record %s: status %s (%s), want succeeded", rec.ID[:8], rec.Status, rec.Reason))
	}
	if len(rec.Allocs) != len(pre) {
		bad = append(bad, fmt.Sprintf("record %s: %d allocations, want %d", rec.ID[:8], len(rec.Allocs), len(pre)))
	}
	for _, a := range rec.Allocs {
		if _, ok := pre[a.ID]; !ok {
			bad = append(bad, fmt.Sprintf("record %s: alloc %s was not running at the start", rec.ID[:8], a.ID[:8]))
		}
		if a.State != restart.AllocDone {
			bad = append(bad, fmt.Sprintf("record %s: alloc %s is %s (%s), want done", rec.ID[:8], a.ID[:8], a.State, a.Error))
		}
	}
	return bad
}

func sortedBefore(m map[string]before) []before {
	out := make([]before, 0, len(m))
	for _, b := range m {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func joinLines(s []string) string { return "  " + strings.Join(s, "\n  ") }
