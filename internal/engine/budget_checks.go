package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/health"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// budgetChecksEvery is the least time, in Nomad's time, between two reads of the checks of a
// batch's groups while the batch waits for its availability budget. Nomad's allocation
// checks endpoint has no blocking query, and a blocking Consul query per service held for
// the whole wait is more than the budget needs: a read every few seconds sees a check
// recover soon enough, at one request per allocation (Nomad) or per service (Consul).
const budgetChecksEvery = 3 * time.Second

// budgetChecksMaxAllocs bounds the Nomad-native check reads of one group: above it, the
// Nomad checks of the group's allocations outside the batch are not read (one request
// each would cost more than the batch), and the restart says so once.
const budgetChecksMaxAllocs = 200

// budgetChecksParallel bounds the requests one read has in flight.
const budgetChecksParallel = 8

// budgetChecks finds, for the availability budget of one batch under -health checks, the
// allocations of the batch's groups that run by their task states but fail their checks:
// they are out of service as surely as a stopped one. It judges each allocation with the
// gate's own rules (readiness checks, ignore_warnings, checks not registered, sources that
// cannot be read) at a min-healthy time of zero. It is used by one goroutine at a time.
type budgetChecks struct {
	d *driver
	// groups are the batch's groups; skip the allocations never read: the batch's own
	// (already counted as leaving) and those the restart reported failed (accepted).
	groups map[string]bool
	skip   map[string]bool
	every  time.Duration // real time between reads
	readAt time.Time     // local time of the last read; zero before the first
	// results are the last read's verdicts by allocation ID: what it fails, "" when it
	// passes or has no checks.
	results map[string]string
	// notes are what the restart should say once (groups whose checks are not read).
	notes []string
	noted map[string]bool
	// off: every group of the batch is too big for its checks to be read (allTooBig).
	off bool
	// consul is the batch's Consul reader, made on first use.
	consul *health.Consul
}

// newBudgetChecks returns the checks reader of batch b, or nil when the restart does not
// wait for checks (then nothing fails its checks).
func newBudgetChecks(d *driver, b int) *budgetChecks {
	if d.spec.Health != restart.HealthChecks {
		return nil
	}
	scale := d.e.health.TimeScale
	if scale <= 0 {
		scale = 1
	}
	c := &budgetChecks{d: d, groups: map[string]bool{}, skip: map[string]bool{}, noted: map[string]bool{},
		every: max(time.Duration(float64(budgetChecksEvery)/scale), time.Millisecond)}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, i := range d.rec.BatchAllocs(b) {
		c.groups[d.rec.Allocs[i].Group] = true
		c.skip[d.rec.Allocs[i].ID] = true
	}
	for id := range acceptedAllocs(d.rec) {
		c.skip[id] = true
	}
	return c
}

// acceptedAllocs are the allocations (and their replacements) this restart already
// reported failed: the operator chose to go on past them.
func acceptedAllocs(r *restart.Record) map[string]bool {
	out := map[string]bool{}
	for _, a := range r.Allocs {
		if a.State == restart.AllocFailed {
			out[a.ID] = true
			if a.Replacement != "" {
				out[a.Replacement] = true
			}
		}
	}
	return out
}

// candidates are the allocations whose checks count: of the batch's groups, outside the
// batch, not accepted, serving by their task states.
func (c *budgetChecks) candidates(allocs []*restart.Alloc) []*restart.Alloc {
	var out []*restart.Alloc
	for _, a := range allocs {
		if c.groups[a.Group] && !c.skip[a.ID] && restart.Serving(a) {
			out = append(out, a)
		}
	}
	return out
}

// due is how long until the next read may be made (zero or less: now).
func (c *budgetChecks) due() time.Duration {
	if c == nil || c.off || c.readAt.IsZero() {
		return 0
	}
	return time.Until(c.readAt.Add(c.every))
}

// failing returns, by allocation ID, what each candidate fails, from the last read; a
// candidate the last read did not see (it started serving since) counts as failing until
// it is read: the budget never takes missing data for healthy.
func (c *budgetChecks) failing(allocs []*restart.Alloc) map[string]string {
	if c == nil || c.off {
		return nil
	}
	out := map[string]string{}
	for _, a := range c.candidates(allocs) {
		why, ok := c.results[a.ID]
		switch {
		case !ok:
			out[a.ID] = "checks not yet read"
		case why != "":
			out[a.ID] = why
		}
	}
	return out
}

