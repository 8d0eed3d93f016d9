package store

import (
	"context"
	"errors"
	"sort"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// What every store's List does once it has named its records: read them, keep those its
// filter asks for, newest first.

// ReadKept reads each listed record and keeps those that pass f, newest first. A record
// removed between the listing and its read is skipped: a listing is a snapshot.
func ReadKept[T any](ctx context.Context, listed []T, f Filter, read func(context.Context, T) (*restart.Record, error)) ([]*restart.Record, error) {
	var out []*restart.Record
	for _, item := range listed {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec, err := read(ctx, item)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if f.Keeps(rec) {
			out = append(out, rec)
		}
	}
	sortNewestFirst(out)
	return out, nil
}

// Keeps reports whether rec passes f.
func (f Filter) Keeps(rec *restart.Record) bool {
	if !AllNamespaces(f.Namespace) && rec.Namespace != f.Namespace {
		return false
	}
	if f.JobID != "" && rec.JobID != f.JobID {
		return false
	}
	return !f.Active || !rec.Status.Terminal()
}

// sortNewestFirst orders records newest CreateTime first; CreateIndex breaks ties, so the
// order is stable when clocks are coarse.
func sortNewestFirst(recs []*restart.Record) {
	sort.SliceStable(recs, func(i, j int) bool {
		a, b := recs[i], recs[j]
		if !a.CreateTime.Equal(b.CreateTime) {
			return a.CreateTime.After(b.CreateTime)
		}
		if a.CreateIndex != b.CreateIndex {
			return a.CreateIndex > b.CreateIndex
		}
		return a.ID < b.ID
	})
}
