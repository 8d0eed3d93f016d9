package store_test

import (
	"fmt"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// BenchmarkNomadUpdate reports the request bytes sent to Nomad per Update (bytes/update)
// and the requests per Update (reqs/update): chunks of a big record are rewritten only
// where they changed.
func BenchmarkNomadUpdate(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("allocs=%d", n), func(b *testing.B) {
			c := simtest.Start(b, nomadsim.Options{})
			cl, cnt := countingClient(b, c)
			s := store.NewNomad(cl, store.NomadOptions{})
			reqs := func() int { return cnt.count("PUT") + cnt.count("DELETE") + cnt.count("GET") }
			var reqs0 int
			benchUpdate(b, s, n, func() int64 {
				if reqs0 == 0 {
					reqs0 = reqs() // the first call comes right after the Create
				}
				return cnt.bytesSent()
			})
			b.ReportMetric(float64(reqs()-reqs0)/float64(b.N), "reqs/update")
		})
	}
}
