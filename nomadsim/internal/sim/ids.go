package sim

import (
	"fmt"
	"math/rand/v2"
)

// newID returns a UUID-shaped identifier drawn from the cluster's seeded generator, so that
// a scenario replays with the same IDs. Callers hold c.Mu.
func (c *Cluster) newID() string {
	return uuidFrom(c.rng)
}

func uuidFrom(r *rand.Rand) string {
	a, b := r.Uint64(), r.Uint64()
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x",
		uint32(a>>32), uint16(a>>16), uint16(a), uint16(b>>48), b&0xffffffffffff)
}

func itoa(n int) string { return fmt.Sprint(n) }
