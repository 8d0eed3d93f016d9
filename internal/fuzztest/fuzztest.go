// Package fuzztest is what the fuzz targets share (func FuzzXxx in the _test.go files beside
// each parser and decoder of outside input): a call bounded in time, so that an input that
// makes a parser hang or panic fails its target with the input in hand, and the check that a
// refusal names what it refused. Only tests import it; the product never does
// (internal/archtest checks).
package fuzztest

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Limit bounds one call under fuzzing. Every parser answers in microseconds; a call still
// running after this long (on a loaded, race-instrumented CI machine) loops. It is far
// below the fuzzer's own patience, which has no bound per input: a hang would stall it until
// the test binary's timeout, without saying which input hung.
const Limit = 10 * time.Second

// deadliner is *testing.T's Deadline, which testing.TB lacks.
type deadliner interface {
	Deadline() (time.Time, bool)
}

// Bound runs fn and fails t (with what fn panicked with and where, or with how long it ran)
// when fn panics or has not returned within Limit, or before the test's deadline (-timeout)
// when that comes first. fn runs on a goroutine of its own: it reports with t.Error, never
// t.Fatal.
func Bound(t testing.TB, what string, fn func()) {
	t.Helper()
	limit := Limit
	if d, ok := t.(deadliner); ok {
		if deadline, ok := d.Deadline(); ok {
			// Leave the test time to report before the binary's own timer panics.
			limit = min(limit, max(time.Until(deadline)-5*time.Second, time.Second))
		}
	}
	boundWithin(t, what, limit, fn)
}

func boundWithin(t testing.TB, what string, limit time.Duration, fn func()) {
	t.Helper()
	done := make(chan string, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Sprintf("%v\n%s", r, debug.Stack())
				return
			}
			done <- ""
		}()
		fn()
	}()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case p := <-done:
		if p != "" {
			t.Fatalf("%s panicked: %s", what, p)
		}
	case <-timer.C:
		t.Fatalf("%s has not returned after %s: it hangs on this input", what, limit)
	}
}

// Names reports, as an error of t, a refusal err that does not name every one of words: as
// written or as Go quotes it ("%q", which is how the product quotes a value it refuses, so
// that a value with a newline or an invisible character reads unambiguously).
func Names(t testing.TB, what string, err error, words ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want a refusal", what)
		return
	}
	msg := err.Error()
	for _, w := range words {
		if !strings.Contains(msg, w) && !strings.Contains(msg, strconv.Quote(w)) {
			t.Errorf("%s: the error %q does not name %q", what, msg, w)
		}
	}
}

// OneLine reports, as an error of t, an error text of more than one line: the product's
// refusals are one line naming the problem and the fix, and a value is quoted (%q) so that
// a newline it holds does not break the line.
func OneLine(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil && strings.ContainsAny(err.Error(), "\r\n") {
		t.Errorf("%s: the error is not one line: %q", what, err)
	}
}
