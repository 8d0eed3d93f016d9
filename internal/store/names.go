package store

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// escapeName turns a namespace or job ID into one path segment that both stores accept.
// Nomad variable paths allow only [a-zA-Z0-9-_~/] and at most 128 characters, and job IDs
// may hold dots, slashes and more; file names must not hold slashes either. Every other
// byte becomes "~XX" (hex), so the mapping is reversible and never collides. Names whose
// escaped form passes maxLen keep a readable head and end with a hash of the whole name.
func escapeName(name string, maxLen int) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteByte(c)
		default:
			const hexDigits = "0123456789ABCDEF"
			b.WriteByte('~')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	out := b.String()
	if maxLen > 0 && len(out) > maxLen {
		sum := sha256.Sum256([]byte(name))
		tail := "~~" + hex.EncodeToString(sum[:8])
		head := out[:maxLen-len(tail)]
		// Do not cut an escape sequence in half: the head is for humans only, but a
		// dangling "~" would read as a broken escape.
		if i := strings.LastIndexByte(head, '~'); i >= 0 && i > len(head)-3 {
			head = head[:i]
		}
		out = head + tail
	}
	return out
}

// validID reports whether id can name a record: restart IDs are UUIDs, and anything outside
// [a-zA-Z0-9-] would be unsafe in a file name or a variable path.
func validID(id string) bool {
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

// normNamespace maps the empty namespace to Nomad's default one.
func normNamespace(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// allNamespaces reports whether ns asks for every namespace.
func allNamespaces(ns string) bool { return ns == "" || ns == "*" }
