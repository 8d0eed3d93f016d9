package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// ErrLeaseLost ends a Drive whose lease could not be renewed: another driver may own the
// restart now, so this one must stop writing at once.
var ErrLeaseLost = errors.New("lost the lease on the restart")

// errTerminal stops a driver whose record was ended by someone else.
var errTerminal = errors.New("restart record is terminal")

// driver runs one restart. rec is the driver's copy of the record; mu guards it and
// serialises writes, so every step is one Update.
type driver struct {
	e    *Engine
	ns   string
	id   string
	log  *slog.Logger
	sink func(restart.Event)

	// Immutable facts of the record, readable without mu (the store writes the record's
	// fields while persisting it).
	spec    restart.Spec
	jobNS   string
	jobID   string
	jobType string

	mu     sync.Mutex
	rec    *restart.Record
	unsent []restart.Event
	gen    uint64 // changes made to rec
	// lazyDue is when the lazy changes not yet in a write must be written (zero: none).
	lazyDue time.Time
	// detached is set when the driver lets go: its last write clears Record.Driver (as does
	// the write that ends the restart).
	detached bool
	// flushMu serialises writes; flushed is the generation last stored.
	flushMu sync.Mutex
	flushed uint64
	scratch restart.Record // the slices of flush's snapshots, reused under flushMu
	// placements are the batch in flight's shared placement-failure watches.
	placements *placementWatches
	changed    chan struct{} // a Control change was seen (buffered 1)
	dirty      chan struct{} // stepLazy made a change (buffered 1)
	// fresh holds the allocations whose intent this driver wrote and whose request it has
	// not sent yet: their request goes out without first asking Nomad whether a former
	// driver's did.
	fresh map[int]bool
	// readiness is the readiness gates' job specification and check sources (-health
	// checks).
	readiness readinessDeps
	// feed follows the job's allocations from the event stream (nil: blocking queries).
	feed *allocFeed
	// proven holds, per allocation, when its health gate judged it healthy on fresh
	// evidence, for the availability budget's view of it (health.Config.ProvenAt).
	provenMu sync.Mutex
	proven   map[string]time.Time
	// drainOff is set when Consul refused a drain's write (ACLs): the rest of the restart
	// goes undrained, with one warning rather than one per allocation.
	drainOff atomic.Bool
	// noteMu and ended keep Engine.Note's writes within the drive: ended is set, under
	// noteMu, before the drive gives its lease up.
	noteMu sync.RWMutex
	ended  bool
}

// Drive takes the lease and runs the restart until it is terminal, or ctx ends (detach: the
// record is left consistent, the lease released, and Drive returns ctx.Err()), or the lease is
// lost. It resumes from whatever the record says, deciding from Nomad's facts whether an
// in-flight request took effect. sink (may be nil) receives every event right after it has been
// persisted, in order, from the driver's goroutines one at a time.
func (e *Engine) Drive(ctx context.Context, namespace, id string, sink func(restart.Event)) (*restart.Record, error) {
	return e.drive(ctx, namespace, id, nil, nil, sink)
}

// DriveHeld drives a restart this engine's CreateHeld just stored, as Drive does, with the
// lease taken then, and releases the lease when it returns (once per Held). The control
// bell's first token is taken and the job's allocation feed set up at once, since the job
// is known: a fleet starts each job's child this way, and every round trip before its
// first request delays the job. (Drive learns the job from the record it reads under the lease; and a
// restart held elsewhere, which Drive meets often, costs it no setup.) The record is still
// read under the lease: an operator's pause or cancel stored since the creation must hold
// before the first batch.
func (e *Engine) DriveHeld(ctx context.Context, h *Held, sink func(restart.Event)) (*restart.Record, error) {
	rec := h.rec
	return e.drive(ctx, rec.Namespace, rec.ID, &jobRef{namespace: rec.Namespace, id: rec.JobID}, h.lease, sink)
}

// jobRef names the job of a restart driven by DriveHeld.
type jobRef struct{ namespace, id string }

