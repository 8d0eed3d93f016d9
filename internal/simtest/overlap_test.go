package simtest

import (
	"sync"
	"testing"
)

// Most is the peak of the calls in flight, not their count: four calls, at most three at
// once.
func TestOverlapCountsTheMostAtOnce(t *testing.T) {
	var o Overlap
	leaves := []func(){o.Enter(), o.Enter(), o.Enter()}
	for _, leave := range leaves {
		leave()
	}
	o.Enter()()
	if got := o.Most(); got != 3 {
		t.Fatalf("Most() = %d, want 3", got)
	}

	var wg sync.WaitGroup
	var concurrent Overlap
	for range 8 {
		wg.Go(func() { defer concurrent.Enter()() })
	}
	wg.Wait()
	if got := concurrent.Most(); got < 1 || got > 8 {
		t.Fatalf("Most() = %d after 8 calls, want 1 to 8", got)
	}
}
