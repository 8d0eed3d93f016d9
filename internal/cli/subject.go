package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// subject is what a command on an existing record acts on: a restart or a fleet, found by
// its ID. The commands (status, attach, pause, resume, cancel, answer) are written once
// against it; what differs by kind is in restartSubject (subject_restart.go) and
// fleetSubject (subject_fleet.go).
type subject interface {
	head() steer.Head
	// name and title name the record in messages: `restart 0123abcd`, and with its job,
	// `restart 0123abcd of job "web"` (a fleet's are both `fleet 0123abcd`).
	name(verbose bool) string
	title(verbose bool) string
	// driverName is the driver the record names, "" when none (who last said it drives it:
	// a dead driver's name stays).
	driverName() string
	// refresh reads the record again.
	refresh(ctx context.Context)
	// runAgain is what starts a new one like it: `nomad-restart run web`.
	runAgain() string
	// storeErrorText words an error of the record's store in one line.
	storeErrorText(err error) string
	// steerer steers the record (for a resume driven here, the one that drives it too).
	steerer() steer.Steerer
	// lease is the record's lease, to tell whether some process drives it.
	lease() leaseOf
	// steered is what a pause or cancel that was stored means for this kind.
	steered(cmd string, h steer.Head, verbose bool) string
	// noteDriver says, after a pause or cancel, when it takes effect.
	noteDriver(ctx context.Context, a *app, cmd string, verbose bool)
	// resume sets the record to run and drives it here, following and taking over from
	// another driver as needed; with detach it only says it is set to run.
	resume(ctx context.Context, a *app, p *output.Printer, detach bool) error
	// show prints the record for `status <id>`; entry is its -json form.
	show(ctx context.Context, a *app, verbose bool)
	entry() any
	// attach follows the record until it ends (`attach <id>`).
	attach(ctx context.Context, a *app, p *output.Printer) error
}

// leaseOf is a record's lease in its store.
type leaseOf struct {
	free   func(ctx context.Context, holder string) (bool, error)
	holder func(ctx context.Context) (string, error)
	// ttl and delay are how long a dead driver's lease outlives it (zero: it ends at once).
	ttl, delay time.Duration
}

// leaseIn is the lease of record id in namespace of recs.
func leaseIn[R any](recs store.Records[R], namespace, id string) leaseOf {
	ttl, delay := recs.LeaseExpiry()
	return leaseOf{
		free: func(ctx context.Context, holder string) (bool, error) {
			return store.LeaseFree(ctx, recs, namespace, id, holder)
		},
		holder: func(ctx context.Context) (string, error) { return recs.LeaseHolder(ctx, namespace, id) },
		ttl:    ttl, delay: delay,
	}
}

// state probes whether some process drives the record now: a record's Driver is only who
// last said so, and a driver that died cannot take its name back.
func (l leaseOf) state(ctx context.Context, by string) leaseState {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	free, err := l.free(pctx, by)
	switch {
	case err != nil:
		return leaseUnknown
	case free:
		return leaseFree
	}
	return leaseHeld
}

// expiry words how long a dead driver's lease may hold the record: " (up to 37s after it
// died)"; "" where it ends at once.
func (l leaseOf) expiry() string {
	if l.ttl == 0 {
		return ""
	}
	return fmt.Sprintf(" (up to %s after it died)", (2*l.ttl + l.delay).Round(time.Second))
}

// watch probes the lease until it is free, then closes the returned channel. Failing probes
// (Nomad unreachable, no permission) count as held: the follow goes on.
func (l leaseOf) watch(ctx context.Context, by string) <-chan struct{} {
	return untilLeaseFree(ctx, l.ttl, func() (bool, error) { return l.free(ctx, by) })
}

// waitingForDriver is said once when resume finds another driver holding the lease of what
// (`Restart 0123abcd`, `Fleet 0123abcd`), held by who.
func (l leaseOf) waitingForDriver(what, who string) string {
	if who == "" {
		who = "another process"
	}
	if l.ttl == 0 {
		return fmt.Sprintf("%s is driven by %s; waiting for it to finish or let go, to take over", what, who)
	}
	return fmt.Sprintf("%s is driven by %s; waiting for it, or for its lease to expire (up to 2×TTL + lock delay, about %s), to take over",
		what, who, (2*l.ttl + l.delay).Round(time.Second))
}

