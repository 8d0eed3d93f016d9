package cluster

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/hashicorp/nomad/api"
)

// CheckResult is the latest result of one Nomad-native service check of an allocation.
type CheckResult struct {
	ID      string
	Name    string // the check's name, as Nomad reports it ("service: \"web\" check" by default)
	Group   string // "job.group[n]"
	Task    string // empty for group-level services
	Service string
	// Mode is "healthiness" (counts for health) or "readiness" (on_update = "ignore").
	Mode       string
	Status     string // success, failure, pending
	StatusCode int
	Output     string
	// Time is when the client node ran the check (Nomad's clock, to the second).
	Time time.Time
}

// CheckReader reads Nomad-native check results. *Nomad implements it.
type CheckReader interface {
	AllocChecks(ctx context.Context, allocID string) ([]CheckResult, error)
}

var _ CheckReader = (*Nomad)(nil)

// AllocChecks reads the allocation's Nomad-native check results, sorted by check ID. The
// endpoint has no blocking query (it answers at once and ignores index), so callers poll
// it at the checks' own interval, and only for allocations in flight. An allocation
// without Nomad-native checks has none.
func (n *Nomad) AllocChecks(ctx context.Context, allocID string) ([]CheckResult, error) {
	statuses, err := read(ctx, n, "reading allocation checks", func(ctx context.Context) (api.AllocCheckStatuses, error) {
		return n.client.Allocations().Checks(allocID, queryOpts(ctx, ""))
	})
	if err != nil {
		return nil, fmt.Errorf("reading checks of allocation %q: %w", allocID, classify(err, ErrAllocNotFound))
	}
	out := make([]CheckResult, 0, len(statuses))
	for id, s := range statuses {
		r := CheckResult{ID: s.ID, Name: s.Check, Group: s.Group, Task: s.Task, Service: s.Service, Mode: s.Mode,
			Status: s.Status, StatusCode: s.StatusCode, Output: s.Output}
		if r.ID == "" {
			r.ID = id
		}
		if s.Timestamp != 0 {
			r.Time = time.Unix(s.Timestamp, 0).UTC()
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
