package gate

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MetaPrefix starts the job meta keys that declare gates: the meta entry
// nomad-restart.gate.errors = "<promql> <op> <number>" declares the gate "errors" (read it
// with ParseMeta).
const MetaPrefix = "nomad-restart.gate."

// Op is the comparison a measured value must satisfy for a measurement to pass.
type Op string

// The comparisons a gate may end with.
const (
	OpLess         Op = "<"
	OpLessEqual    Op = "<="
	OpGreater      Op = ">"
	OpGreaterEqual Op = ">="
	OpEqual        Op = "=="
	OpNotEqual     Op = "!="
)

// holds reports whether "v op threshold" is true. NaN never gets here: Judge counts it as
// no data first.
func (o Op) holds(v, threshold float64) bool {
	switch o {
	case OpLess:
		return v < threshold
	case OpLessEqual:
		return v <= threshold
	case OpGreater:
		return v > threshold
	case OpGreaterEqual:
		return v >= threshold
	case OpEqual:
		return v == threshold
	case OpNotEqual:
		return v != threshold
	}
	return false
}

// Spec is one gate: a PromQL query whose single number must satisfy Op Threshold.
type Spec struct {
	// Name identifies the gate in measurements, outcomes and messages; unique per restart.
	Name string `json:"name"`
	// PromQL is the query as the user wrote it, template variables ({{job}}, ...) still in
	// it; Query fills them in.
	PromQL    string  `json:"promql"`
	Op        Op      `json:"op"`
	Threshold float64 `json:"threshold"`
}

// String is the spec in the -gate flag's form, which Parse reads back.
func (s Spec) String() string {
	return fmt.Sprintf("%s: %s %s %s", s.Name, s.PromQL, s.Op, formatThreshold(s.Threshold))
}

// The fixes the parse errors name, one per form.
const (
	flagForm = "write NAME: QUERY OP NUMBER with OP one of < <= > >= == !="
	metaForm = "write QUERY OP NUMBER with OP one of < <= > >= == !="
)

var (
	// nameRE is what a gate name may be: it ends up in meta keys, flags and messages.
	nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	// comparisonRE finds the comparison at the end: the last operator directly followed by
	// the final token. The leading .* is greedy, so an operator inside the query (a > b,
	// a == b, a != b) stays in the query. The number is whatever follows the operator up to
	// trailing space; strconv.ParseFloat judges it.
	comparisonRE = regexp.MustCompile(`^(?s)(.*?)\s*(<=|>=|==|!=|<|>)\s*([^\s<>=!]+)\s*$`)
	// leadingNameRE is a "NAME:" at the start of a meta value, which repeats what the key
	// says (and is not PromQL).
	leadingNameRE = regexp.MustCompile(`^\s*[A-Za-z0-9_-]+:\s`)
)

// Parse reads a -gate flag value, "NAME: QUERY OP NUMBER", e.g.
//
//	errors: sum(rate(http_requests_total{job="{{job}}",code=~"5.."}[30s])) / sum(rate(http_requests_total{job="{{job}}"}[30s])) < 0.02
//
// The name ends at the first colon followed by white space (a recording rule's name, such
// as job:errors:rate5m, has no space after its colons, so a forgotten name is not taken
// from it). The comparison is the last operator and the number after it; everything
// between the name and it is the query, sent to Prometheus as written once its template
// variables are filled in. Each error is one line naming the problem and the fix.
func Parse(s string) (Spec, error) {
	name, rest, ok := cutName(s)
	if !ok {
		return Spec{}, fmt.Errorf("gate %q: no name; %s, e.g. errors: sum(rate(http_requests_total{code=~\"5..\"}[1m])) / sum(rate(http_requests_total[1m])) < 0.02", strings.TrimSpace(s), flagForm)
	}
	if !nameRE.MatchString(name) {
		return Spec{}, fmt.Errorf("gate %q: bad name; use letters, digits, - and _ only (%s)", name, flagForm)
	}
	return parseBody(name, rest, flagForm)
}

// cutName splits "NAME: REST" at the first colon followed by white space.
func cutName(s string) (name, rest string, ok bool) {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == ':' && isSpace(s[i+1]) {
			name = strings.TrimSpace(s[:i])
			return name, s[i+1:], name != ""
		}
	}
	return "", "", false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// ParseMeta reads a gate declared in job meta: name is the key's part after MetaPrefix,
// value is "QUERY OP NUMBER". The rules are Parse's.
func ParseMeta(name, value string) (Spec, error) {
	if !nameRE.MatchString(name) {
		return Spec{}, fmt.Errorf("gate %q (job meta %s): bad name; use letters, digits, - and _ only in the key", name, printable(MetaPrefix+name))
	}
	if leadingNameRE.MatchString(value) {
		return Spec{}, fmt.Errorf("gate %q (job meta %s): the value starts with a name; in job meta the key names the gate: %s", name, MetaPrefix+name, metaForm)
	}
	spec, err := parseBody(name, value, metaForm)
	if err != nil {
		return Spec{}, fmt.Errorf("%w (job meta %s)", err, MetaPrefix+name)
	}
	return spec, nil
}

// parseBody reads "QUERY OP NUMBER" for the gate name; form is the fix to name.
func parseBody(name, body, form string) (Spec, error) {
	m := comparisonRE.FindStringSubmatch(body)
	if m == nil {
		return Spec{}, fmt.Errorf("gate %q: no comparison at the end; %s", name, form)
	}
	query, op, num := strings.TrimSpace(m[1]), Op(m[2]), m[3]
	threshold, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return Spec{}, fmt.Errorf("gate %q: %q after %s is not a number; %s, NUMBER such as 0.02, -1 or 1e-3", name, num, op, form)
	}
	if math.IsNaN(threshold) || math.IsInf(threshold, 0) {
		// NaN compares false with everything and an infinite bound is no bound: either
		// would make the gate's verdict fixed whatever Prometheus measures.
		return Spec{}, fmt.Errorf("gate %q: the threshold must be a finite number, not %s; %s", name, num, form)
	}
	if query == "" {
		return Spec{}, fmt.Errorf("gate %q: no query before %s %s; %s", name, op, num, form)
	}
	if err := checkTemplate(query); err != nil {
		return Spec{}, fmt.Errorf("gate %q: %w", name, err)
	}
	return Spec{Name: name, PromQL: query, Op: op, Threshold: threshold}, nil
}

// ParseAll parses -gate flag values and rejects two gates of one name, since outcomes and
// measurements are kept by name.
func ParseAll(values []string) ([]Spec, error) {
	specs := make([]Spec, 0, len(values))
	seen := make(map[string]bool, len(values))
	for _, v := range values {
		s, err := Parse(v)
		if err != nil {
			return nil, err
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("gate %q is given twice; give each gate its own name", s.Name)
		}
		seen[s.Name] = true
		specs = append(specs, s)
	}
	return specs, nil
}

func formatThreshold(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// printable is s as written when it reads unambiguously on one line, else Go-quoted: an
// error names what it refuses without a newline or an invisible character breaking it.
func printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}
