package nomadstore

import (
	"context"
	"errors"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// The control bell, <prefix>/<job>/<id>/control, is how a driver learns of operators'
// steering without reading its record after each of its own writes. A blocking read of the
// head answers every write of it, the driver's own included (one read per write, several
// per batch); the bell is written only by steering (Ring, after the head's Control was
// stored), so the driver's blocking read of the bell answers only then, and the driver then
// reads the head once. Nomad answers a blocking read of a variable that exists when that
// variable's ModifyIndex passes the query's index, whatever else changes (a missing one
// answers on any change of the variables table: the driver creates the bell before it
// waits on it).
//
// The head stays the one truth: a steering command that stored Control but died before
// ringing, or one from a version without the bell, is seen at the driver's next write,
// whose check-and-set fails on the changed head.
const bellName = "control"

func (n *Restarts) bellPath(h headRef) string { return n.headPath(h.jobSeg, h.id) + "/" + bellName }

// WatchControl implements store.Store: with token 0 it makes sure the bell exists and returns its
// index (and no record: the caller reads the record after it); otherwise it waits until the
// bell passes token, then reads the head (once) and returns it with the bell's index as the
// next token.
func (n *Restarts) WatchControl(ctx context.Context, namespace, id string, token uint64) (*restart.Record, uint64, error) {
	h, err := n.locate(ctx, namespace, id)
	if err != nil {
		return nil, 0, err
	}
	if token == 0 {
		next, err := n.establishBell(ctx, h)
		return nil, next, err
	}
	var next uint64
	switch {
	case n.opts.SharedWatch:
		next, err = n.awaitBellShared(ctx, h, token)
	default:
		next, err = n.awaitBell(ctx, h, token)
	}
	if err != nil {
		return nil, 0, err
	}
	v, err := n.readHead(ctx, h) // nomadvars retries what passes
	if err != nil {
		return nil, 0, err
	}
	rec, err := headOnly(h, v)
	return rec, next, err
}

// establishBell returns the bell's index, creating the bell when the record has none yet
// (records written before it existed, or a restart no one steered). It writes first: a
// record's first driver finds no bell, and a conflict carries the bell's index anyway.
func (n *Restarts) establishBell(ctx context.Context, h headRef) (uint64, error) {
	return n.establishBellAt(ctx, h.ns, n.bellPath(h))
}

// establishBellAt is establishBell for the bell at path in ns (a restart's or a fleet's).
func (n *Restarts) establishBellAt(ctx context.Context, ns, path string) (uint64, error) {
	created, err := n.vars.Write(ctx, &nomadvars.Variable{Namespace: ns, Path: path, Items: bellItems(time.Now())})
	var conflict *nomadvars.ConflictError
	switch {
	case err == nil:
		return created.ModifyIndex, nil
	case errors.As(err, &conflict) && conflict.Current != nil && conflict.Current.ModifyIndex != 0:
		return conflict.Current.ModifyIndex, nil
	case errors.As(err, &conflict):
		v, err := n.vars.Read(ctx, ns, path) // a conflict that did not say the index
		if err != nil {
			return 0, n.storeErr(err)
		}
		return v.ModifyIndex, nil
	}
	return 0, n.storeErr(err)
}

// awaitBell waits with blocking reads of the bell until its index passes token. Passing
// failures do not end it (it is a long wait); it backs off as the head's watch does.
func (n *Restarts) awaitBell(ctx context.Context, h headRef, token uint64) (uint64, error) {
	return n.awaitBellAt(ctx, h.ns, n.bellPath(h), token)
}

// awaitBellAt is awaitBell for the bell at path in ns (a restart's or a fleet's).
func (n *Restarts) awaitBellAt(ctx context.Context, ns, path string, token uint64) (uint64, error) {
	backoff := 50 * time.Millisecond
	for {
		v, _, err := n.watching.ReadAfter(ctx, ns, path, nomadvars.Wait{After: token, Time: headWatchWait})
		switch {
		case err != nil && cluster.IsTransient(err):
			n.opts.Logger.Debug("watching a control bell: retrying", "path", path, "namespace", ns, "error", err)
			if !cluster.Sleep(ctx, backoff) {
				return 0, ctx.Err()
			}
			backoff = min(2*backoff, watchMaxBackoff)
			continue
		case errors.Is(err, nomadvars.ErrNotFound):
			return 0, store.ErrNotFound // the record was deleted with its bell
		case err != nil:
			return 0, n.storeErr(err)
		}
		backoff = 50 * time.Millisecond
		if v.ModifyIndex > token {
			return v.ModifyIndex, nil
		}
	}
}

// awaitBellShared is awaitBell under SharedWatch: the namespace's hub lists bells beside
// heads, and wakes this waiter when its bell passed token, or when the listing lacks it
// (older than the bell: read it to tell).
func (n *Restarts) awaitBellShared(ctx context.Context, h headRef, token uint64) (uint64, error) {
	hub := n.hubs.get(n, h.ns)
	w := &hubWaiter{path: n.bellPath(h), after: token, note: make(chan hubNote, 1)}
	for {
		note, err := hub.wait(ctx, w)
		if err != nil {
			return 0, err
		}
		if note.err != nil {
			return 0, note.err
		}
		if note.present {
			return note.index, nil
		}
		v, err := n.vars.Read(ctx, h.ns, w.path)
		if errors.Is(err, nomadvars.ErrNotFound) {
			return 0, store.ErrNotFound
		}
		if err != nil {
			return 0, n.storeErr(err)
		}
		if v.ModifyIndex > token {
			return v.ModifyIndex, nil
		}
		w.minGen = note.gen + 1 // the listing was older than the bell: wait for the next
	}
}

// Ring implements store.Store: it writes the bell so that the record's driver reads the Control
// just stored. One check-and-set write after a read; a conflict means someone rang since
// the read, which wakes the driver as well.
func (n *Restarts) Ring(ctx context.Context, namespace, id string) error {
	h, err := n.locate(ctx, namespace, id)
	if err != nil {
		return err
	}
	return n.ringAt(ctx, h.ns, n.bellPath(h))
}

// ringAt rings the bell at path in ns (a restart's or a fleet's), as Ring says.
func (n *Restarts) ringAt(ctx context.Context, ns, path string) error {
	var index uint64
	v, err := n.vars.Read(ctx, ns, path)
	switch {
	case err == nil:
		index = v.ModifyIndex
	case !errors.Is(err, nomadvars.ErrNotFound):
		return n.storeErr(err)
	}
	_, err = n.vars.Write(ctx, &nomadvars.Variable{Namespace: ns, Path: path, Items: bellItems(time.Now()), ModifyIndex: index})
	var conflict *nomadvars.ConflictError
	if errors.As(err, &conflict) {
		return nil
	}
	return n.storeErr(err)
}

// bellItems is the bell's content: when it was rung, for whoever looks at the variable
// (Nomad refuses a variable without items). Each write's items differ, as nomadvars.Write
// needs to recognise a lost answer of its own.
func bellItems(at time.Time) map[string]string {
	return map[string]string{"rung_at": at.UTC().Format(time.RFC3339Nano)}
}
