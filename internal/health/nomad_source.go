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
			Task: r.Task, Status: r.Status, Mode: r.Mode, Output: r.Output, Time: r.Time})
	}
	return s
}

// Watch reads the allocation's checks at once and then as their results are due, and
// hands each snapshot to emit, until ctx ends; it returns ctx's error. every is the checks'
// interval on Nomad's clock, scale how many seconds of Nomad's clock pass per real second
// (0 or 1 for a real cluster). A check runs every interval, and its result is stamped
// with the second its run began, so the next read is timed just after the next result is
// due (the gate waits for a result newer than a restart, and reading a fixed interval
// apart would see it up to an interval late), and repeated every retry while it is late;
// never more than an interval apart. A failed read is emitted as a snapshot with Err (the
// gate then waits) and retried at the next interval: the endpoint answers 404 while the
// allocation's node is unreachable, which may pass.
func (n *NomadChecks) Watch(ctx context.Context, allocID string, every time.Duration, scale float64, emit func(Snapshot)) error {
	if every <= 0 {
		return fmt.Errorf("polling Nomad checks of allocation %s: interval %s is not positive", shortID(allocID), every)
	}
	if scale <= 0 {
		scale = 1
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
		s := n.Read(ctx, allocID)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if s.Err != nil {
			n.log.Debug("nomad checks unreadable", "alloc", allocID, "error", s.Err)
		}
		emit(s)
		timer.Reset(max(time.Duration(float64(nextRead(s, every))/scale), time.Millisecond))
	}
}

// nextRead is how long after snapshot s (Nomad's clock) to read again: just after the
// soonest next result is due, at least a retry's pace after s, at most every. A result
// late by more than an interval is a check that runs less often than every: it does not
// set the pace.
func nextRead(s Snapshot, every time.Duration) time.Duration {
	retry := min(max(every/5, 200*time.Millisecond), 2*time.Second, every)
	if s.Err != nil {
		return every
	}
	wait := every
	for _, c := range s.Checks {
		if c.Time.IsZero() {
			continue
		}
		// The run began within the second it is stamped with; the next one begins an
		// interval later, and a failing one may take a moment to answer.
		due := c.Time.Add(every + time.Second + 100*time.Millisecond).Sub(s.At)
		if due < -every {
			continue // late by more than an interval: a check that runs less often
		}
		wait = min(wait, max(due, retry))
	}
	return wait
}
