package store

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/hashicorp/nomad/api"
)

// PermissionError says Nomad's ACLs refused an operation on a restart record's variable,
// and what the operator must grant.
type PermissionError struct {
	// Capability is the variables capability that is missing: read, list, write or destroy.
	Capability string
	Namespace  string
	Path       string
	// Prefix is the store's variable prefix, for the policy to grant.
	Prefix string
	Err    error
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("Nomad denied %q on variable %q in namespace %q (Permission denied): "+
		"the token's ACL policy needs namespace %q { variables { path \"%s/*\" { capabilities = [\"read\", \"list\", \"write\", \"destroy\"] } } }, "+
		"or keep restart records on this machine with -state local",
		e.Capability, e.Path, e.Namespace, e.Namespace, e.Prefix)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// statusOf returns the HTTP status of an error of the api client, or 0.
func statusOf(err error) int {
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) && ure.HasStatusCode() {
		return ure.StatusCode()
	}
	var pure *api.UnexpectedResponseError
	if errors.As(err, &pure) && pure.HasStatusCode() {
		return pure.StatusCode()
	}
	return 0
}

// mapErr turns an error of the api client into the store's terms. capability names what
// the request needed, for a 403.
func (n *Nomad) mapErr(ctx context.Context, err error, capability, namespace, path string) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	switch statusOf(err) {
	case http.StatusForbidden:
		return &PermissionError{Capability: capability, Namespace: namespace, Path: path, Prefix: n.opts.Prefix, Err: err}
	case http.StatusNotFound:
		return ErrNotFound
	}
	if errors.Is(err, api.ErrVariablePathNotFound) {
		return ErrNotFound
	}
	return fmt.Errorf("nomad store: %s of variable %q in namespace %q failed: %w", capability, path, namespace, err)
}
