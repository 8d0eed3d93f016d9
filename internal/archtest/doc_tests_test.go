package archtest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// citedTest is a test, benchmark or fuzz target a doc names (in a -run or -bench
	// pattern, or in prose).
	citedTest = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z]\w*`)
	// declaredTest is a test function's declaration.
	declaredTest = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)
)

// missingTests returns a message for each test, benchmark or fuzz target that doc (named
// name) cites and no test function is, nor begins (a -run or -bench pattern may name a
// prefix: TestFault runs TestFaultX and TestFaultY). FuzzXxx is the docs' placeholder.
func missingTests(name, doc string, declared []string) []string {
	var bad []string
	for _, cited := range slices.Compact(slices.Sorted(slices.Values(citedTest.FindAllString(doc, -1)))) {
		if cited == "FuzzXxx" {
			continue
		}
		if !slices.ContainsFunc(declared, func(d string) bool { return strings.HasPrefix(d, cited) }) {
			bad = append(bad, fmt.Sprintf("%s names %s, which no test function is or begins: name it as the tests do now", name, cited))
		}
	}
	return bad
}

// TestDocsNameTestsThatExist keeps the commands the docs give (go test -run, -bench) and
// the tests they cite as evidence pointing at tests that exist.
func TestDocsNameTestsThatExist(t *testing.T) {
	root, _ := moduleRoot(t)
	fsys := os.DirFS(root)
	files, err := moduleGoFiles(fsys)
	if err != nil {
		t.Fatalf("walking the module: %v", err)
	}
	var declared []string
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := fs.ReadFile(fsys, f)
		if err != nil {
			t.Fatalf("reading %s: %v", f, err)
		}
		for _, m := range declaredTest.FindAllStringSubmatch(string(src), -1) {
			declared = append(declared, m[1])
		}
	}
	if len(declared) < 100 {
		t.Fatalf("found only %d test functions: is the walk wrong?", len(declared))
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append(docs, filepath.Join(root, "README.md"))
	for _, p := range docs {
		doc, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("reading %s: %v", p, err)
		}
		rel, _ := filepath.Rel(root, p)
		for _, msg := range missingTests(filepath.ToSlash(rel), string(doc), declared) {
			t.Error(msg)
		}
	}
}

func TestMissingTestsFindsWhatIsGone(t *testing.T) {
	declared := []string{"TestFaultLeader", "TestFaultNetwork", "BenchmarkRestart", "FuzzParseGate"}
	doc := "go test -run 'TestFault' ; -bench BenchmarkRestart ; FuzzParseGate ; FuzzXxx ; " +
		"TestGone ; BenchmarkGone ; TestFault again"
	want := []string{
		"docs/x.md names BenchmarkGone, which no test function is or begins: name it as the tests do now",
		"docs/x.md names TestGone, which no test function is or begins: name it as the tests do now",
	}
	if got := missingTests("docs/x.md", doc, declared); !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
