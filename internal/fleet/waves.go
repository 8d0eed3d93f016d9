package fleet

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Waves: a fleet's jobs may be ordered by what they depend on. A job names its upstreams
// (its meta nomad-restart.after, or the fleet's -after); the selection is sorted into
// waves, a topological order, and a job starts only once every upstream gave its evidence:
// an upstream in the fleet restarted successfully, then its allocations were healthy and
// its gates held for the fleet's WaveWait; an upstream outside the fleet is not restarted
// but must be healthy (unless AfterOutside is ignore). The driver measures the evidence
// and reports it (Observation.Evidence); the rules here decide what it allows.

// Ref names a job across namespaces.
type Ref struct {
	Namespace string
	JobID     string
}

// String is "namespace/job", the form -after and the meta key take.
func (r Ref) String() string { return r.Namespace + "/" + r.JobID }

// RefOf names job j.
func RefOf(j Job) Ref { return Ref{j.Namespace, j.JobID} }

// Dependency is one -after: the job named Job restarts after its Upstreams. Names are as
// typed: "job" or "namespace/job".
type Dependency struct {
	Job       string
	Upstreams []string
}

// String is the -after value that parses back to d.
func (d Dependency) String() string { return d.Job + ": " + strings.Join(d.Upstreams, ", ") }

// ParseAfter parses one -after value, "web: api, auth": the job before the colon restarts
// after each job of the list.
func ParseAfter(s string) (Dependency, error) {
	job, list, ok := strings.Cut(s, ":")
	if !ok {
		return Dependency{}, &restart.ValueError{Flag: "after", Value: s, Reason: `give "<job>: <upstream>[, <upstream>...]", like "web: api, auth"`}
	}
	job = strings.TrimSpace(job)
	if err := checkName(job); err != nil {
		return Dependency{}, &restart.ValueError{Flag: "after", Value: s, Reason: err.Error()}
	}
	ups, err := ParseUpstreams(list)
	if err != nil {
		return Dependency{}, &restart.ValueError{Flag: "after", Value: s, Reason: err.Error()}
	}
	return Dependency{Job: job, Upstreams: ups}, nil
}

// ParseUpstreams parses a list of upstreams, "api, auth" or "db/db-proxy": the value of a
// job's nomad-restart.after meta and the part of -after after the colon.
func ParseUpstreams(s string) ([]string, error) {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		name := strings.TrimSpace(part)
		if err := checkName(name); err != nil {
			return nil, err
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// checkName refuses what cannot name a job: Nomad's job IDs hold no space or NUL, and
// a namespace is letters, digits and hyphens.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("a job name is empty: name each job once, separated by commas")
	}
	if strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || r == 0 || r == ':' || r == ',' }) {
		// Said without -after's colon: the same words serve the job's meta.
		return fmt.Errorf("%q is not a job name: separate job names with commas (a name holds no space, colon or comma)", name)
	}
	if ns, job, ok := strings.Cut(name, "/"); ok {
		if ns == "" || job == "" || strings.ContainsFunc(ns, func(r rune) bool {
			return !(r == '-' || r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)))
		}) {
			return fmt.Errorf("%q is not a job name: give \"job\" or \"namespace/job\"", name)
		}
	}
	return nil
}

// refIn resolves a typed name in namespace ns (a name without one is in ns).
func refIn(name, ns string) Ref {
	if n, job, ok := strings.Cut(name, "/"); ok {
		return Ref{n, job}
	}
	return Ref{ns, name}
}

// AfterOutside is -after-outside: what an upstream outside the selection must show.
type AfterOutside string

const (
	AfterOutsideWait   AfterOutside = "wait"   // healthy before its downstream starts
	AfterOutsideIgnore AfterOutside = "ignore" // not looked at
)

// ParseAfterOutside parses -after-outside: "wait" or "ignore", exactly.
func ParseAfterOutside(s string) (AfterOutside, error) {
	switch AfterOutside(s) {
	case AfterOutsideWait, AfterOutsideIgnore:
		return AfterOutside(s), nil
	}
	return "", &restart.ValueError{Flag: "after-outside", Value: s, Reason: `valid options are "wait" and "ignore"`}
}

