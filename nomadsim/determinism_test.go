package nomadsim

import (
	"sort"
	"testing"
)

func TestSameSeedSameIDs(t *testing.T) {
	ids := func(seed int64) []string {
		c, cl := startCluster(t, Options{Seed: seed})
		var out []string
		for _, n := range c.Nodes() {
			out = append(out, n.ID)
		}
		resp, _, err := cl.Jobs().Register(serviceJob("web", 3), nil)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.EvalID)
		stubs, _, _ := cl.Jobs().Allocations("web", false, nil)
		var allocs []string
		for _, s := range stubs {
			allocs = append(allocs, s.Name+"="+s.ID+"@"+s.NodeID)
		}
		sort.Strings(allocs)
		return append(out, allocs...)
	}
	a, b, other := ids(42), ids(42), ids(43)
	if len(a) != len(b) {
		t.Fatalf("lengths differ: %d %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("seed 42 run differs at %d: %s vs %s", i, a[i], b[i])
		}
	}
	if a[0] == other[0] {
		t.Errorf("seeds 42 and 43 gave the same first node ID")
	}
}
