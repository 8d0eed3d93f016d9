package nomadvars

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// EscapeSegment turns a name (a namespace, a job ID) into one path segment. Nomad variable
// paths allow only [a-zA-Z0-9-_~/] and at most 128 characters, and job IDs may hold dots,
// slashes and more; file names (the local store uses this too) must not hold slashes
// either. Every other byte becomes "~XX" (upper-case hex), so the mapping is reversible
// and never collides. Names whose escaped form passes maxLen (0: no limit) keep a readable
// head and end with "~~" and a hash of the whole name.
//
// An escaped segment never starts with "~" and a lower-case letter: such segments are
// Reserved for the project's own directories beside the escaped names.
func EscapeSegment(name string, maxLen int) string {
	var b strings.Builder
	for _, c := range []byte(name) {
		switch {
		case unescaped(c):
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

// UnescapeSegment returns the name EscapeSegment made seg from, or false when seg is not
// an escaped name or was shortened (a shortened name keeps only a hash of its end).
func UnescapeSegment(seg string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		switch {
		case unescaped(c):
			b.WriteByte(c)
		case c == '~' && i+2 < len(seg) && isUpperHex(seg[i+1]) && isUpperHex(seg[i+2]):
			b.WriteByte(unhex(seg[i+1])<<4 | unhex(seg[i+2]))
			i += 2
		default:
			return "", false
		}
	}
	return b.String(), true
}

// Reserved reports whether seg is a segment EscapeSegment never makes ("~" and a
// lower-case letter): a directory of the project's own (the schedules' "~schedules")
// beside escaped names can never be mistaken for one.
func Reserved(seg string) bool {
	return len(seg) >= 2 && seg[0] == '~' && seg[1] >= 'a' && seg[1] <= 'z'
}

// unescaped reports whether EscapeSegment keeps byte c as it is.
func unescaped(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}
