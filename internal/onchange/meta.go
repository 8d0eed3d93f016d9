package onchange

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// MetaPrefix starts every meta key nomad-restart reads. HCL refuses dotted keys in the
// block form of meta; they are written in the attribute form, meta = { "a.b" = "x" }.
const MetaPrefix = "nomad-restart."

// The meta keys: consent, the debounce, and the options of `run` under the flag's name.
const (
	KeyOnChange        = MetaPrefix + "on-change"
	KeyDebounce        = MetaPrefix + "debounce"
	KeyBatchSize       = MetaPrefix + "batch-size"
	KeyBatchWait       = MetaPrefix + "batch-wait"
	KeyHealth          = MetaPrefix + "health"
	KeyHealthyDeadline = MetaPrefix + "healthy-deadline"
	KeyMinHealthyTime  = MetaPrefix + "min-healthy-time"
	KeyMaxUnavailable  = MetaPrefix + "max-unavailable"
	KeyOnError         = MetaPrefix + "on-error"
	KeySurge           = MetaPrefix + "surge"
	KeyDrain           = MetaPrefix + "drain"
	// KeyDrainUntil lists the drain's evidence, one -drain-until a line; KeyBalancerRefresh
	// the balancers' refreshes, one -balancer-refresh a line.
	KeyDrainUntil      = MetaPrefix + "drain-until"
	KeyBalancerRefresh = MetaPrefix + "balancer-refresh"
	// KeyRenderInterval is how often the agent reads the files of the templates it follows
	// by their renders (change_mode noop): the cost per allocation, against how soon a
	// re-render is noticed.
	KeyRenderInterval = MetaPrefix + "render-interval"
	// KeyAfter names the jobs a fleet restarts before this one, "api, db/db-proxy": its
	// upstreams (see docs: "Fleet restarts", waves). Only fleets read it.
	KeyAfter = MetaPrefix + "after"
	// KeyOnFailure is what a rollout whose batch fails does next: stop (the default) or
	// revert (put the kept previous value back and bring back the allocations that
	// restarted onto the new one).
	KeyOnFailure = MetaPrefix + "on-failure"
)

// knownKeys lists the keys in the order their problems are reported, so that a job with
// several mistakes always reads the same. The options follow run's order of checks.
func knownKeys() []string {
	return []string{
		KeyOnChange, KeyDebounce, KeyBatchSize, KeyBatchWait, KeyOnError,
		KeyHealth, KeyHealthyDeadline, KeyMinHealthyTime, KeyMaxUnavailable, KeyDrain, KeyDrainUntil,
		KeyBalancerRefresh, KeySurge, KeyRenderInterval, KeyAfter, KeyOnFailure,
	}
}

// DefaultDebounce is how long a rollout waits after a change (and after each further change
// of the burst) before it starts: bursts coalesce and every allocation re-renders first.
const DefaultDebounce = 10 * time.Second

// DefaultRenderInterval is how often the files of followed templates are read: one
// listing per allocation and template directory, so 100 allocations cost 100 requests
// every 30s, about 3 a second, where the secrets that re-render (Vault leases, rotated
// certificates) change in minutes or hours.
const DefaultRenderInterval = 30 * time.Second

// MinRenderInterval is the shortest render-interval a job may ask for.
const MinRenderInterval = 5 * time.Second

// Problem is one invalid value or unknown key of a group's meta. A group with a problem
// is never rolled: an option that cannot be read must not silently fall back to a default.
type Problem struct {
	Key   string
	Value string
	// Level is where the key was written: "job", "group", or `task "name"` (a task's meta
	// is not read, and saying so beats ignoring an option the job's author meant).
	Level  string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s meta %s = %q: %s", p.Level, printable(p.Key), p.Value, p.Reason)
}

// printable is s as written when it reads unambiguously on one line, else Go-quoted: a
// key with a newline or an invisible character must not break the line that names it.
func printable(s string) string {
	if utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) < 0 {
		return s
	}
	return strconv.Quote(s)
}

// metaValue is a key's effective value for a group and where it was written.
type metaValue struct {
	value, level string
}