// takeNotes returns what the restart has yet to say, once.
func (c *budgetChecks) takeNotes() []string {
	if c == nil {
		return nil
	}
	n := c.notes
	c.notes = nil
	return n
}

// budgetItem is one allocation to judge, with the checks it is judged by.
type budgetItem struct {
	a     *restart.Alloc
	specs []health.CheckSpec
}

// read reads the checks of the candidates among allocs now and keeps the verdicts.
func (c *budgetChecks) read(ctx context.Context, allocs []*restart.Alloc) {
	if c == nil || c.off {
		return
	}
	c.readAt = time.Now()
	cands := c.candidates(allocs)
	results := make(map[string]string, len(cands))
	c.results = results
	if len(cands) == 0 {
		return
	}
	job, src, err := c.d.readinessDeps(ctx)
	if err != nil {
		for _, a := range cands {
			results[a.ID] = fmt.Sprintf("checks unknown: %v", err)
		}
		return
	}
	var items []budgetItem
	nomadPer := map[string]int{}
	for _, a := range cands {
		specs := health.AllocChecks(job, a)
		if len(specs) == 0 {
			results[a.ID] = ""
			continue
		}
		if n, _ := health.Providers(specs); n {
			nomadPer[a.Group]++
		}
		c.d.e.observeTimes(a) // so that snapshots stamped now are not older than its tasks
		items = append(items, budgetItem{a, specs})
	}
	// Above the bound, a group's Nomad checks are left out: the gate then judges its
	// allocations by their Consul checks only, if any.
	for i := range items {
		g := items[i].a.Group
		if nomadPer[g] <= budgetChecksMaxAllocs {
			continue
		}
		items[i].specs = withoutProvider(items[i].specs, health.ProviderNomad)
		c.note(g, fmt.Sprintf("The Nomad health checks of group %q are not counted in the availability budget: it has %d checked allocations outside the batch, more than the %d read before each batch; its allocations count by their task states",
			g, nomadPer[g], budgetChecksMaxAllocs))
	}
	nomadSnaps := c.readNomad(ctx, src.Nomad, items)
	consulSnaps := c.readConsul(ctx, items)
	now := c.d.e.nomadNow()()
	for _, it := range items {
		if len(it.specs) == 0 {
			results[it.a.ID] = ""
			continue
		}
		results[it.a.ID] = judge(it, now, c.d.provenAt(it.a.ID), nomadSnaps[it.a.ID], consulSnaps[it.a.ID])
	}
}

// allTooBig reports whether every group of the batch counts more than
// budgetChecksMaxAllocs allocations: then no check of theirs is read, and the restart says so
// once per group.
func (c *budgetChecks) allTooBig(job *restart.Job) bool {
	for g := range c.groups {
		grp, ok := job.Group(g)
		if !ok || grp.Count <= budgetChecksMaxAllocs {
			return false
		}
	}
	c.off = true
	for g := range c.groups {
		c.note(g, fmt.Sprintf("group %q has more than %d allocations: the checks of its allocations outside the batch are not read for the availability budget, which counts them by their task states", g, budgetChecksMaxAllocs))
	}
	return true
}

func (c *budgetChecks) note(group, text string) {
	if !c.noted[group] {
		c.noted[group] = true
		c.notes = append(c.notes, text)
	}
}

// judge is the gate's verdict on one allocation at now, given its snapshots: "" when its
// checks let it serve, else what holds it back. provenAt is when this driver's gate judged
// it healthy (zero: never): one snapshot cannot show a Consul status change, the gate saw it.
func judge(it budgetItem, now, provenAt time.Time, snaps ...*health.Snapshot) string {
	g := health.NewReadiness(health.Config{Mode: restart.HealthChecks, Tasks: runningTasks(it.a), Checks: it.specs, ProvenAt: provenAt})
	g.ObserveAlloc(it.a)
	for _, s := range snaps {
		if s != nil {
			g.ObserveChecks(*s)
		}
	}
	if v := g.Evaluate(now); v.State != health.Healthy {
		return v.Reason
	}
	return ""
}

func withoutProvider(specs []health.CheckSpec, p health.Provider) []health.CheckSpec {
	out := specs[:0:0]
	for _, s := range specs {
		if s.Provider != p {
			out = append(out, s)
		}
	}
	return out
}

