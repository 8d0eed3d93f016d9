package variables

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Nomad's limits on variables and locks (nomad/structs/variables.go).
const (
	// MaxItemsSize bounds the sum of the lengths of a variable's keys and values.
	MaxItemsSize = 65536

	MinLockTTL       = 10 * time.Second
	MaxLockTTL       = 24 * time.Hour
	DefaultLockTTL   = 15 * time.Second
	DefaultLockDelay = 15 * time.Second
)

var validPath = regexp.MustCompile(`^[a-zA-Z0-9-_~/]{1,128}$`)

// rpcCoded renders an error the way Nomad's HTTP agent shows a coded RPC error that was
// wrapped twice on its way out (the validation errors of Variables.Apply are): the inner
// wrapper's prefix stays in the text.
func rpcCoded(msg string) string { return "RPC Error:: 400," + msg }

func itemsSize(items map[string]string) int {
	n := 0
	for k, v := range items {
		n += len(k) + len(v)
	}
	return n
}

// validatePath applies Nomad's path rules: allowed characters and length, and the reserved
// top-level "nomad" directory.
func validatePath(path string) error {
	if path == "" {
		return fmt.Errorf("variable requires path")
	}
	if !validPath.MatchString(path) {
		return fmt.Errorf("invalid path %q", path)
	}
	parts := strings.Split(path, "/")
	if parts[0] != "nomad" {
		return nil
	}
	if len(parts) == 1 {
		return fmt.Errorf(`"nomad" is a reserved top-level directory path, but you may write variables to "nomad/jobs", "nomad/job-templates", "nomad/sentinel", or below`)
	}
	switch {
	case parts[1] == "jobs" || parts[1] == "sentinel":
		return nil
	case parts[1] == "job-templates" && len(parts) == 3:
		return nil
	case parts[1] == "job-templates":
		return fmt.Errorf("\"nomad/job-templates\" is a reserved directory path, but you may write variables at the level below it, for example, \"nomad/job-templates/template-name\"")
	default:
		return fmt.Errorf("only paths at \"nomad/jobs\" or \"nomad/job-templates\" and below are valid paths under the top-level \"nomad\" directory")
	}
}

// validateLock is VariableLock.Validate: the messages of every failed rule.
func validateLock(l *lock) []string {
	var msgs []string
	if l.LockDelay < 0 || l.TTL < 0 {
		msgs = append(msgs, "Lock delay and TTL must be positive")
	}
	if l.TTL > MaxLockTTL || l.TTL < MinLockTTL {
		msgs = append(msgs, "TTL must be between 10 seconds and 24 hours")
	}
	return msgs
}

// canonicalizeLock fills a lock's defaults: a new ID, Nomad's default TTL and delay.
func canonicalizeLock(l *lock, newID func() string) {
	if l.ID == "" {
		l.ID = newID()
	}
	if l.LockDelay == 0 {
		l.LockDelay = DefaultLockDelay
	}
	if l.TTL == 0 {
		l.TTL = DefaultLockTTL
	}
}
