package nomadvars

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// This file holds what the layers keeping records in variables (the restart store, the
// schedules) do alike: say a failure in their own terms, find a record by an ID prefix,
// and repeat a read-change-write that lost a check-and-set race.

// Translate turns an error of this package into a layer's own terms: ErrNotFound becomes
// notFound, a denial becomes what denied makes of it (the layer's error naming the prefix
// to grant), and a RequestError is prefixed with layer. Anything else (a conflict, an
// ended context) is returned as it is.
func Translate(err error, layer string, notFound error, denied func(*PermissionError) error) error {
	var (
		perm *PermissionError
		req  *RequestError
	)
	switch {
	case errors.Is(err, ErrNotFound):
		return notFound
	case errors.As(err, &perm):
		return denied(perm)
	case errors.As(err, &req):
		return fmt.Errorf("%s: %w", layer, err)
	}
	return err
}

// FindByIDPrefix finds the item whose ID (idOf) is prefix or, failing that, the one item
// whose ID starts with prefix, and reads it with get. It returns notFound when no item
// matches, and what ambiguous makes of their IDs when several do.
func FindByIDPrefix[T, R any](items []T, idOf func(T) string, prefix string, notFound error,
	ambiguous func(ids []string) error, get func(T) (R, error)) (R, error) {
	var matches []T
	for _, it := range items {
		if idOf(it) == prefix {
			return get(it)
		}
		if prefix != "" && strings.HasPrefix(idOf(it), prefix) {
			matches = append(matches, it)
		}
	}
	var none R
	switch len(matches) {
	case 0:
		return none, notFound
	case 1:
		return get(matches[0])
	}
	ids := make([]string, len(matches))
	for i, m := range matches {
		ids[i] = idOf(m)
	}
	return none, ambiguous(ids)
}

// maxConflictRetries bounds ReadChangeWrite: writers racing on one variable settle within
// a few tries; fifty means something rewrites it without pause.
const maxConflictRetries = 50

// ReadChangeWrite reads a record with get, applies change and writes it with put (a
// check-and-set write), from a fresh read again while put fails with conflict (errors.Is),
// pausing a little longer each time. change returns false to write nothing. It returns the
// record as last read and changed; with change's error, the record as change left it; with
// get's or put's error (or the context's, when ctx ends during a pause), none.
func ReadChangeWrite[T any](ctx context.Context, conflict error, get func() (T, error),
	change func(T) (bool, error), put func(T) error) (T, error) {
	var none T
	for n := 0; ; n++ {
		rec, err := get()
		if err != nil {
			return none, err
		}
		write, err := change(rec)
		if err != nil || !write {
			return rec, err
		}
		err = put(rec)
		if err == nil {
			return rec, nil
		}
		if !errors.Is(err, conflict) || n >= maxConflictRetries {
			return none, err
		}
		select {
		case <-ctx.Done():
			return none, ctx.Err()
		case <-time.After(time.Duration(n+1) * 5 * time.Millisecond):
		}
	}
}