// drive is Drive, and DriveHeld with job and the lease held.
func (e *Engine) drive(ctx context.Context, namespace, id string, job *jobRef, held store.Lease, sink func(restart.Event)) (*restart.Record, error) {
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	bellCtx, stopBell := context.WithCancel(ctx)
	defer stopBell()
	var feed *allocFeed
	var bell <-chan uint64
	if job != nil {
		bell = e.firstToken(bellCtx, namespace, id)
		feed = e.startFeed(feedCtx, job.namespace, job.id)
	}
	lease := held
	if lease == nil {
		var err error
		// The store retries what passes inside, as it does for every call below.
		if lease, err = e.store.AcquireLease(ctx, namespace, id, e.holder); err != nil {
			stopBell()
			return e.unleased(ctx, namespace, id, err)
		}
	}
	defer e.release(ctx, lease, id)

	dctx, cancel := whileHeld(ctx, lease)
	defer cancel()
	if bell == nil {
		bell = e.firstToken(dctx, namespace, id)
	}
	token := <-bell
	// Under the lease: a steering command may have ended it before.
	rec, err := e.store.Get(dctx, namespace, id)
	if err != nil {
		return nil, fmt.Errorf("reading restart %s: %w", short(id), err)
	}
	if rec.Status.Terminal() {
		return rec, nil
	}
	d := &driver{e: e, ns: namespace, id: id, sink: sink, rec: rec, changed: make(chan struct{}, 1),
		dirty: make(chan struct{}, 1), fresh: map[int]bool{},
		spec: normalizeSpec(rec.Spec), jobNS: rec.Namespace, jobID: rec.JobID, jobType: rec.JobType,
		log: e.log.With("restart", id, "job", rec.JobID)}
	d.feed = feed
	if job == nil {
		d.feed = e.startFeed(feedCtx, d.jobNS, d.jobID)
	}
	e.setLive(d, true)
	defer func() {
		d.noteMu.Lock()
		d.ended = true
		d.noteMu.Unlock()
		e.setLive(d, false)
	}()
	// Events already in the record were delivered by whoever persisted them.
	go d.watchControl(dctx, token)
	go d.flushLazily(dctx)

	runErr := d.run(dctx)
	final := d.snapshot()
	switch {
	case errors.Is(context.Cause(dctx), ErrLeaseLost):
		d.log.Warn("lease lost; stopping")
		return final, &StepError{ID: id, Step: StepStatus, Err: fmt.Errorf("restart %s: %w", short(id), ErrLeaseLost)}
	case ctx.Err() != nil:
		d.detach(ctx)
		return d.snapshot(), ctx.Err()
	case errors.Is(runErr, errTerminal):
		return final, nil
	}
	return final, runErr
}

// unleased is what Drive returns when it could not take the lease (err): the record says
// what there is to say, that it ended, or who drives it.
func (e *Engine) unleased(ctx context.Context, namespace, id string, err error) (*restart.Record, error) {
	rec, gerr := e.store.Get(ctx, namespace, id)
	switch {
	case gerr != nil:
		return nil, fmt.Errorf("reading restart %s: %w", short(id), gerr)
	case rec.Status.Terminal():
		return rec, nil
	case errors.Is(err, store.ErrLeaseHeld):
		return rec, err
	}
	return rec, fmt.Errorf("taking the lease on restart %s: %w", short(id), err)
}

// firstToken takes the first token of the operators' steering, before the read under the
// lease: steering stored before it shows in the read, steering after it wakes the watch.
// Without it (0: the bell could not be set up) watchControl tries again, and the flush's
// conflicts bring steering in meanwhile.
func (e *Engine) firstToken(ctx context.Context, namespace, id string) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		_, token, err := e.store.WatchControl(ctx, namespace, id, 0)
		if err != nil && ctx.Err() == nil {
			e.log.Debug("setting up the watch of the record's control", "restart", id, "err", err)
		}
		out <- token
	}()
	return out
}

