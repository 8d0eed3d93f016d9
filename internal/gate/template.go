package gate

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Vars are what a gate's template variables stand for while one batch is gated.
type Vars struct {
	Job, Namespace, Group string
	// Batch is the batch's number, counting from 1.
	Batch int
	// AllocIDs are the batch's full allocation IDs, AllocNames their names (web.api[0]).
	// An empty list makes its regexp match only the empty string.
	AllocIDs, AllocNames []string
}

// variableList names the template variables, for error messages; Vars.value is the one
// that knows them.
const variableList = "{{job}} {{namespace}} {{group}} {{batch}} {{allocs}} {{alloc_names}}"

// value is what the variable name stands for. Every value is written to sit inside a
// double-quoted PromQL string (job="{{job}}", alloc_id=~"{{allocs}}"): a quote or backslash
// is escaped for it, and {{allocs}} and {{alloc_names}} are regular expressions whose
// backslashes are doubled so that the string Prometheus reads is the regexp meant
// (web\.api\[0\]; PromQL rejects the unknown escape "\." in a string).
func (v Vars) value(name string) (string, bool) {
	switch name {
	case "job":
		return quoteInString(v.Job), true
	case "namespace":
		return quoteInString(v.Namespace), true
	case "group":
		return quoteInString(v.Group), true
	case "batch":
		return strconv.Itoa(v.Batch), true
	case "allocs":
		return alternation(v.AllocIDs), true
	case "alloc_names":
		return alternation(v.AllocNames), true
	}
	return "", false
}

// alternation is a regexp matching exactly the given strings (Prometheus anchors its
// regexps), escaped for a double-quoted PromQL string.
func alternation(values []string) string {
	parts := make([]string, len(values))
	for i, s := range values {
		parts[i] = regexp.QuoteMeta(s)
	}
	return quoteInString(strings.Join(parts, "|"))
}

// quoteInString escapes s for the inside of a double-quoted PromQL string, whose escapes
// are Go's.
func quoteInString(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// Query is the gate's PromQL with its template variables filled in from v. A variable it
// does not know (only possible in a Spec not made by Parse) is left as written, for
// Prometheus to reject.
func (s Spec) Query(v Vars) string {
	out, _ := expand(s.PromQL, v.value)
	return out
}

// checkTemplate reports the first unknown variable or unclosed "{{" of a query.
func checkTemplate(query string) error {
	_, err := expand(query, Vars{}.value)
	return err
}

// expand replaces each {{ name }} of query by lookup(name). It is hand-written rather than
// text/template because PromQL is full of braces ({code="500"}) that a template engine
// would want to read; only the double-braced forms are variables. On an unknown name or a
// "{{" with no "}}" it returns the text expanded so far with the rest left as written, and
// the error.
func expand(query string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	rest := query
	for {
		open := strings.Index(rest, "{{")
		if open < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		end := strings.Index(rest[open+2:], "}}")
		if end < 0 {
			b.WriteString(rest)
			return b.String(), fmt.Errorf("%q has no closing }}; use one of %s", shorten(rest[open:]), variableList)
		}
		raw := rest[open : open+2+end+2]
		name := strings.TrimSpace(raw[2 : len(raw)-2])
		val, ok := lookup(name)
		if !ok {
			b.WriteString(rest)
			return b.String(), fmt.Errorf("unknown template variable %s; use one of %s", printable(raw), variableList)
		}
		b.WriteString(rest[:open])
		b.WriteString(val)
		rest = rest[open+len(raw):]
	}
}

// shorten keeps an error line short when it quotes the rest of a long query.
func shorten(s string) string {
	const limit = 40
	if r := []rune(s); len(r) > limit {
		return string(r[:limit]) + "…"
	}
	return s
}

// Expand fills the {{ name }} variables of a query from vars, whose values are written into
// the query as given (the caller escapes them for where they sit). known lists the
// variables for the error, which names the first unknown variable or unclosed "{{". The
// drain's Prometheus evidence (-drain-until prometheus:...) uses it with its own variables,
// so that every PromQL template of the project reads alike.
func Expand(query string, vars map[string]string, known string) (string, error) {
	out, err := expand(query, func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	})
	if err != nil {
		return out, errors.New(strings.Replace(err.Error(), variableList, known, 1))
	}
	return out, nil
}