// readNomad reads the Nomad-native checks of the items that have some, at most
// budgetChecksParallel at once. A missing source gives snapshots with an error.
func (c *budgetChecks) readNomad(ctx context.Context, src *health.NomadChecks, items []budgetItem) map[string]*health.Snapshot {
	out := map[string]*health.Snapshot{}
	var todo []string
	for _, it := range items {
		if n, _ := health.Providers(it.specs); n {
			todo = append(todo, it.a.ID)
		}
	}
	if len(todo) == 0 {
		return out
	}
	if src == nil {
		err := errors.New("no Nomad check source is set")
		for _, id := range todo {
			out[id] = &health.Snapshot{Provider: health.ProviderNomad, AllocID: id, At: c.d.e.nomadNow()(), Err: err}
		}
		return out
	}
	snaps := make([]health.Snapshot, len(todo))
	sem := make(chan struct{}, budgetChecksParallel)
	var wg sync.WaitGroup
	for i, id := range todo {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			snaps[i] = src.Read(ctx, id)
		}()
	}
	wg.Wait()
	for i, id := range todo {
		out[id] = &snaps[i]
	}
	return out
}

// readConsul reads each Consul service of the items once (every instance in one answer)
// and hands each allocation a snapshot of its instances' checks, found by the prefix of
// the service IDs Nomad registers them under.
func (c *budgetChecks) readConsul(ctx context.Context, items []budgetItem) map[string]*health.Snapshot {
	out := map[string]*health.Snapshot{}
	services := map[string]bool{}
	for _, it := range items {
		for _, s := range health.ConsulServices(it.specs) {
			if !health.Unresolved(s) {
				services[s] = true
			}
		}
	}
	var names []string
	for s := range services {
		names = append(names, s)
	}
	sort.Strings(names)
	var byService map[string]map[string][]health.Check
	var errs map[string]error
	if len(names) > 0 {
		byService, errs = c.readConsulServices(ctx, names, items)
	}
	at := c.d.e.nomadNow()()
	for _, it := range items {
		svcs := health.ConsulServices(it.specs)
		if len(svcs) == 0 {
			continue
		}
		s := &health.Snapshot{Provider: health.ProviderConsul, AllocID: it.a.ID, At: at}
		for _, svc := range svcs {
			switch {
			case health.Unresolved(svc):
				s.Err = fmt.Errorf("the Consul service name %q holds a variable nomad-restart cannot resolve", svc)
			case errs[svc] != nil:
				s.Err = errs[svc]
			default:
				s.Checks = append(s.Checks, byService[svc][it.a.ID]...)
			}
			if s.Err != nil {
				s.Checks = nil
				break
			}
		}
		out[it.a.ID] = s
	}
	return out
}

// readConsulServices queries Consul's health API once per service (no blocking query: the
// answer is wanted now) and sorts the checks by allocation.
func (c *budgetChecks) readConsulServices(ctx context.Context, names []string, items []budgetItem) (map[string]map[string][]health.Check, map[string]error) {
	byService := map[string]map[string][]health.Check{}
	errs := map[string]error{}
	if c.consul == nil {
		consul, err := c.d.e.consul(c.d.spec.ConsulAddress, c.d.log, false) // dropped with the batch
		if err != nil {
			for _, n := range names {
				errs[n] = err
			}
			return byService, errs
		}
		c.consul = consul
	}
	// Service IDs start with the allocation's ServicePrefix; the prefixes' lengths (one,
	// for UUIDs) say where to look for one.
	byPrefix := map[string]string{}
	lengths := map[int]bool{}
	for _, it := range items {
		p := health.ServicePrefix(it.a.ID)
		byPrefix[p] = it.a.ID
		lengths[len(p)] = true
	}
	for _, svc := range names {
		checks, err := c.consul.ServiceChecks(ctx, svc)
		if err != nil {
			errs[svc] = err
			continue
		}
		per := map[string][]health.Check{}
		for _, sc := range checks {
			for n := range lengths {
				if id, ok := byPrefix[sc.ServiceID[:min(n, len(sc.ServiceID))]]; ok {
					per[id] = append(per[id], sc.Check)
					break
				}
			}
		}
		byService[svc] = per
	}
	return byService, errs
}

// noteBudgetChecks says, once per restart, what the budget of batch b does not count (a
// group too large for its Nomad checks to be read before each batch).
func (d *driver) noteBudgetChecks(b int, c *budgetChecks) {
	for _, text := range c.takeNotes() {
		d.mu.Lock()
		said := false
		for _, e := range d.rec.Events {
			said = said || (e.Type == restart.EventWarning && e.Message == text)
		}
		d.mu.Unlock()
		if said {
			continue
		}
		d.stepLazy(func(r *restart.Record) {
			d.eventLocked(restart.Event{Type: restart.EventWarning, Batch: b, Message: text})
		})
	}
}
