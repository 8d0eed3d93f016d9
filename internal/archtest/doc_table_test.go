package archtest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docRow is one row of the table in docs/architecture.md: the packages it names and the
// project packages it says they may import, by their last path elements.
type docRow struct {
	pkgs      []string
	mayImport []string
}

// parenthetical matches an aside in a row's cell: "(for the retry rule)".
var parenthetical = regexp.MustCompile(`\([^)]*\)`)

// parseDocTable reads the table's rows: "| `internal/store` | nomadvars, cluster; and ... |".
// What a cell says before its first ";" is the list of packages, asides in parentheses
// dropped; "nothing" is none, "x only" is x.
func parseDocTable(doc string) []docRow {
	var rows []docRow
	for line := range strings.Lines(doc) {
		cells := strings.Split(strings.TrimSpace(line), "|")
		if len(cells) != 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		var row docRow
		for p := range strings.SplitSeq(cells[1], ",") {
			row.pkgs = append(row.pkgs, strings.Trim(strings.TrimSpace(p), "`"))
		}
		list, _, _ := strings.Cut(cells[2], ";")
		list = parenthetical.ReplaceAllString(list, "")
		for name := range strings.SplitSeq(list, ",") {
			name = strings.TrimSuffix(strings.Trim(strings.TrimSpace(name), "`"), " only")
			if name != "" && name != "nothing" {
				row.mayImport = append(row.mayImport, name)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// shortName is how the doc names a project package: its path under internal/ ("store" for
// internal/store, "gate/prometheus"), else its whole path ("nomadsim/traffic"; "nomadsim"
// for nomadsim/...).
func shortName(pkg string) string {
	pkg = strings.TrimSuffix(pkg, "/...")
	if rest, ok := strings.CutPrefix(pkg, "internal/"); ok {
		return rest
	}
	return pkg
}

// compareDocTable returns a message for each package whose row in the doc and in
// architecture() disagree, or that one of them lacks.
func compareDocTable(table []rule, rows []docRow) []string {
	var bad []string
	inDoc := map[string][]string{}
	for _, r := range rows {
		for _, p := range r.pkgs {
			inDoc[p] = r.mayImport
		}
	}
	for _, r := range table {
		got, ok := inDoc[r.pkg]
		if !ok {
			bad = append(bad, fmt.Sprintf("docs/architecture.md has no row for %s: add one saying what it may import", r.pkg))
			continue
		}
		delete(inDoc, r.pkg)
		var want []string
		for _, imp := range r.mayImport {
			if name := shortName(imp); !slices.Contains(want, name) {
				want = append(want, name)
			}
		}
		slices.Sort(want)
		got = slices.Sorted(slices.Values(got))
		if !slices.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("docs/architecture.md says %s may import %v, the test's table %v: make them agree", r.pkg, got, want))
		}
	}
	for p := range inDoc {
		bad = append(bad, fmt.Sprintf("docs/architecture.md has a row for %s, which the test's table lacks", p))
	}
	slices.Sort(bad)
	return bad
}

// TestDocTableMatchesTheRules keeps the table a reader sees in docs/architecture.md the
// same as the one the imports are checked against.
func TestDocTableMatchesTheRules(t *testing.T) {
	_, doc := architectureDoc(t)
	rows := parseDocTable(doc)
	if len(rows) < 15 {
		t.Fatalf("found only %d rows in the doc's package table: has its format changed?", len(rows))
	}
	for _, msg := range compareDocTable(architecture(), rows) {
		t.Error(msg)
	}
}

func TestCompareDocTableFindsDisagreements(t *testing.T) {
	table := []rule{
		{pkg: "internal/store", mayImport: []string{"internal/cluster", "internal/restart"}},
		{pkg: "internal/new"},
		{pkg: "nomadsim/...", mayImport: []string{"nomadsim/..."}},
	}
	rows := parseDocTable("| package | may import |\n| --- | --- |\n" +
		"| `internal/store` | cluster (for retries), fleet; and no I/O |\n" +
		"| `nomadsim/...` | nomadsim only |\n" +
		"| `internal/gone` | nothing |\n")
	got := compareDocTable(table, rows)
	want := []string{
		"docs/architecture.md has a row for internal/gone, which the test's table lacks",
		"docs/architecture.md has no row for internal/new: add one saying what it may import",
		"docs/architecture.md says internal/store may import [cluster fleet], the test's table [cluster restart]: make them agree",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