// Evidence is what the driver measured of an upstream: whether its downstream jobs may
// start (Ready), what they wait for meanwhile (Waits: "2 of 3 allocations healthy"), or why
// they never will (Unready). Released is an operator's answer yes after the upstream
// failed: its downstream jobs go on without its evidence.
type Evidence struct {
	Ready    bool   `json:",omitempty"`
	Waits    string `json:",omitempty"`
	Unready  string `json:",omitempty"`
	Released bool   `json:",omitempty"`
}

// verdict reports whether the evidence is settled: ready, unready, or released by an
// operator. Only progress (Waits) may change before.
func (e Evidence) verdict() bool { return e.Ready || e.Unready != "" || e.Released }

// Upstream is an upstream outside the selection: never restarted by the fleet, it must be
// healthy before its downstream jobs start (AfterOutside wait).
type Upstream struct {
	Namespace string
	JobID     string
	Evidence  Evidence `json:",omitzero"`
}

// CycleError refuses upstreams that depend on each other: no order can restart them.
type CycleError struct{ Path []string }

func (e *CycleError) Error() string {
	return fmt.Sprintf("the jobs' upstreams form a cycle, %s: no order restarts them; drop one of these from -after or from the job's meta nomad-restart.after", strings.Join(e.Path, " -> "))
}

// MissingUpstreamError refuses an upstream named but that Nomad does not know.
type MissingUpstreamError struct {
	Job, Upstream Ref
	Source        string // "-after" or "its meta nomad-restart.after"
}

func (e *MissingUpstreamError) Error() string {
	return fmt.Sprintf("job %q (namespace %q) restarts after %q (namespace %q), named by %s, but no such job exists; fix the name or drop it",
		e.Job.JobID, e.Job.Namespace, e.Upstream.JobID, e.Upstream.Namespace, e.Source)
}

// Named is a job's upstreams as its meta names them (JobUpstreams: the meta's value,
// parsed by the caller, which knows the key).
type Named struct {
	Job       Ref
	Upstreams []string
}

// PlanWaves sorts jobs (in the fleet's order) into waves: each job's upstreams are those
// its meta names (meta) and -after names (after); a job's wave is one more than its latest
// upstream's in the selection. It returns the jobs in wave order (the fleet's order within
// a wave) with Wave and After set, and the upstreams outside the selection (none under
// AfterOutside ignore; any other value, "" included, is wait, the default). exists says whether Nomad knows a job outside the selection. It
// refuses, naming them, a -after for a job not selected, an upstream that does not exist,
// and a cycle. Without any upstream, jobs come back as they are (no waves).
func PlanWaves(jobs []Job, meta []Named, after []Dependency, outside AfterOutside, exists func(Ref) bool) ([]Job, []Upstream, error) {
	index := map[Ref]int{}
	for i, j := range jobs {
		index[RefOf(j)] = i
	}
	ups := make([][]Ref, len(jobs))
	sources := make([][]string, len(jobs))
	add := func(i int, names []string, source string) {
		for _, n := range names {
			r := refIn(n, jobs[i].Namespace)
			if !slices.Contains(ups[i], r) {
				ups[i] = append(ups[i], r)
				sources[i] = append(sources[i], source)
			}
		}
	}
	for _, m := range meta {
		if i, ok := index[m.Job]; ok {
			add(i, m.Upstreams, "its meta nomad-restart.after")
		}
	}
	for _, d := range after {
		i, err := afterTarget(jobs, d.Job)
		if err != nil {
			return nil, nil, err
		}
		add(i, d.Upstreams, "-after")
	}
	var outsiders []Upstream
	ordered := false
	for i := range jobs {
		var kept []Ref
		for n, u := range ups[i] {
			if _, in := index[u]; in {
				kept = append(kept, u)
				continue
			}
			if !exists(u) {
				return nil, nil, &MissingUpstreamError{Job: RefOf(jobs[i]), Upstream: u, Source: sources[i][n]}
			}
			if outside == AfterOutsideIgnore {
				continue
			}
			kept = append(kept, u)
			if !slices.ContainsFunc(outsiders, func(o Upstream) bool { return o.Namespace == u.Namespace && o.JobID == u.JobID }) {
				outsiders = append(outsiders, Upstream{Namespace: u.Namespace, JobID: u.JobID})
			}
		}
		ups[i] = kept
		ordered = ordered || len(kept) > 0
	}
	out := slices.Clone(jobs)
	if !ordered {
		return out, nil, nil
	}
	waves, err := waveNumbers(jobs, ups, index)
	if err != nil {
		return nil, nil, err
	}
	for i := range out {
		out[i].Wave, out[i].After = waves[i], ups[i]
	}
	slices.SortStableFunc(out, func(a, b Job) int { return cmp.Compare(a.Wave, b.Wave) })
	slices.SortStableFunc(outsiders, func(a, b Upstream) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.JobID, b.JobID))
	})
	return out, outsiders, nil
}

