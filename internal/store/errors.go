package store

import (
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
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
	// Err is the denial (a *nomadvars.PermissionError).
	Err error
	// Fleet says the variable is a fleet's, which only Nomad Variables can keep (no -state
	// local to offer instead).
	Fleet bool
}

func (e *PermissionError) Error() string {
	denied := &nomadvars.PermissionError{Capability: e.Capability, Namespace: e.Namespace, Path: e.Path}
	if e.Fleet {
		return fmt.Sprintf("%s: fleets are recorded in Nomad Variables; the token's ACL policy needs %s",
			denied.Error(), denied.Policy(e.Prefix))
	}
	return fmt.Sprintf("%s: the token's ACL policy needs %s, or keep restart records on this machine with -state local",
		denied.Error(), denied.Policy(e.Prefix))
}

func (e *PermissionError) Unwrap() error { return e.Err }