// groupMeta merges the nomad-restart keys of the job's meta and the group's, the group's
// winning key by key.
func groupMeta(jobMeta, grpMeta map[string]string) map[string]metaValue {
	out := map[string]metaValue{}
	for k, v := range jobMeta {
		if strings.HasPrefix(k, MetaPrefix) {
			out[k] = metaValue{value: v, level: "job"}
		}
	}
	for k, v := range grpMeta {
		if strings.HasPrefix(k, MetaPrefix) {
			out[k] = metaValue{value: v, level: "group"}
		}
	}
	return out
}

// options are a group's roll options read from its meta.
type options struct {
	spec           restart.Spec
	debounce       time.Duration
	renderInterval time.Duration
	onFailure      OnFailure
	problems       []Problem
}

// readOptions validates every option with the parsers `run` uses for its flags, with the
// defaults of a rollout nobody watches at a terminal: on-error fail, and questions (batch
// wait ask, on-error ask) answered with `nomad-restart answer` as for a detached run.
func readOptions(group string, meta map[string]metaValue) options {
	o := options{debounce: DefaultDebounce, renderInterval: DefaultRenderInterval, onFailure: OnFailureStop}
	// A rollout is filed by the agent itself: run's defaults, with on-error fail.
	res, err := restart.Options{Groups: []string{group}}.Resolve(restart.Unattended)
	if err != nil {
		o.problems = append(o.problems, Problem{Key: KeyOnChange, Level: "group", Reason: err.Error()})
	}
	o.spec = res.Spec
	s := &o.spec
	for _, key := range knownKeys() {
		mv, ok := meta[key]
		if !ok || key == KeyOnChange {
			continue
		}
		// The keys that are the agent's alone; the others are run's options.
		var err error
		switch key {
		case KeyOnFailure:
			o.onFailure, err = ParseOnFailure(mv.value)
		case KeyRenderInterval:
			o.renderInterval, err = parseRenderInterval(mv.value)
		default:
			err = applyOption(s, &o.debounce, key, mv.value)
		}
		if err != nil {
			o.problems = append(o.problems, Problem{Key: key, Value: mv.value, Level: mv.level, Reason: reasonOf(err)})
		}
	}
	o.problems = append(o.problems, applyGates(s, meta)...)
	o.problems = append(o.problems, unknownKeys(meta)...)
	return o
}

// applyOption reads one option into s (or the debounce), checked by restart.Options, the
// one place where run's options are checked whatever files them. A job's meta may ask
// questions: they are answered with `nomad-restart answer`, as for a detached run.
func applyOption(s *restart.Spec, debounce *time.Duration, key, value string) error {
	if key == KeyDebounce {
		var err error
		*debounce, err = parseDebounce(value)
		return err
	}
	if key == KeyAfter {
		// Only fleets read it, with this very parser; a value none can read is the job's
		// meta problem like any other key's, heard before a fleet refuses it.
		_, err := fleet.ParseUpstreams(value)
		return err
	}
	var o restart.Options
	if lists, ok := map[string]*[]string{KeyDrainUntil: &o.DrainUntil, KeyBalancerRefresh: &o.BalancerRefresh}[key]; ok {
		*lists = restart.SplitOptionLines(value)
		if errs := o.Apply(s, restart.Detached); len(errs) > 0 {
			return errs[0]
		}
		return nil
	}
	// The healthy deadline is read before the min-healthy time (knownKeys' order), as run
	// checks it.
	field, ok := map[string]*restart.Value{
		KeyBatchSize: &o.BatchSize, KeyBatchWait: &o.BatchWait, KeyOnError: &o.OnError,
		KeyHealth: &o.Health, KeyHealthyDeadline: &o.HealthyDeadline, KeyMinHealthyTime: &o.MinHealthyTime,
		KeyMaxUnavailable: &o.MaxUnavailable, KeyDrain: &o.Drain, KeySurge: &o.Surge,
	}[key]
	if !ok {
		return nil
	}
	*field = restart.Given(value)
	if errs := o.Apply(s, restart.Detached); len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// parseDebounce reads nomad-restart.debounce: a positive duration, so that allocations
// re-render before the rollout reads what they run with.
func parseDebounce(value string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(value))
	if err != nil || d <= 0 {
		return 0, errors.New("give a positive duration with a unit like 10s or 1m")
	}
	return d, nil
}