// stoppedFollowing tells a viewer leaving s what becomes of it: it goes on only if some
// driver holds its lease.
func (a *app) stoppedFollowing(ctx context.Context, s subject, verbose bool) {
	what, l, status := s.name(verbose), s.lease(), s.head().Status
	id := output.ShortID(s.head().ID, verbose)
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	free, err := l.free(pctx, a.by())
	switch {
	case err == nil && free:
		fmt.Fprintf(a.stderr, "Stopped following %s; no process drives it now (status: %s): continue it with `nomad-restart resume %s`\n", what, status, id)
	case err == nil:
		fmt.Fprintf(a.stderr, "Stopped following %s; it goes on without this viewer (status: %s). Follow it again with `nomad-restart attach %s`\n", what, status, id)
	default:
		fmt.Fprintf(a.stderr, "Stopped following %s (status: %s); whether a driver holds it is unknown (%s). Follow it again with `nomad-restart attach %s`, or continue it with `nomad-restart resume %s` if none does\n", what, status, output.OneLine(err.Error()), id, id)
	}
}

// locate parses the ID command's flags and finds the restart or fleet its ID names.
func (a *app) locate(ctx context.Context, cmd string, o *idOptions, fsArgs []string) (subject, error) {
	id, err := oneID(cmd, fsArgs)
	if err != nil {
		return nil, err
	}
	ses, err := a.openForIDs(o)
	if err != nil {
		return nil, err
	}
	stores, err := a.stores(ctx, ses, o.state)
	if err != nil {
		return nil, err
	}
	return a.findAny(ctx, ses, stores, o, id)
}

// findAny resolves an ID or unique prefix among restarts and fleets: the commands that
// take an ID take either. A prefix that matches a restart and a fleet is ambiguous. Fleets
// live in Nomad only, so they are looked up only where Nomad's store is read.
func (a *app) findAny(ctx context.Context, ses session, stores []store.Store, o *idOptions, id string) (subject, error) {
	st, rec, rerr := a.find(ctx, stores, o.namespace, id)
	restartFound := func() (subject, error) {
		if rerr != nil {
			return nil, rerr
		}
		return &restartSubject{ses: ses, st: st, rec: rec}, nil
	}
	fs, err := fleetsOf(ses)
	if err != nil || !hasKind(stores, "nomad") || ctx.Err() != nil {
		return restartFound()
	}
	frec, ferr := fs.fleetStore().Find(ctx, o.namespace, id)
	var ramb, famb *store.AmbiguousIDError
	restartsAmbiguous, fleetsAmbiguous := errors.As(rerr, &ramb), errors.As(ferr, &famb)
	switch {
	case ferr == nil && rerr == nil:
		return nil, usageErrorf("ID prefix %q matches restart %s and fleet %s; give more of the ID", id, output.ShortID(rec.ID, false), output.ShortID(frec.ID, false))
	case ferr == nil && restartsAmbiguous:
		return nil, usageErrorf("ID prefix %q matches fleet %s and %s; give more of the ID", id, output.ShortID(frec.ID, false), output.Plural(len(ramb.Matches), "restart", "restarts"))
	case ferr == nil:
		return &fleetSubject{ses: fs, rec: frec}, nil
	case fleetsAmbiguous && rerr == nil:
		return nil, usageErrorf("ID prefix %q matches restart %s and %s; give more of the ID", id, output.ShortID(rec.ID, false), output.Plural(len(famb.Matches), "fleet", "fleets"))
	case fleetsAmbiguous:
		return nil, famb
	case rerr == nil, restartsAmbiguous:
		return restartFound()
	case errors.Is(ferr, store.ErrFleetNotFound):
		return nil, errors.New(strings.Replace(rerr.Error(), "no restart matches", "no restart or fleet matches", 1))
	}
	return nil, fmt.Errorf("%s; and the fleets could not be read: %s", rerr.Error(), fleetStoreErrorText(ferr))
}

// endedError refuses to steer a record that has ended.
func endedError(s subject, verb string, verbose bool) error {
	h := s.head()
	return usageErrorf("%s has already ended (%s); there is nothing to %s; start a new one with `%s`",
		s.title(verbose), h.Status, verb, s.runAgain())
}

// steerError is one line for a steering that was refused or could not be stored.
func steerError(s subject, cmd string, err error, verbose bool) error {
	var ended *steer.EndedError
	var canceling *steer.CancelingError
	switch {
	case errors.As(err, &ended):
		return endedError(s, cmd, verbose)
	case errors.As(err, &canceling) && s.head().Kind == steer.KindRestart:
		return errors.New(errorText(canceling))
	}
	h := s.head()
	return fmt.Errorf("%s %s %s: %s", cmd, h.Kind, output.ShortID(h.ID, verbose), s.storeErrorText(err))
}

// reportSetToRun says that a resume with -detach was recorded and left to a driver: the
// record as its JSON line (entry), or the line a person reads.
func reportSetToRun(a *app, p *output.Printer, entry any, line string) {
	if p.JSON {
		p.JSONLine(entry)
		return
	}
	p.Header(a.now(), line)
}
