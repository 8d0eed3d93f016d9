package restart

import "strconv"

// BatchPlan splits n eligible allocations into batch sizes. Each entry of sizes is used once in
// turn and the last one repeats; a percentage is of n, rounded up and at least 1, as Nomad
// computes it after filtering. No sizes means batches of one (Nomad's default).
func BatchPlan(sizes []BatchSize, n int) []int {
	var out []int
	for i, left := 0, n; left > 0; i++ {
		b := BatchSize{N: 1}
		switch {
		case i < len(sizes):
			b = sizes[i]
		case len(sizes) > 0:
			b = sizes[len(sizes)-1]
		}
		k := b.N
		if b.Percent {
			k = percentOf(n, b.N)
		}
		if k < 1 {
			k = 1
		}
		if k > left {
			k = left
		}
		out = append(out, k)
		left -= k
	}
	return out
}

// AssignBatches sets the 1-based Batch of each allocation, in order, and returns the number
// of batches.
func AssignBatches(allocs []AllocProgress, sizes []BatchSize) int {
	plan := BatchPlan(sizes, len(allocs))
	i := 0
	for b, k := range plan {
		for j := 0; j < k; j++ {
			allocs[i].Batch = b + 1
			i++
		}
	}
	return len(plan)
}

// BatchAllocs returns the indexes in r.Allocs of the allocations of batch b.
func (r *Record) BatchAllocs(b int) []int {
	var out []int
	for i := range r.Allocs {
		if r.Allocs[i].Batch == b {
			out = append(out, i)
		}
	}
	return out
}

// Ordinal writes n as English ordinal: 1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st.
func Ordinal(n int) string {
	suffix := "th"
	switch n % 100 {
	case 11, 12, 13:
	default:
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}