// parseRenderInterval reads nomad-restart.render-interval: a duration of at least
// MinRenderInterval.
func parseRenderInterval(value string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(value))
	if err != nil || d < MinRenderInterval {
		return DefaultRenderInterval, fmt.Errorf("give a duration of at least %s with a unit, like 30s or 2m", MinRenderInterval)
	}
	return d, nil
}

// OnFailure is what a config-change rollout does when a batch fails (nomad-restart.on-failure).
type OnFailure string

const (
	// OnFailureStop stops the rollout: the allocations restarted keep the new value.
	OnFailureStop OnFailure = "stop"
	// OnFailureRevert writes the kept previous value back (check-and-set) and restarts the
	// allocations that restarted onto the new value.
	OnFailureRevert OnFailure = "revert"
)

// ParseOnFailure reads nomad-restart.on-failure: stop or revert, in any case, around
// spaces. An invalid value reads as stop, the default.
func ParseOnFailure(value string) (OnFailure, error) {
	switch OnFailure(strings.ToLower(strings.TrimSpace(value))) {
	case OnFailureStop:
		return OnFailureStop, nil
	case OnFailureRevert:
		return OnFailureRevert, nil
	}
	return OnFailureStop, errors.New("give stop (the default: the rollout stops) or revert (the previous value is written back and the restarted allocations brought back to it)")
}

// reasonOf is the reason of a parser's error in the meta's words: the names of run's flags
// become the keys a job writes ("shorter than -healthy-deadline" becomes "shorter than
// nomad-restart.healthy-deadline").
func reasonOf(err error) string {
	var ve *restart.ValueError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	var pairs []string
	for _, k := range knownKeys() {
		pairs = append(pairs, "-"+strings.TrimPrefix(k, MetaPrefix), k)
	}
	return strings.NewReplacer(pairs...).Replace(ve.Reason)
}

// unknownKeys reports the nomad-restart keys nobody reads, most likely typos, sorted.
func unknownKeys(meta map[string]metaValue) []Problem {
	var out []Problem
	for k, mv := range meta {
		if !isKnownKey(k) {
			out = append(out, Problem{Key: k, Value: mv.value, Level: mv.level, Reason: "unknown key: " + suggestKey(k)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func isKnownKey(k string) bool { return slices.Contains(knownKeys(), k) || isGateKey(k) }

// KeyGatePrefix starts a metric gate's key: nomad-restart.gate.<name> = "<promql> <op>
// <number>", judged after each batch as run's -gate "<name>: ..." is.
const KeyGatePrefix = MetaPrefix + "gate."

func isGateKey(k string) bool { return strings.HasPrefix(k, KeyGatePrefix) }

// applyGates reads the gates of meta (nomad-restart.gate.<name>) into s, in the order of
// their names, with the default measuring policy; an invalid one is a Problem.
func applyGates(s *restart.Spec, meta map[string]metaValue) []Problem {
	var names []string
	for k := range meta {
		if isGateKey(k) {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	var problems []Problem
	var specs []string
	for _, k := range names {
		mv := meta[k]
		g, err := gate.ParseMeta(strings.TrimPrefix(k, KeyGatePrefix), mv.value)
		if err != nil {
			problems = append(problems, Problem{Key: k, Value: mv.value, Level: mv.level, Reason: err.Error()})
			continue
		}
		specs = append(specs, g.String())
	}
	if len(problems) == 0 {
		s.Gates = &restart.Gates{Specs: specs, Policy: gate.DefaultPolicy()}
	}
	return problems
}

// suggestKey names the known key closest to a misspelt one, or lists them all.
func suggestKey(k string) string {
	best, bestDist := "", 3 // beyond two edits a guess is noise
	for _, known := range knownKeys() {
		if d := editDistance(k, known); d < bestDist {
			best, bestDist = known, d
		}
	}
	if best != "" {
		return fmt.Sprintf("did you mean %s?", best)
	}
	names := make([]string, 0, len(knownKeys()))
	for _, known := range knownKeys() {
		names = append(names, strings.TrimPrefix(known, MetaPrefix))
	}
	return "the keys are " + MetaPrefix + "{" + strings.Join(names, ",") + "}"
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