// afterTarget finds the selected job a -after names: "namespace/job" exactly, or "job"
// when exactly one selected job has that ID.
func afterTarget(jobs []Job, name string) (int, error) {
	found := -1
	for i, j := range jobs {
		if ns, id, ok := strings.Cut(name, "/"); ok {
			if j.Namespace == ns && j.JobID == id {
				return i, nil
			}
			continue
		}
		if j.JobID == name {
			if found >= 0 {
				return -1, fmt.Errorf("-after names job %q, selected in namespaces %q and %q: name it \"namespace/%s\"", name, jobs[found].Namespace, j.Namespace, name)
			}
			found = i
		}
	}
	if found < 0 {
		return -1, fmt.Errorf("-after names job %q, which -jobs did not select: -after orders the jobs of the fleet; widen -jobs or fix the name", name)
	}
	return found, nil
}

// waveNumbers gives each job its wave (1 for a job with no upstream in the selection), or
// the first cycle found, in the fleet's order, as a path of job names.
func waveNumbers(jobs []Job, ups [][]Ref, index map[Ref]int) ([]int, error) {
	const (
		unseen = iota
		visiting
		done
	)
	state := make([]int, len(jobs))
	wave := make([]int, len(jobs))
	var stack []int
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case done:
			return nil
		case visiting:
			return &CycleError{Path: cyclePath(jobs, stack, i)}
		}
		state[i] = visiting
		stack = append(stack, i)
		wave[i] = 1
		for _, u := range ups[i] {
			k, in := index[u]
			if !in {
				continue
			}
			if err := visit(k); err != nil {
				return err
			}
			wave[i] = max(wave[i], wave[k]+1)
		}
		stack = stack[:len(stack)-1]
		state[i] = done
		return nil
	}
	for i := range jobs {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return wave, nil
}

// cyclePath names the cycle that closes at job i, from i back to i: "web -> api -> web".
// Jobs are named by ID when the cycle stays in one namespace.
func cyclePath(jobs []Job, stack []int, i int) []string {
	from := slices.Index(stack, i)
	cycle := append(slices.Clone(stack[from:]), i)
	oneNS := true
	for _, k := range cycle {
		oneNS = oneNS && jobs[k].Namespace == jobs[i].Namespace
	}
	// The walk goes from a job to its upstreams; the path reads in restart order's
	// reverse, as the order is declared: web -> api says web restarts after api.
	out := make([]string, len(cycle))
	for n, k := range cycle {
		out[n] = jobs[k].JobID
		if !oneNS {
			out[n] = RefOf(jobs[k]).String()
		}
	}
	return out
}

// HasWaves reports whether the fleet orders its jobs by their upstreams.
func (f Fleet) HasWaves() bool {
	for _, j := range f.Jobs {
		if j.Wave > 0 {
			return true
		}
	}
	return false
}

// Gate is where a pending job stands with respect to its upstreams: free to start, waiting
// (Waits, "waits for db-proxy: 2 of 3 allocations healthy"), or held for good by an
// upstream that failed (Failed, the reason to record).
type Gate struct {
	Waits  string
	Failed string
}

// Free reports whether the job may start as far as its upstreams go.
func (g Gate) Free() bool { return g.Waits == "" && g.Failed == "" }

