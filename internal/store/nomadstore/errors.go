package nomadstore

import (
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// storeErr turns an error of nomadvars into the store's terms: ErrNotFound, a
// *PermissionError naming the prefix to grant, or the failure with the store's name.
func (n *Restarts) storeErr(err error) error { return nomadStoreErr(n.opts.Prefix, err) }

// nomadStoreErr is storeErr for the variables under prefix (Lister has no
// store handle).
func nomadStoreErr(prefix string, err error) error {
	return nomadvars.Translate(err, "nomad store", store.ErrNotFound, func(perm *nomadvars.PermissionError) error {
		return &store.PermissionError{Capability: perm.Capability, Namespace: perm.Namespace, Path: perm.Path, Prefix: prefix, Err: perm}
	})
}
