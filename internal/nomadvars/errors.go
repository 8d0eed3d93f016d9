package nomadvars

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
)

// ErrNotFound says there is no variable at the path read.
var ErrNotFound = errors.New("variable not found")

// ErrLockHeld says a variable's lock is held by someone else.
var ErrLockHeld = errors.New("variable lock is held by another holder")

// ErrLockLost says a lock is no longer the caller's: it expired (its holder failed to renew
// it within its TTL) and may have been taken by another.
var ErrLockLost = errors.New("variable lock is no longer held")

// operation names what a request needed, as Nomad's ACL capability for variables.
type operation string

const (
	opRead    operation = "read"
	opList    operation = "list"
	opWrite   operation = "write"
	opDestroy operation = "destroy"
)

// PermissionError says Nomad's ACLs refused a request on a variable (a 403). It matches
// cluster.ErrPermissionDenied with errors.Is, like every denial Nomad gives the project.
type PermissionError struct {
	// Capability is the variables capability that is missing: read, list, write or destroy.
	Capability string
	Namespace  string
	Path       string
	Err        error
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("Nomad denied %q on variable %q in namespace %q (Permission denied)", e.Capability, e.Path, e.Namespace)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// Is makes a denial match cluster.ErrPermissionDenied.
func (e *PermissionError) Is(target error) bool { return target == cluster.ErrPermissionDenied }

// Policy is the ACL policy rule that grants every capability on the variables under
// prefix in the error's namespace, for a message telling the operator what to grant.
func (e *PermissionError) Policy(prefix string) string {
	return fmt.Sprintf("namespace %q { variables { path \"%s/*\" { capabilities = [\"read\", \"list\", \"write\", \"destroy\"] } } }", e.Namespace, prefix)
}

// ConflictError says a check-and-set write or delete found the variable changed: it is no
// longer at CheckIndex (or, for a create, it exists).
type ConflictError struct {
	Namespace, Path string
	CheckIndex      uint64
	// Current is the variable as Nomad holds it now; nil when it does not exist. Its Items
	// are nil when the token may not read it.
	Current *Variable
	Err     error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("variable %q in namespace %q changed since index %d", e.Path, e.Namespace, e.CheckIndex)
}

func (e *ConflictError) Unwrap() error { return e.Err }

// RequestError is any other failure of a request on a variable, after its retries.
type RequestError struct {
	Capability, Namespace, Path string
	Err                         error
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("%s of variable %q in namespace %q failed: %v", e.Capability, e.Path, e.Namespace, e.Err)
}

func (e *RequestError) Unwrap() error { return e.Err }

// classify turns an error of the api client into the package's terms. A context that
// ended wins over what the request said.
func classify(ctx context.Context, err error, op operation, ns, path string) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, ErrLockHeld) || errors.Is(err, ErrLockLost) {
		return err // the lock operations' own answers
	}
	var conflict api.ErrCASConflict
	switch {
	case StatusOf(err) == http.StatusForbidden:
		return &PermissionError{Capability: string(op), Namespace: ns, Path: path, Err: err}
	case StatusOf(err) == http.StatusNotFound, errors.Is(err, api.ErrVariablePathNotFound):
		return ErrNotFound
	case errors.As(err, &conflict):
		return newConflict(ns, path, conflict)
	}
	return &RequestError{Capability: string(op), Namespace: ns, Path: path, Err: err}
}

// newConflict turns the api client's conflict into a *ConflictError. Nomad answers a
// conflict on a missing variable with a zero one: that is Current nil.
func newConflict(ns, path string, c api.ErrCASConflict) *ConflictError {
	cur := c.Conflict
	if cur != nil && cur.ModifyIndex == 0 {
		cur = nil
	}
	return &ConflictError{Namespace: ns, Path: path, CheckIndex: c.CheckIndex, Current: fromAPI(cur), Err: c}
}

// StatusOf returns the HTTP status of an error of the api client, or 0.
func StatusOf(err error) int {
	var ure api.UnexpectedResponseError
	if errors.As(err, &ure) && ure.HasStatusCode() {
		return ure.StatusCode()
	}
	var pure *api.UnexpectedResponseError
	if errors.As(err, &pure) && pure != nil && pure.HasStatusCode() {
		return pure.StatusCode()
	}
	return 0
}

// lockGone reports whether err is Nomad's answer to a lock operation on a variable that
// holds no lock, or does not exist: a 500 that no retry changes.
func lockGone(err error) bool {
	if StatusOf(err) != http.StatusInternalServerError {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "doesn't hold a lock") || strings.Contains(msg, "variable doesn't exist")
}
