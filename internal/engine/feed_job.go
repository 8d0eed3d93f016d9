package engine

import (
	"context"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// jobFacts is what the feed knows of the job itself and of its deployments, from the Job
// and Deployment events of its stream, so that the guards before each batch (the job for
// the availability budget, the deployment check) read Nomad once, not once per batch.
//
// What it holds is trusted only while the stream stays synced since a read made while it
// was synced: the stream then carries every later change (Nomad sends a Job event for every
// change of the job, a Deployment event for every change of a deployment of it). A lost
// connection forgets it all; the next guard reads again. The feed's lock guards it.
type jobFacts struct {
	// conn counts the stream's lost connections: a read offers its answer with the count
	// seen before it was sent, and the answer is taken only if none was lost meanwhile.
	conn uint64
	// job is the job as last read or carried by an event (nil: unknown, or deregistered).
	job *restart.Job
	// deploymentsChecked: a read found no active deployment since the last lost
	// connection, so every deployment active since then has had an event.
	deploymentsChecked bool
	// deployments holds the deployments seen in events since then, by ID.
	deployments map[string]cluster.Deployment
}

// forgetJobLocked drops what the feed knows of the job (a lost connection, or its end).
func (f *allocFeed) forgetJobLocked() {
	f.facts.conn++
	f.facts.job = nil
	f.facts.deploymentsChecked = false
	clear(f.facts.deployments)
}

// readMark is taken before a guard's read, to be handed back with its answer: ok is false
// when the feed is not synced, and the answer is then not taken.
type readMark struct {
	conn uint64
	ok   bool
}

func (f *allocFeed) markRead() readMark {
	if f == nil {
		return readMark{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return readMark{conn: f.facts.conn, ok: f.synced && !f.ended}
}

// trustedLocked reports whether an answer read under m can be taken: the stream has been
// synced since before the read.
func (f *allocFeed) trustedLocked(m readMark) bool {
	return m.ok && f.synced && !f.ended && f.facts.conn == m.conn
}

// knownJob is the job as current as a read, when the feed has it.
func (f *allocFeed) knownJob() (*restart.Job, bool) {
	return whenSynced(f, func() (*restart.Job, bool) { return f.facts.job, !f.ended && f.facts.job != nil })
}

// offerJob takes a job read under m, unless an event brought a newer one first.
func (f *allocFeed) offerJob(j *restart.Job, m readMark) {
	if f == nil || j == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trustedLocked(m) && (f.facts.job == nil || j.ModifyIndex >= f.facts.job.ModifyIndex) {
		f.facts.job = j
	}
}

// applyJob takes a Job event: the job as of the event, or gone (deregistered: unknown
// until read again). An event only updates a job read before it: a stream subscribes from
// the start of Nomad's event buffer and replays older changes first (a scale up, then its
// scale down), so an event alone may be stale; one newer than the read is not.
func (f *allocFeed) applyJob(j *restart.Job, gone bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case gone:
		f.facts.job = nil
	case f.facts.job != nil && j.ModifyIndex > f.facts.job.ModifyIndex:
		f.facts.job = j
	}
}

// noActiveDeployment reports that the feed knows the job has no active deployment.
func (f *allocFeed) noActiveDeployment() bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.synced || f.ended || !f.facts.deploymentsChecked {
		return false
	}
	for _, d := range f.facts.deployments {
		if d.Active() {
			return false
		}
	}
	return true
}

// deploymentsNoneActive records that a read made under m found no active deployment.
func (f *allocFeed) deploymentsNoneActive(m readMark) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.trustedLocked(m) {
		f.facts.deploymentsChecked = true
	}
}

// applyDeployment takes a Deployment event, unless the feed holds a newer state of it.
func (f *allocFeed) applyDeployment(d cluster.Deployment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.facts.deployments == nil {
		f.facts.deployments = map[string]cluster.Deployment{}
	}
	if cur, ok := f.facts.deployments[d.ID]; ok && cur.ModifyIndex > d.ModifyIndex {
		return
	}
	f.facts.deployments[d.ID] = d
}

// guardJob is the job for the guards before a batch: from the feed where it knows it, else
// read (the cluster retries what passes) and offered to the feed.
func (d *driver) guardJob(ctx context.Context) (*restart.Job, error) {
	if j, ok := d.feed.knownJob(); ok {
		return j, nil
	}
	m := d.feed.markRead()
	j, err := d.e.cluster.Job(ctx, d.jobNS, d.jobID)
	if err == nil {
		d.feed.offerJob(j, m)
	}
	return j, err
}

// checkDeployment is the deployment guard before a batch: passed without a request where
// the feed knows no deployment of the job is active, else Engine.checkDeployment's read.
func (d *driver) checkDeployment(ctx context.Context) error {
	if d.feed.noActiveDeployment() {
		return nil
	}
	m := d.feed.markRead()
	err := d.e.checkDeployment(ctx, d.jobNS, d.jobID)
	if err == nil {
		d.feed.deploymentsNoneActive(m)
	}
	return err
}
