package store

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// ValidID reports whether id can name a record: restart IDs are UUIDs, and anything outside
// [a-zA-Z0-9-] would be unsafe in a file name or a variable path.
func ValidID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// AllNamespaces reports whether ns asks for every namespace.
func AllNamespaces(ns string) bool { return ns == "" || ns == "*" }

// PrepareNew gives a record about to be created an ID when it has none, and checks what
// every store needs of it; store names the store in the error.
func PrepareNew(store string, rec *restart.Record) error {
	if rec.ID == "" {
		rec.ID = uuid.NewString()
	}
	switch {
	case !ValidID(rec.ID):
		return fmt.Errorf("%s: invalid restart ID %q", store, rec.ID)
	case rec.JobID == "":
		return fmt.Errorf("%s: a restart record needs a JobID", store)
	}
	return nil
}

// StampTimes sets a new record's times: its creation's when the caller set none (an import,
// a test), and its modification's now.
func StampTimes(created, modified *time.Time, now time.Time) {
	if created.IsZero() {
		*created = now
	}
	*modified = now
}
