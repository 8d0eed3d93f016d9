package engine

import (
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// What the feed knows of the job and its deployments is trusted only while the stream has
// stayed synced since a read made while it was synced; events keep it current; a lost
// connection or a deregistration forgets it.
func TestFeedJobFacts(t *testing.T) {
	job := func(index uint64, count int) *restart.Job {
		return &restart.Job{ID: "web", ModifyIndex: index, Groups: []restart.Group{{Name: "web", Count: count}}}
	}
	type step func(f *allocFeed)
	synced := func(f *allocFeed) { f.setSynced(true) }
	gap := func(f *allocFeed) { f.setSynced(false) }
	readJob := func(j *restart.Job) step {
		return func(f *allocFeed) { f.offerJob(j, f.markRead()) }
	}
	// A read whose answer comes after the connection was lost (and synced again).
	readAcrossGap := func(j *restart.Job) step {
		return func(f *allocFeed) {
			m := f.markRead()
			f.setSynced(false)
			f.setSynced(true)
			f.offerJob(j, m)
		}
	}
	event := func(j *restart.Job) step { return func(f *allocFeed) { f.applyJob(j, false) } }
	gone := func(f *allocFeed) { f.applyJob(nil, true) }
	noneActive := func(f *allocFeed) { f.deploymentsNoneActive(f.markRead()) }
	dep := func(id, status string, index uint64) step {
		return func(f *allocFeed) {
			f.applyDeployment(cluster.Deployment{ID: id, Status: status, ModifyIndex: index})
		}
	}
	for _, tc := range []struct {
		name         string
		steps        []step
		wantJob      uint64 // the ModifyIndex of the job known, 0: none
		wantNoActive bool
	}{
		{"nothing read", []step{synced}, 0, false},
		{"read before the first sync is not taken", []step{readJob(job(5, 2)), synced}, 0, false},
		{"read while synced", []step{synced, readJob(job(5, 2)), noneActive}, 5, true},
		{"a newer Job event replaces the read", []step{synced, readJob(job(5, 2)), event(job(9, 3))}, 9, false},
		{"a Job event before any read is not taken (a replay of the buffer)", []step{synced, event(job(9, 3))}, 0, false},
		{"replayed events older than the read are dropped", []step{synced, readJob(job(9, 1)), event(job(5, 2)), event(job(7, 2))}, 9, false},
		{"a lost connection forgets", []step{synced, readJob(job(5, 2)), noneActive, gap, synced}, 0, false},
		{"an answer read across a lost connection is not taken", []step{synced, readAcrossGap(job(5, 2))}, 0, false},
		{"a deregistration forgets the job", []step{synced, readJob(job(5, 2)), gone}, 0, false},
		{"a deployment started after the check", []step{synced, noneActive, dep("d1", "running", 10)}, 0, false},
		{"... and its end", []step{synced, noneActive, dep("d1", "running", 10), dep("d1", "successful", 12)}, 0, true},
		{"a duplicate older event does not revive it", []step{synced, noneActive, dep("d1", "running", 10), dep("d1", "successful", 12), dep("d1", "running", 10)}, 0, true},
		{"a paused deployment is active", []step{synced, noneActive, dep("d2", "paused", 10)}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newAllocFeed()
			for _, s := range tc.steps {
				s(f)
			}
			j, ok := f.knownJob()
			switch {
			case tc.wantJob == 0 && ok:
				t.Errorf("knownJob = %+v, want none", j)
			case tc.wantJob != 0 && (!ok || j.ModifyIndex != tc.wantJob):
				t.Errorf("knownJob = %+v, %v; want the job at index %d", j, ok, tc.wantJob)
			}
			if got := f.noActiveDeployment(); got != tc.wantNoActive {
				t.Errorf("noActiveDeployment = %v, want %v", got, tc.wantNoActive)
			}
		})
	}
	var none *allocFeed // drivers without a feed read every time
	if _, ok := none.knownJob(); ok || none.noActiveDeployment() {
		t.Error("a nil feed claims to know the job")
	}
}