// detach records that this driver let go, with a context of its own since ctx has ended.
func (d *driver) detach(ctx context.Context) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := d.step(wctx, func(r *restart.Record) {
		d.detached = true
		if r.Status.Terminal() {
			return
		}
		d.eventLocked(restart.Event{Type: restart.EventDriver,
			Message: fmt.Sprintf("Driver %s detached; resume the restart with `nomad-restart resume %s`", d.e.holder, d.id)})
	})
	if err != nil {
		d.log.Warn("recording the detach", "err", err)
	}
}

func (d *driver) snapshot() *restart.Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	return cloneRecord(d.rec)
}

// watchControl follows operators' steering of the record (Store.WatchControl: on the Nomad
// store its own writes do not wake it, so following costs a read per operator action, not
// one per write) and takes their Control changes. The store's watch rides out what passes;
// a watch that failed otherwise resumes, paced, for as long as the driver runs: nobody
// waits on it, and the flush's conflicts still bring operators' changes in.
func (d *driver) watchControl(ctx context.Context, token uint64) {
	b := cluster.NewBackoff(cluster.RetryPolicy{Initial: 50 * time.Millisecond, Max: 3 * time.Second})
	for {
		r, next, err := d.e.store.WatchControl(ctx, d.ns, d.id, token)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.log.Debug("watching the record's control", "err", err)
			if !b.Wait(ctx) {
				return
			}
			continue
		}
		b.Reset()
		token = next
		if r == nil {
			// The first token, taken again: the record is read at once to miss nothing.
			if r, err = d.e.store.WatchHead(ctx, d.ns, d.id, 0); err != nil {
				continue
			}
		}
		d.mu.Lock()
		if r.ModifyIndex > d.rec.ModifyIndex {
			d.takeStoredLocked(r)
		}
		d.mu.Unlock()
		d.notify()
	}
}

// takeStoredLocked adopts the operators' part of a newer stored record, and the outbox's
// (its notifications' delivery, which the notifying process writes). The driver's fields
// stored there are the ones this driver wrote last (it holds the lease), so the newer
// ModifyIndex can be taken as is.
func (d *driver) takeStoredLocked(r *restart.Record) {
	if r.Control != d.rec.Control {
		d.log.Info("control changed", "intent", r.Control.Intent, "answer", r.Control.Answer, "by", r.Control.By)
	}
	d.rec.Control = r.Control
	d.rec.Notify = r.Notify
	d.rec.ModifyIndex = r.ModifyIndex
	d.rec.ModifyTime = r.ModifyTime
}

func (d *driver) notify() {
	select {
	case d.changed <- struct{}{}:
	default:
	}
}

// eventLocked appends an event; it reaches the sink once persisted.
func (d *driver) eventLocked(e restart.Event) {
	e.Time = d.e.now()
	e = d.rec.AppendEvent(e)
	d.unsent = append(d.unsent, e)
	d.log.Info(e.Message, "event", e.Type, "alloc", e.AllocID, "batch", e.Batch)
}

