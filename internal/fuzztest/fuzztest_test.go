package fuzztest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB that keeps what the checks report.
type recorder struct {
	testing.TB
	reports []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, a ...any) {
	r.reports = append(r.reports, fmt.Sprintf(format, a...))
}
func (r *recorder) Fatalf(format string, a ...any) {
	r.reports = append(r.reports, fmt.Sprintf(format, a...))
}

func TestBoundReportsPanicsAndHangs(t *testing.T) {
	r := &recorder{}
	boundWithin(r, "parse", time.Second, func() { panic("index out of range") })
	if len(r.reports) != 1 || !strings.Contains(r.reports[0], "parse panicked: index out of range") || !strings.Contains(r.reports[0], "fuzztest_test.go") {
		t.Errorf("a panic reported as %q, want what and where", r.reports)
	}

	r = &recorder{}
	release := make(chan struct{})
	defer close(release)
	boundWithin(r, "parse", 20*time.Millisecond, func() { <-release })
	if len(r.reports) != 1 || !strings.Contains(r.reports[0], "parse has not returned after 20ms") {
		t.Errorf("a hang reported as %q", r.reports)
	}

	r = &recorder{}
	boundWithin(r, "parse", time.Second, func() {})
	if len(r.reports) != 0 {
		t.Errorf("a call that returned reported %q", r.reports)
	}
}

func TestNamesAndOneLine(t *testing.T) {
	r := &recorder{}
	Names(r, "x", errors.New(`invalid -batch-size value "1\n2": give a number`), "-batch-size", "1\n2")
	OneLine(r, "x", errors.New(`invalid -batch-size value "1\n2": give a number`))
	if len(r.reports) != 0 {
		t.Errorf("a quoted value reported %q", r.reports)
	}
	Names(r, "x", errors.New("give a number"), "-batch-size")
	Names(r, "x", nil, "-batch-size")
	OneLine(r, "x", errors.New("two\nlines"))
	if len(r.reports) != 3 {
		t.Errorf("reports %q, want 3: a flag not named, no error, two lines", r.reports)
	}
}