// GateOf judges job i's upstreams: the first that failed, else the first that has not
// given its evidence yet. An upstream outside the fleet is judged only once every
// upstream in the fleet gave its evidence, so that its health is measured when the job's
// turn is near, not long before.
func (f Fleet) GateOf(i int) Gate {
	if g := f.insideGate(i); !g.Free() {
		return g
	}
	for _, u := range f.Jobs[i].After {
		o := f.outsideIndex(u)
		if o < 0 {
			continue
		}
		ev := f.Outside[o].Evidence
		switch {
		case ev.Unready != "" && !ev.Released:
			return Gate{Failed: fmt.Sprintf("its upstream %s, outside the fleet, %s", f.nameOf(u), ev.Unready)}
		case !ev.Ready && !ev.Released:
			return Gate{Waits: fmt.Sprintf("waits for %s (outside the fleet): %s", f.nameOf(u), cmp.Or(ev.Waits, "its health, not measured yet"))}
		}
	}
	return Gate{}
}

// insideGate judges job i's upstreams in the fleet: the first that failed, else the first
// that has not given its evidence yet.
func (f Fleet) insideGate(i int) Gate {
	var waits string
	for _, u := range f.Jobs[i].After {
		k := indexOf(f.Jobs, u.Namespace, u.JobID)
		if k < 0 {
			continue
		}
		w, failed := upstreamGate(f.Jobs[k])
		if failed != "" {
			return Gate{Failed: fmt.Sprintf("its upstream %s %s", f.nameOf(u), failed)}
		}
		if w != "" && waits == "" {
			waits = fmt.Sprintf("waits for %s: %s", f.nameOf(u), w)
		}
	}
	return Gate{Waits: waits}
}

// upstreamGate is what an upstream in the fleet holds its downstream jobs for: waits
// (its turn, its restart, its evidence) or failed (why they will not start).
func upstreamGate(u Job) (waits, failed string) {
	ev := u.Evidence
	if ev.Released {
		return "", ""
	}
	switch {
	case ev.Unready != "":
		return "", ev.Unready
	case u.Status == JobFailed:
		return "", "failed: " + cmp.Or(u.Reason, "its restart failed")
	case u.Status == JobCanceled:
		return "", "was canceled: " + cmp.Or(u.Reason, "its restart was canceled")
	case u.Status == JobPending:
		return "its turn (wave " + fmt.Sprint(u.Wave) + ")", ""
	case u.Status == JobRunning:
		return "its restart, in progress", ""
	case !ev.Ready:
		return cmp.Or(ev.Waits, "its evidence, not measured yet"), ""
	}
	return "", ""
}

// nameOf names an upstream as status shows it: its ID when it is in the namespace of the
// fleet's first job, else namespace/job.
func (f Fleet) nameOf(r Ref) string {
	if len(f.Jobs) > 0 && f.Jobs[0].Namespace == r.Namespace {
		return r.JobID
	}
	return r.String()
}

func (f Fleet) outsideIndex(r Ref) int {
	return slices.IndexFunc(f.Outside, func(o Upstream) bool { return o.Namespace == r.Namespace && o.JobID == r.JobID })
}

// Unproven lists the upstreams whose evidence the driver measures now: those a pending job
// waits on whose restart ended (succeeded, or skipped: a job not restarted must still be
// healthy) without a verdict, and the upstreams outside the fleet of a pending job whose
// upstreams in the fleet all gave theirs (GateOf). Nothing is measured for a fleet that
// starts nothing (ended, paused, canceled, its failure budget spent).
func Unproven(f Fleet) []Ref {
	if startsNothing(f) {
		return nil
	}
	var out []Ref
	addOnce := func(r Ref) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	for i, j := range f.Jobs {
		if j.Status != JobPending {
			continue
		}
		for _, u := range j.After {
			if k := indexOf(f.Jobs, u.Namespace, u.JobID); k >= 0 && (f.Jobs[k].Status == JobSucceeded || f.Jobs[k].Status == JobSkipped) && !f.Jobs[k].Evidence.verdict() {
				addOnce(u)
			}
		}
		// Its upstreams outside the fleet once those in it gave theirs (GateOf), unless one
		// of them failed already.
		if !f.insideGate(i).Free() || f.GateOf(i).Failed != "" {
			continue
		}
		for _, u := range j.After {
			if o := f.outsideIndex(u); o >= 0 && !f.Outside[o].Evidence.verdict() {
				addOnce(u)
			}
		}
	}
	return out
}

