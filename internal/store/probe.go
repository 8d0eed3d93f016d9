package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// ProbeNomad tells, for `-state auto`, whether client's token may keep restart records of
// job in namespace in Nomad Variables (under the default prefix), without writing anything.
// It returns nil when it may, else an error saying why not (a *PermissionError when Nomad's
// ACLs refuse); an unreachable or failing cluster is a "no" too, with its error.
func ProbeNomad(ctx context.Context, client *api.Client, namespace, job string) error {
	return NewNomad(client, NomadOptions{}).Probe(ctx, namespace, job)
}

// Probe is ProbeNomad for this store's prefix.
//
// How: /v1/acl/token/self first; with ACLs disabled, or a management token, the answer is
// yes at once. Otherwise, rather than re-implement Nomad's policy evaluation (policies,
// roles, path globs, namespace wildcards: getting any of it wrong would answer yes where
// Nomad says no), it asks Nomad itself with requests that cannot change anything:
//   - a read of a variable path of the job (404 allowed, 403 denied);
//   - a check-and-set write of that path at an index it cannot have (Nomad checks the
//     write capability before the CAS, then refuses the write with 409: allowed; 403: denied);
//   - a check-and-set delete likewise (the destroy capability, needed to clear the job's
//     marker and old chunks).
//
// The probed path never exists, so nothing is created or deleted.
func (n *Nomad) Probe(ctx context.Context, namespace, job string) error {
	ns := normNamespace(namespace)
	self, _, err := n.client.ACLTokens().Self(n.qo(ctx, ns))
	switch {
	case err != nil && strings.Contains(err.Error(), "ACL support disabled"):
		return nil // older agents answer this way when ACLs are off
	case err != nil && statusOf(err) == http.StatusForbidden:
		return fmt.Errorf("Nomad refused the token (%v): check NOMAD_TOKEN or -token", err)
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("cannot ask Nomad about the token: %w", err)
	case self.AccessorID == "acls-disabled" || self.Type == "management":
		return nil
	}

	path := n.opts.Prefix + "/" + n.jobSegment(job) + "/probe"
	vars := n.client.Variables()
	if _, _, err := vars.Peek(path, n.qo(ctx, ns)); err != nil {
		return n.probeErr(ctx, err, "read", ns, path)
	}
	// An index no variable can have makes the write a certain conflict.
	const impossible = math.MaxInt64
	v := &api.Variable{Namespace: ns, Path: path, Items: map[string]string{"probe": "never written"}, ModifyIndex: impossible}
	_, _, err = vars.CheckedUpdate(v, n.wo(ctx, ns))
	if err := n.probeConflict(ctx, err, "write", ns, path); err != nil {
		return err
	}
	_, err = vars.CheckedDelete(path, impossible, n.wo(ctx, ns))
	return n.probeConflict(ctx, err, "destroy", ns, path)
}

func (n *Nomad) probeConflict(ctx context.Context, err error, capability, ns, path string) error {
	var conflict api.ErrCASConflict
	if errors.As(err, &conflict) {
		return nil
	}
	if err == nil {
		// The variable existed at that index: impossible, but then writing was allowed.
		return nil
	}
	return n.probeErr(ctx, err, capability, ns, path)
}

func (n *Nomad) probeErr(ctx context.Context, err error, capability, ns, path string) error {
	err = n.mapErr(ctx, err, capability, ns, path)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
