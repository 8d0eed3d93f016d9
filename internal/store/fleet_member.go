package store

import (
	"errors"
	"slices"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
)

// ErrNoMember says a namespace holds no member marker of the fleet asked for.
var ErrNoMember = errors.New("no fleet member marker")

// Membership is what a fleet's member marker in one namespace says: the fleet, homed in
// Home, may restart the jobs Jobs (IDs, sorted) of that namespace.
type Membership struct {
	Home string   `json:"home"`
	Jobs []string `json:"jobs"`
}

// Has reports whether m names job.
func (m Membership) Has(job string) bool {
	_, found := slices.BinarySearch(m.Jobs, job)
	return found
}

// MembershipsOf returns the member markers a fleet needs: one per namespace of its jobs
// other than its home, naming that namespace's jobs.
func MembershipsOf(f *fleet.Record) map[string]Membership {
	home := nomadvars.Namespace(f.Namespace)
	out := map[string]Membership{}
	for _, j := range f.Jobs {
		ns := nomadvars.Namespace(j.Namespace)
		if ns == home {
			continue
		}
		m := out[ns]
		m.Home = home
		m.Jobs = append(m.Jobs, j.JobID)
		out[ns] = m
	}
	for ns, m := range out {
		slices.Sort(m.Jobs)
		m.Jobs = slices.Compact(m.Jobs)
		out[ns] = m
	}
	return out
}