// Measuring says, for Evidence.Waits, what a job's evidence waits for.
type Measuring struct {
	Healthy, Total int
	// Why is the first allocation's reason for not being healthy, "" when all are.
	Why string
	// GatesHeld and WaveWait say how long the gates held so far of how long they must.
	GatesHeld, WaveWait string
}

// Text is the evidence's progress as status shows it: "2 of 3 allocations healthy (...)",
// "gates held 4s of 10s".
func (m Measuring) Text() string {
	if m.Total == 0 && m.Why != "" {
		return m.Why // nothing counted yet: why (a deployment in progress)
	}
	if m.Healthy < m.Total || m.Total == 0 {
		s := fmt.Sprintf("%d of %d allocations healthy", m.Healthy, m.Total)
		if m.Why != "" {
			s += " (" + m.Why + ")"
		}
		return s
	}
	return fmt.Sprintf("allocations healthy, gates held %s of -wave-wait %s", m.GatesHeld, m.WaveWait)
}

// WaveOf lists the jobs of wave w (indexes into Jobs).
func (f Fleet) WaveOf(w int) []int {
	var out []int
	for i, j := range f.Jobs {
		if j.Wave == w {
			out = append(out, i)
		}
	}
	return out
}

// Waves is the number of waves (0 for a fleet without upstreams).
func (f Fleet) Waves() int {
	n := 0
	for _, j := range f.Jobs {
		n = max(n, j.Wave)
	}
	return n
}

// WaveReached is the latest wave a job of which started its restart (0: none yet). A job
// skipped before its turn (held by a failed upstream) did not start its wave.
func (f Fleet) WaveReached() int {
	n := 0
	for _, j := range f.Jobs {
		if j.RestartID != "" {
			n = max(n, j.Wave)
		}
	}
	return n
}

// ParseWaveWait parses -wave-wait: a duration with a unit, 0 or more ("0" alone is 0).
func ParseWaveWait(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, &restart.ValueError{Flag: "wave-wait", Value: s, Reason: "give a duration with a unit, 0 or more, like 30s"}
	}
	return d, nil
}

// WaveSummary is one wave as status, -json and the page show it.
type WaveSummary struct {
	Wave int
	// Jobs are the wave's jobs by ID, in the fleet's order.
	Jobs []string
	// State is "done" once every job of it ended, "running" once one started, else
	// "waiting".
	State string
	// Waits says, for each of its pending jobs held by an upstream, what it waits for:
	// "api: waits for db-proxy: 2 of 3 allocations healthy", or "api: held: its upstream
	// db-proxy failed: ..." while an operator's answer decides.
	Waits []string `json:",omitempty"`
}

// WaveSummaries lists the fleet's waves in order (none for a fleet without waves).
func (f Fleet) WaveSummaries() []WaveSummary {
	out := make([]WaveSummary, f.Waves())
	for w := range out {
		s := WaveSummary{Wave: w + 1, State: "done"}
		started := false
		for _, i := range f.WaveOf(w + 1) {
			j := f.Jobs[i]
			s.Jobs = append(s.Jobs, j.JobID)
			if !j.Status.Terminal() {
				s.State = "waiting"
			}
			started = started || j.Status != JobPending
			if j.Status != JobPending {
				continue
			}
			switch g := f.GateOf(i); {
			case g.Waits != "":
				s.Waits = append(s.Waits, j.JobID+": "+g.Waits)
			case g.Failed != "":
				// Held, not settled yet: the budget is spent (an operator's answer decides)
				// or the fleet is paused.
				s.Waits = append(s.Waits, j.JobID+": held: "+g.Failed)
			}
		}
		if s.State == "waiting" && started {
			s.State = "running"
		}
		out[w] = s
	}
	return out
}
