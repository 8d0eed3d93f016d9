package acl

import (
	"sort"
	"strings"
)

// globMatch reports whether subj matches pattern, where '*' matches any run of characters
// (slashes included), with the semantics of the glob library Nomad uses for its rules.
func globMatch(pattern, subj string) bool {
	if pattern == "" {
		return subj == pattern
	}
	if pattern == "*" {
		return true
	}
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return subj == pattern
	}
	leadingGlob := strings.HasPrefix(pattern, "*")
	trailingGlob := strings.HasSuffix(pattern, "*")
	end := len(parts) - 1
	for i := 0; i < end; i++ {
		idx := strings.Index(subj, parts[i])
		switch i {
		case 0:
			// Without a leading glob the first part must be a prefix.
			if !leadingGlob && idx != 0 {
				return false
			}
		default:
			if idx < 0 {
				return false
			}
		}
		subj = subj[idx+len(parts[i]):]
	}
	return trailingGlob || strings.HasSuffix(subj, parts[end])
}

// closestGlob picks among the glob rules matching name the one Nomad picks: the smallest
// difference between the name's length and the glob's literal length, ties broken by the
// rules' lexical order (the order of Nomad's radix tree walk).
func closestGlob(rules map[string]capSet, name string) (capSet, bool) {
	type match struct {
		key  string
		diff int
	}
	var matches []match
	for k := range rules {
		if globMatch(k, name) {
			matches = append(matches, match{k, len(name) - len(k) + strings.Count(k, "*")})
		}
	}
	if len(matches) == 0 {
		return nil, false
	}
	sort.Slice(matches, func(i, j int) bool {
		if matches[i].diff != matches[j].diff {
			return matches[i].diff < matches[j].diff
		}
		return matches[i].key < matches[j].key
	})
	return rules[matches[0].key], true
}
