package health

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// NomadChecks reads Nomad-native check results. Nomad's allocation checks endpoint has no
// blocking query, so Watch polls it, at the pace of the checks themselves (PollInterval),
// and only for the allocations the caller watches: those in flight.
type NomadChecks struct {
	reader cluster.CheckReader
	clock  Clock
	log    *slog.Logger
}

// NewNomadChecks returns a source reading through reader, stamping snapshots with clock
// (Nomad's time; required), logging to log (nil: discarded).
func NewNomadChecks(reader cluster.CheckReader, clock Clock, log *slog.Logger) *NomadChecks {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &NomadChecks{reader: reader, clock: clock, log: log}
}

// Read reads the allocation's Nomad-native checks once.
func (n *NomadChecks) Read(ctx context.Context, allocID string) Snapshot {
	results, err := n.reader.AllocChecks(ctx, allocID)
	s := Snapshot{Provider: ProviderNomad, AllocID: allocID, At: n.clock()}
	if err != nil {
		s.Err = fmt.Errorf("reading Nomad checks of allocation %s: %w", shortID(allocID), err)
		return s
	}
	s.Checks = make([]Check, 0, len(results))
	for _, r := range results {
		s.Checks = append(s.Checks, Check{Provider: ProviderNomad, ID: r.ID, Name: r.Name, Service: r.Service,
			Task: r.Task, Status: r.Status, Mode: r.Mode, Output: r.Output})
	}
	return s
}

// Watch reads the allocation's checks at once and then every `every` (real time), and
// hands each snapshot to emit, until ctx ends; it returns ctx's error. A failed read is
// emitted as a snapshot with Err (the gate then waits) and retried at the next tick: the
// endpoint answers 404 while the allocation's node is unreachable, which may pass.
func (n *NomadChecks) Watch(ctx context.Context, allocID string, every time.Duration, emit func(Snapshot)) error {
	if every <= 0 {
		return fmt.Errorf("polling Nomad checks of allocation %s: interval %s is not positive", shortID(allocID), every)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s := n.Read(ctx, allocID)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.Err != nil {
			n.log.Debug("nomad checks unreadable", "alloc", allocID, "error", s.Err)
		}
		emit(s)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
