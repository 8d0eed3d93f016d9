package nomadstore

import (
	"context"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Lister lists the restarts a Nomad store keeps (see Restarts for the layout)
// with one prefix listing across namespaces, as a blocking query: a watcher such as the
// agent's discovery wakes when any record or lease changes (created, updated, lock released
// or expired) without reading a record. It parses the store's paths here, beside the code
// that writes them, so no caller depends on the layout.
type Lister struct {
	// vars tries each listing once: the watch loop calling List paces and backs off its
	// own tries, and a retry inside would retry the loop's retries.
	vars   *nomadvars.Client
	prefix string
}

// NewLister returns a lister of the records under prefix (default
// "nomad-restart", as Options.Prefix) on vars's cluster.
func NewLister(vars *nomadvars.Client, prefix string) *Lister {
	if prefix == "" {
		prefix = "nomad-restart"
	}
	return &Lister{
		vars:   vars.Watching(),
		prefix: strings.Trim(prefix, "/"),
	}
}

// Prefix is the root of the variables the lister lists.
func (l *Lister) Prefix() string { return l.prefix }

// List lists the restarts in namespace ns ("*": every namespace the token may list) as a
// blocking query: it answers once the variables' index passes after, or when wait has
// passed; after 0 answers at once. It is tried once.
func (l *Lister) List(ctx context.Context, ns string, after uint64, wait time.Duration) (store.RestartListing, error) {
	metas, index, err := l.vars.ListAfter(ctx, ns, l.prefix+"/", nomadvars.Wait{After: after, Time: wait})
	if err != nil {
		return store.RestartListing{}, nomadStoreErr(l.prefix, err)
	}
	return store.RestartListing{Restarts: listedRestarts(l.prefix, metas), Index: index}, nil
}

// listedRestarts turns a listing of the variables under prefix into restarts: heads are
// <prefix>/<job>/<id>, leases <prefix>/<job>/<id>/lease; chunks, the per-job active marker
// and anything else are ignored.
func listedRestarts(prefix string, metas []*nomadvars.Metadata) []store.ListedRestart {
	byKey := map[string]*store.ListedRestart{}
	var order []string
	get := func(ns, id string) *store.ListedRestart {
		k := key(ns, id)
		r := byKey[k]
		if r == nil {
			r = &store.ListedRestart{Namespace: ns, ID: id}
			byKey[k] = r
			order = append(order, k)
		}
		return r
	}
	for _, m := range metas {
		rest, ok := strings.CutPrefix(m.Path, prefix+"/")
		if !ok {
			continue
		}
		parts := strings.Split(rest, "/")
		if nomadvars.Reserved(parts[0]) {
			continue // schedules and fleets (~schedules, ~fleets) are no restarts
		}
		switch {
		case len(parts) == 2 && isRestartID(parts[1]):
			r := get(m.Namespace, parts[1])
			r.JobSegment, r.HeadIndex = parts[0], m.ModifyIndex
		case len(parts) == 3 && parts[2] == "lease" && isRestartID(parts[1]):
			get(m.Namespace, parts[1]).LeaseIndex = m.ModifyIndex
		}
	}
	out := make([]store.ListedRestart, 0, len(order))
	for _, k := range order {
		if r := byKey[k]; r.HeadIndex != 0 { // a lease without its record: nothing to drive
			out = append(out, *r)
		}
	}
	return out
}

// isRestartID reports whether s is a restart ID as the store makes them (a UUID in its
// 36-character form): stricter than validID, so the marker "active" and any other name
// beside the records never reads as one.
func isRestartID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}
