package nomadstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
)

// Probe tells, for `-state auto`, whether client's token may keep restart records of
// job in namespace in Nomad Variables (under the default prefix), without writing anything.
// It returns nil when it may, else an error saying why not (a *PermissionError when Nomad's
// ACLs refuse); an unreachable or failing cluster is a "no" too, with its error.
func Probe(ctx context.Context, vars *nomadvars.Client, namespace, job string) error {
	return NewRestarts(vars, Options{}).Probe(ctx, namespace, job)
}

// Probe is Probe for this store's prefix.
//
// How: the token itself first (nomadvars' Unrestricted); with ACLs disabled, or a
// management token, the answer is yes at once. Otherwise, rather than re-implement Nomad's policy evaluation (policies,
// roles, path globs, namespace wildcards: getting any of it wrong would answer yes where
// Nomad says no), it asks Nomad itself with requests that cannot change anything:
//   - a read of a variable path of the job (404 allowed, 403 denied);
//   - a check-and-set write of that path at an index it cannot have (Nomad checks the
//     write capability before the CAS, then refuses the write with 409: allowed; 403: denied);
//   - a check-and-set delete likewise (the destroy capability, needed to clear the job's
//     marker and old chunks).
//
// The probed path never exists, so nothing is created or deleted.
func (n *Restarts) Probe(ctx context.Context, namespace, job string) error {
	ns := nomadvars.Namespace(namespace)
	unrestricted, err := n.vars.Unrestricted(ctx, ns)
	switch {
	case err != nil && nomadvars.StatusOf(err) == http.StatusForbidden:
		//lint:ignore ST1005 the sentence starts with a name, Nomad's, as users read it
		return fmt.Errorf("Nomad refused the token (%v): check NOMAD_TOKEN or -token", err)
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cannot ask Nomad about the token: %w", err)
	case unrestricted:
		return nil
	}

	path := n.opts.Prefix + "/" + n.jobSegment(job) + "/probe"
	if _, err := n.vars.Read(ctx, ns, path); err != nil {
		return n.probeErr(err)
	}
	// An index no variable can have makes the write a certain conflict.
	const impossible = math.MaxInt64
	v := &nomadvars.Variable{Namespace: ns, Path: path, Items: map[string]string{"probe": "never written"}, ModifyIndex: impossible}
	_, err = n.vars.Write(ctx, v)
	if err := n.probeErr(err); err != nil {
		return err
	}
	return n.probeErr(n.vars.DeleteAt(ctx, ns, path, impossible))
}

// probeErr is Probe's verdict on one request: allowed when Nomad answered with a conflict
// (the capability was checked first) or "not found", or accepted it (the variable existed
// at that index: impossible, but then the capability was there).
func (n *Restarts) probeErr(err error) error {
	var conflict *nomadvars.ConflictError
	if err == nil || errors.As(err, &conflict) || errors.Is(err, nomadvars.ErrNotFound) {
		return nil
	}
	return n.storeErr(err)
}
