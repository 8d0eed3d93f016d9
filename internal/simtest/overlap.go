package simtest

import "sync/atomic"

// Overlap counts the calls of a test's fake that are in flight at once, and the most there
// ever were: how a test checks that the code under test bounds its concurrent requests.
// Its zero value is ready; it is safe for concurrent use.
type Overlap struct {
	inFlight, most atomic.Int32
}

// Enter counts a call in and returns the function that counts it out.
func (o *Overlap) Enter() (leave func()) {
	n := o.inFlight.Add(1)
	for {
		most := o.most.Load()
		if n <= most || o.most.CompareAndSwap(most, n) {
			break
		}
	}
	return func() { o.inFlight.Add(-1) }
}

// Most is the most calls that were in flight at once.
func (o *Overlap) Most() int { return int(o.most.Load()) }
