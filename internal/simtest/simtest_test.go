package simtest

import (
	"context"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim"
)

func TestStartServesTheAPI(t *testing.T) {
	c := Start(t, nomadsim.Options{Seed: 1})
	client := Client(t, c)
	if c.Addr() == "" {
		t.Fatal("the cluster has no address")
	}
	leader, err := client.Status().Leader()
	if err != nil || leader == "" {
		t.Fatalf("leader = %q, %v; want an address", leader, err)
	}
}

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	start := time.Now()
	calls := 0
	WaitWithin(t, 10*time.Second, "the third call", func() bool { calls++; return calls == 3 })
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("WaitWithin took %s for a condition that held on the third call", time.Since(start))
	}
}

// failRecorder records a Fatalf instead of ending the test, to test WaitFor's failure.
type failRecorder struct {
	testing.TB
	failed string
}

func (f *failRecorder) Helper() {}
func (f *failRecorder) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func TestWaitForFailsWhenTheContextEnds(t *testing.T) {
	rec := &failRecorder{TB: t}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	func() {
		defer func() {
			if r := recover(); r != rec {
				t.Fatalf("WaitFor did not fail the test: recovered %v", r)
			}
		}()
		WaitFor(rec, ctx, "never", func() bool { return false })
	}()
	if rec.failed == "" {
		t.Fatal("WaitFor returned without failing")
	}
}