// flush writes the record with check-and-set until generation gen (a count of changes) is
// stored. Concurrent steps share writes (group commit): a step whose change was carried by
// another step's write returns without writing. On a conflict (an operator wrote Control) it
// re-reads, keeps the stored Control and its own progress, and writes again. The store
// retries failures that pass (Nomad unavailable, no leader) inside; a failure it returns
// stops the driver with the record as last written.
func (d *driver) flush(ctx context.Context, gen uint64) error {
	d.flushMu.Lock()
	defer d.flushMu.Unlock()
	for d.flushed < gen {
		d.mu.Lock()
		d.rec.Driver = d.e.holder
		if d.detached || d.rec.Status.Terminal() {
			// No one drives a restart that ended or that its driver let go.
			d.rec.Driver = ""
		}
		// The snapshot's slices reuse the last write's (flushMu is held, and a store keeps
		// nothing of what it was given): on a big job a copy per write is most of the garbage.
		snap := *d.rec
		d.scratch.Allocs = append(d.scratch.Allocs[:0], d.rec.Allocs...)
		d.scratch.Events = append(d.scratch.Events[:0], d.rec.Events...)
		snap.Allocs, snap.Events = d.scratch.Allocs, d.scratch.Events
		snap.GateRuns = cloneGateRuns(d.rec.GateRuns) // a few, small: a measurement appends in place
		if d.rec.Question != nil {
			q := *d.rec.Question
			snap.Question = &q
		}
		upTo := d.gen
		events := d.unsent
		d.unsent = nil
		lazyDue := d.lazyDue
		d.lazyDue = time.Time{} // this write carries every change so far
		d.mu.Unlock()

		err := d.e.store.Update(ctx, &snap)
		if err == nil {
			d.mu.Lock()
			d.rec.ModifyIndex, d.rec.ModifyTime = snap.ModifyIndex, snap.ModifyTime
			d.mu.Unlock()
			d.flushed = upTo
			if d.sink != nil {
				for _, e := range events {
					d.sink(e)
				}
			}
			if d.e.outbox != nil && len(events) > 0 {
				d.e.outbox.Stored(d.ns, d.id, events)
			}
			return nil
		}
		d.mu.Lock()
		d.unsent = append(events, d.unsent...)
		if !lazyDue.IsZero() && (d.lazyDue.IsZero() || lazyDue.Before(d.lazyDue)) {
			d.lazyDue = lazyDue // still to be written
			select {
			case d.dirty <- struct{}{}:
			default:
			}
		}
		d.mu.Unlock()
		if errors.Is(err, store.ErrConflict) {
			cur, gerr := d.e.store.Get(ctx, d.ns, d.id)
			if gerr == nil {
				d.mu.Lock()
				if cur.Status.Terminal() {
					d.rec.Status, d.rec.Reason = cur.Status, cur.Reason
					d.mu.Unlock()
					return errTerminal
				}
				d.takeStoredLocked(cur)
				d.mu.Unlock()
				d.notify()
				continue
			}
			err = gerr
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The store retried what passes already.
		return fmt.Errorf("writing restart %s: %w", short(d.id), err)
	}
	return nil
}

// step applies change to the record and persists it before returning.
func (d *driver) step(ctx context.Context, change func(r *restart.Record)) error {
	d.mu.Lock()
	change(d.rec)
	d.gen++
	gen := d.gen
	d.mu.Unlock()
	return d.flush(ctx, gen)
}

// waitChange blocks until Control may have changed, ctx ends, or timeout passes (0: none).
func (d *driver) waitChange(ctx context.Context, timeout time.Duration) error {
	var tc <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		tc = t.C
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-d.changed:
	case <-tc:
	}
	return nil
}

func cloneRecord(r *restart.Record) *restart.Record {
	c := *r
	c.Allocs = append([]restart.AllocProgress(nil), r.Allocs...)
	c.Events = append([]restart.Event(nil), r.Events...)
	c.GateRuns = cloneGateRuns(r.GateRuns)
	if r.Question != nil {
		q := *r.Question
		c.Question = &q
	}
	return &c
}

// cloneGateRuns copies gate runs and their measurements, which the driver appends to.
func cloneGateRuns(runs []restart.GateRun) []restart.GateRun {
	if runs == nil {
		return nil
	}
	out := slices.Clone(runs)
	for i := range out {
		out[i].Measurements = slices.Clone(out[i].Measurements)
	}
	return out
}

// whileHeld is a context of ctx that ends, with ErrLeaseLost as its cause, when the lease is
// lost; cancel ends it and its watch of the lease.
func whileHeld(ctx context.Context, lease store.Lease) (held context.Context, cancel context.CancelFunc) {
	hctx, cancelCause := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-lease.Lost():
			cancelCause(ErrLeaseLost)
		case <-hctx.Done():
		}
	}()
	return hctx, func() { cancelCause(nil) }
}

// release gives the lease on restart id back; it still runs, for a bounded time, when ctx
// has ended (another process may take the restart up at once), and a failure is only
// logged: the lease then expires on its own.
func (e *Engine) release(ctx context.Context, lease store.Lease, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := lease.Release(rctx); err != nil {
		e.log.Warn("releasing the lease", "restart", id, "err", err)
	}
}
