package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/fleetrun"
	"github.com/nomad-restart/nomad-restart/internal/onchange"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// timestampPrefixLen is the width of "==> <RFC3339>: ", which continuation lines of a
// header are indented by, as in Nomad's command (jobRestartTimestampPrefixLength).
const timestampPrefixLen = 31

// uuidRe finds full IDs (allocations, evaluations, restarts) inside event messages, which
// the engine writes with full IDs so that the CLI can shorten them unless -verbose.
var uuidRe = regexp.MustCompile(`\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b`)

// formatTime is Nomad's CLI timestamp (command/helpers.go formatTime).
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

// shortID is an ID as Nomad prints it: 8 characters unless verbose.
func shortID(id string, verbose bool) string {
	if verbose || len(id) <= 8 {
		return id
	}
	return id[:8]
}

// printer writes Nomad-style lines, and on a terminal keeps a progress line redrawn in place
// below them. It is safe for concurrent use.
type printer struct {
	mu      sync.Mutex
	out     io.Writer
	tty     bool // redraw a progress line in place
	width   int  // terminal width; 0 if unknown
	verbose bool
	json    bool
	now     func() time.Time

	progress string // the progress line currently drawn, "" when none
}

// ids shortens the full IDs found in s unless verbose.
func (p *printer) ids(s string) string {
	if p.verbose {
		return s
	}
	return uuidRe.ReplaceAllStringFunc(s, func(id string) string { return id[:8] })
}

// header prints "==> <ts>: msg", continuation lines indented under the message.
func (p *printer) header(t time.Time, msg string) {
	p.line(fmt.Sprintf("==> %s: %s", formatTime(t), indent(p.ids(msg), timestampPrefixLen)))
}

// detail prints "    <ts>: msg", the per-allocation lines.
func (p *printer) detail(t time.Time, msg string) {
	p.line(fmt.Sprintf("    %s: %s", formatTime(t), indent(p.ids(msg), timestampPrefixLen)))
}

// plain prints text as is.
func (p *printer) plain(text string) { p.line(text) }

// line writes one line (or several), keeping the progress line below the text.
func (p *printer) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.progress != "" {
		fmt.Fprint(p.out, "\r\x1b[2K")
	}
	fmt.Fprintln(p.out, s)
	if p.tty && p.progress != "" {
		fmt.Fprint(p.out, p.progress)
	}
}

// jsonFormatVersion is the version of the format of the -json outputs (docs/json.md),
// which every JSON object nomad-restart prints carries as its first field, FormatVersion.
// It changes only when a field is removed or renamed, or changes type or meaning; fields
// are added without a change, so readers ignore the fields they do not know.
const jsonFormatVersion = 1

// marshalJSON encodes v as JSON with the format's version as the first field of the
// object it encodes to, or of each object of the array it encodes to, so that every -json
// output carries it without a change to the types printed. Every JSON the commands print
// goes through it.
func marshalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil || len(b) == 0 {
		return b, err
	}
	switch b[0] {
	case '{':
		return withFormatVersion(b), nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(b, &items); err != nil {
			return nil, fmt.Errorf("adding the format version to a JSON array: %w", err)
		}
		for i, item := range items {
			if len(item) > 0 && item[0] == '{' {
				items[i] = withFormatVersion(item)
			}
		}
		return json.Marshal(items)
	}
	return b, nil
}

// withFormatVersion puts "FormatVersion" first in obj, a compact JSON object.
func withFormatVersion(obj []byte) []byte {
	field := fmt.Sprintf(`{"FormatVersion":%d`, jsonFormatVersion)
	rest := obj[1:]
	if len(rest) > 0 && rest[0] != '}' {
		field += ","
	}
	return append([]byte(field), rest...)
}

// jsonLine writes v as one line of JSON.
func (p *printer) jsonLine(v any) {
	b, err := marshalJSON(v)
	if err != nil {
		// Records and events are plain data; a failure here is a bug worth seeing.
		b = []byte(fmt.Sprintf(`{"Error":%q}`, err.Error()))
	}
	p.line(string(b))
}

