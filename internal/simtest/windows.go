package simtest

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Window is when a job's allocations were restarting, on Nomad's clock.
type Window struct{ From, To time.Time }

// RestartWindow reads, from Nomad's task events, when job namespace/jobID was restarting:
// from its first "Restart Signaled" to the last "Started" that followed one. The zero
// Window means no task of the job was restarted in place.
func RestartWindow(ctx context.Context, client *api.Client, namespace, jobID string) (Window, error) {
	q := (&api.QueryOptions{Namespace: namespace}).WithContext(ctx)
	stubs, _, err := client.Jobs().Allocations(jobID, true, q)
	if err != nil {
		return Window{}, fmt.Errorf("listing the allocations of %s: %w", jobID, err)
	}
	var w Window
	for _, stub := range stubs {
		a, _, err := client.Allocations().Info(stub.ID, q)
		if err != nil {
			return Window{}, fmt.Errorf("reading allocation %s: %w", stub.ID, err)
		}
		for _, ts := range a.TaskStates {
			var signaled bool
			for _, ev := range ts.Events {
				at := time.Unix(0, ev.Time)
				switch {
				case ev.Type == restart.TaskEventRestartSignaled:
					signaled = true
					if w.From.IsZero() || at.Before(w.From) {
						w.From = at
					}
				case ev.Type == restart.TaskEventStarted && signaled && at.After(w.To):
					w.To = at
				}
			}
		}
	}
	return w, nil
}

// PeakOverlap is the most windows open at one instant: how many jobs were restarting at
// once. A window that closes at the instant another opens does not overlap it.
func PeakOverlap(windows []Window) int {
	type edge struct {
		at   time.Time
		open int
	}
	var edges []edge
	for _, w := range windows {
		if w.From.IsZero() {
			continue
		}
		edges = append(edges, edge{w.From, 1}, edge{w.To, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].open < edges[j].open
		}
		return edges[i].at.Before(edges[j].at)
	})
	peak, open := 0, 0
	for _, e := range edges {
		open += e.open
		peak = max(peak, open)
	}
	return peak
}