// setProgress redraws the progress line (terminals only).
func (p *printer) setProgress(s string) {
	if !p.showsProgress() {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.width > 4 && len(s) >= p.width {
		s = s[:p.width-1]
	}
	fmt.Fprint(p.out, "\r\x1b[2K"+s)
	p.progress = s
}

// showsProgress reports whether the live progress line is shown (on a terminal, without
// -json): callers skip rendering it otherwise.
func (p *printer) showsProgress() bool { return p.tty && !p.json }

// clearProgress removes the progress line, before a prompt or at the end.
func (p *printer) clearProgress() {
	if !p.tty {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.progress != "" {
		fmt.Fprint(p.out, "\r\x1b[2K")
		p.progress = ""
	}
}

// event prints one event of a restart: JSON, a header (restart-wide) or a detail line
// (about one allocation).
func (p *printer) event(ev restart.Event) {
	if p.json {
		p.jsonLine(ev)
		return
	}
	if ev.AllocID != "" {
		p.detail(ev.Time, ev.Message)
		return
	}
	p.header(ev.Time, ev.Message)
}

// indent indents every line of s but the first by n spaces.
func indent(s string, n int) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	pad := strings.Repeat(" ", n)
	return strings.ReplaceAll(s, "\n", "\n"+pad)
}

// tracker follows a restart's progress from its record and events, for the progress line.
type tracker struct {
	total, batches, batch int
	states                map[string]restart.AllocState
	done, failed, skipped int // allocations in each ended state (setState)
	start                 time.Time
	batchStart            time.Time
	finished              []time.Duration // durations of finished batches
	// waiting is what each allocation in flight waits for, from its latest health event.
	waiting map[string]string
}

func newTracker(rec *restart.Record) *tracker {
	t := &tracker{states: map[string]restart.AllocState{}, waiting: map[string]string{}}
	if rec == nil {
		return t
	}
	t.total = len(rec.Allocs)
	t.batches = rec.Batches
	t.batch = rec.CurrentBatch
	t.start = rec.StartTime
	for _, a := range rec.Allocs {
		t.setState(a.ID, a.State)
		if !a.State.Terminal() && a.Waiting != "" && a.State != restart.AllocPending {
			t.waiting[a.ID] = a.Waiting
		}
	}
	return t
}

// apply updates the tracker with one event.
func (t *tracker) apply(ev restart.Event) {
	switch ev.Type {
	case restart.EventStarted:
		if t.start.IsZero() {
			t.start = ev.Time
		}
	case restart.EventBatchStarted:
		if ev.Batch > 0 {
			t.batch = ev.Batch
		}
		t.batchStart = ev.Time
		if t.start.IsZero() {
			t.start = ev.Time
		}
	case restart.EventBatchFinished:
		if !t.batchStart.IsZero() {
			t.finished = append(t.finished, ev.Time.Sub(t.batchStart))
			t.batchStart = time.Time{}
		}
	case restart.EventAllocHealth:
		if _, what, ok := strings.Cut(ev.Message, "waits for: "); ok {
			t.waiting[ev.AllocID] = what
		}
	case restart.EventAllocDone:
		t.setState(ev.AllocID, restart.AllocDone)
	case restart.EventAllocFailed:
		t.setState(ev.AllocID, restart.AllocFailed)
	case restart.EventAllocSkipped:
		t.setState(ev.AllocID, restart.AllocSkipped)
	}
	switch ev.Type {
	case restart.EventAllocDone, restart.EventAllocFailed, restart.EventAllocSkipped, restart.EventAllocRestart:
		delete(t.waiting, ev.AllocID)
	}
}

// setState records an allocation's state and keeps the counts of ended ones, so that the
// progress line costs the same whatever the job's size.
func (t *tracker) setState(id string, s restart.AllocState) {
	t.count(t.states[id], -1)
	t.states[id] = s
	t.count(s, 1)
}

func (t *tracker) count(s restart.AllocState, delta int) {
	switch s {
	case restart.AllocDone:
		t.done += delta
	case restart.AllocFailed:
		t.failed += delta
	case restart.AllocSkipped:
		t.skipped += delta
	}
}

// counts returns the allocations done (restarted), failed and skipped.
func (t *tracker) counts() (done, failed, skipped int) {
	return t.done, t.failed, t.skipped
}

// line renders the progress line: batches, allocations, failures, elapsed and an estimate
// from the mean duration of the finished batches.
func (t *tracker) line(now time.Time) string {
	done, failed, skipped := t.counts()
	var b strings.Builder
	fmt.Fprintf(&b, "batch %d/%d  allocations %d/%d done", t.batch, t.batches, done, t.total)
	if failed > 0 {
		fmt.Fprintf(&b, ", %d failed", failed)
	}
	if skipped > 0 {
		fmt.Fprintf(&b, ", %d skipped", skipped)
	}
	if !t.start.IsZero() {
		fmt.Fprintf(&b, "  elapsed %s", roundDuration(now.Sub(t.start)))
	}
	if est, ok := t.estimate(now); ok && est > 0 {
		fmt.Fprintf(&b, "  ~%s left", roundDuration(est))
	}
	// What the restart waits for: the first thing an operator asks when it stalls.
	if len(t.waiting) > 0 {
		ids := make([]string, 0, len(t.waiting))
		for id := range t.waiting {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		fmt.Fprintf(&b, "  waiting: %s %s", shortID(ids[0], false), t.waiting[ids[0]])
		if len(ids) > 1 {
			fmt.Fprintf(&b, " (+%d more)", len(ids)-1)
		}
	}
	return b.String()
}

// estimate guesses the time left from the mean batch duration.
func (t *tracker) estimate(now time.Time) (time.Duration, bool) {
	if len(t.finished) == 0 || t.batches == 0 {
		return 0, false
	}
	var sum time.Duration
	for _, d := range t.finished {
		sum += d
	}
	mean := sum / time.Duration(len(t.finished))
	remaining := t.batches - len(t.finished)
	if remaining <= 0 {
		return 0, false
	}
	left := mean * time.Duration(remaining)
	if !t.batchStart.IsZero() {
		left -= now.Sub(t.batchStart)
	}
	if left < 0 {
		left = 0
	}
	return left, true
}

func roundDuration(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
}

// The kinds of record `status -json` lists.
const (
	kindRestart = "restart"
	kindFleet   = "fleet"
)

// fleetEntry is a fleet as `status -json` and the fleet commands' -json print it: the
// record with its Kind, so that scripts tell it from a restart in one list.
type fleetEntry struct {
	Kind string
	*fleet.Record
}

func newFleetEntry(rec *fleet.Record) fleetEntry { return fleetEntry{Kind: kindFleet, Record: rec} }

// restartEntry is a restart as `status -json` prints it: the record with its Kind.
type restartEntry struct {
	Kind string
	*restart.Record
}

func newRestartEntry(rec *restart.Record) restartEntry {
	return restartEntry{Kind: kindRestart, Record: rec}
}

// fleetSink prints the events of a fleet and of its children as they come: the fleet's
// own as headers, a child's prefixed with its job. prompting says that this terminal asks
// the questions (fleet_prompt.go): no need to say how to answer them elsewhere.
func (a *app) fleetSink(p *printer, rec *fleet.Record, prompting bool) func(fleetrun.Event) {
	across := rec.Selection.Namespace == "*"
	return func(e fleetrun.Event) { a.printFleetEvent(p, e, across, !prompting) }
}

// printFleetEvent prints one event of a fleet (JobID empty) or of one of its children.
// across names each job with its namespace (a selection across namespaces); hint says how
// to answer a question.
func (a *app) printFleetEvent(p *printer, e fleetrun.Event, across, hint bool) {
	if p.json {
		p.jsonLine(e)
		return
	}
	fid := shortID(e.Fleet, p.verbose)
	if !hint && e.Type == restart.EventQuestion {
		return // this terminal asks it (fleet_prompt.go), and its answer's event repeats it
	}
	if e.JobID == "" {
		p.header(e.Time, e.Message)
		if hint && e.Type == restart.EventQuestion {
			p.detail(a.now(), fmt.Sprintf("Answer with `nomad-restart answer %s yes|no`", fid))
		}
		return
	}
	label := e.JobID
	if across {
		label = e.Namespace + "/" + e.JobID
	}
	msg := fmt.Sprintf("[%s] %s", label, e.Message)
	if e.AllocID != "" {
		p.detail(e.Time, msg)
	} else {
		p.header(e.Time, msg)
	}
	if hint && e.Type == restart.EventQuestion {
		p.detail(a.now(), fmt.Sprintf("[%s] Answer with `nomad-restart answer %s yes|no|<duration>` (every waiting job of the fleet), or `nomad-restart answer %s ...` (this job alone)",
			label, fid, shortID(e.RestartID, p.verbose)))
	}
}

// fleetPlanOutput is a fleet's dry run as -json prints it.
type fleetPlanOutput struct {
	DryRun    bool
	Selection fleet.Selection
	// Namespace is where the fleet would be recorded.
	Namespace string
	Options   fleet.Options
	Spec      restart.Spec
	Jobs      []fleetPlanJob
	LeftOut   []string `json:",omitempty"`
}

// fleetPlanJob is one job's part of a fleet's dry run.
type fleetPlanJob struct {
	Namespace, JobID, Type string
	Priority               int
	Meta                   map[string]string `json:",omitempty"`
	// Spec is the options the job's restart would take: the fleet's, with its meta's.
	Spec            restart.Spec
	Allocs, Batches int
	Problem         string `json:",omitempty"`
}

// printFleetPlan prints what a fleet would do (-dry-run): the jobs in order with their
// type, allocations, batches, the options their meta overrides, and their problems; and
// the fleet's limits. Nothing is recorded or restarted.
func (a *app) printFleetPlan(p *printer, rec *fleet.Record, plans []fleetrun.JobPlan, leftOut []string) {
	if p.json {
		out := fleetPlanOutput{DryRun: true, Selection: rec.Selection, Namespace: rec.Namespace, Options: rec.Options, Spec: rec.Spec, LeftOut: leftOut}
		for _, jp := range plans {
			out.Jobs = append(out.Jobs, fleetPlanJob{Namespace: jp.Job.Namespace, JobID: jp.Job.JobID, Type: jp.Job.Type, Priority: jp.Job.Priority,
				Meta: jp.Job.Meta, Spec: jp.Spec, Allocs: jp.Allocs, Batches: jp.Batches, Problem: jp.Problem})
		}
		p.jsonLine(out)
		return
	}
	allocs, problems := 0, 0
	for _, jp := range plans {
		allocs += jp.Allocs
		if jp.Problem != "" {
			problems++
		}
	}
	p.header(a.now(), fmt.Sprintf("Dry run: a fleet of %s selected by %s would restart %s; nothing is changed",
		plural(len(plans), "job", "jobs"), describeSelection(rec.Selection), plural(allocs, "allocation", "allocations")))
	pad := strings.Repeat(" ", timestampPrefixLen)
	p.plain(pad + "Options: " + describeSpec(rec.Spec))
	p.plain(pad + "Limits: " + describeFleetOptions(rec.Options))
	p.plain(pad + fmt.Sprintf("Would be recorded in: Nomad Variables of namespace %q", rec.Namespace))
	if problems > 0 {
		p.plain(pad + fmt.Sprintf("%s would not restart now (see Problem)", plural(problems, "job", "jobs")))
	}
	if len(leftOut) > 0 {
		p.plain(pad + "Left out (periodic or parameterized, their launches are jobs of their own): " + joinFew(leftOut, 5))
	}
	p.plain("\n" + fleetPlanTable(plans))
}

// fleetPlanTable is the dry run's table of jobs, in the fleet's order.
func fleetPlanTable(plans []fleetrun.JobPlan) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Order\tJob\tNamespace\tType\tPriority\tAllocations\tBatches\tOptions From Meta\tProblem")
	for i, jp := range plans {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", i+1, jp.Job.JobID, jp.Job.Namespace, jp.Job.Type, jp.Job.Priority,
			jp.Allocs, jp.Batches, orDash(metaOptions(jp.Job.Meta)), orDash(jp.Problem))
	}
	_ = tw.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// metaOptions shows a job's nomad-restart.* meta as the options they set: "batch-size=2".
func metaOptions(meta map[string]string) string {
	var parts []string
	for _, k := range sortedKeys(meta) {
		parts = append(parts, strings.TrimPrefix(k, onchange.MetaPrefix)+"="+meta[k])
	}
	return strings.Join(parts, " ")
}
