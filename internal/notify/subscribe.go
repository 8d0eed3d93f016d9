package notify

import (
	"fmt"
	"slices"
	"strings"
)

// MetaPrefix starts a job's meta key that subscribes sinks to a trigger of its restarts:
// `nomad-restart.notify.<trigger> = "<name>[,<name>]"` (as Argo's
// notifications.argoproj.io/subscribe.<trigger>.<service>).
const MetaPrefix = "nomad-restart.notify."

// Subscriptions map a sink's name to the triggers it hears.
type Subscriptions map[string][]Trigger

// ParseOn reads -notify-on values, each `TRIGGER[,TRIGGER..]=NAME[,NAME..]`; the trigger
// `all` is every trigger, and `none` names a sink that hears only what jobs' meta and
// restarts ask for.
func ParseOn(values []string) (Subscriptions, error) {
	subs := Subscriptions{}
	for _, v := range values {
		triggers, names, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(triggers) == "" || strings.TrimSpace(names) == "" {
			return nil, fmt.Errorf("invalid -notify-on %q: use TRIGGER[,TRIGGER..]=NAME, as in -notify-on question,failed=ops", v)
		}
		ts, err := parseTriggers(triggers)
		if err != nil {
			return nil, fmt.Errorf("invalid -notify-on %q: %w", v, err)
		}
		for _, n := range splitNames(names) {
			subs.add(n, ts...)
		}
	}
	return subs, nil
}

// parseTriggers reads a comma-separated list of triggers, all or none.
func parseTriggers(list string) ([]Trigger, error) {
	var out []Trigger
	for _, name := range strings.Split(list, ",") {
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "all":
			out = append(out, Triggers()...)
			continue
		case "none":
			continue
		}
		t, err := ParseTrigger(name)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func splitNames(list string) []string {
	var out []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// add subscribes name to ts (name is recorded even with none).
func (s Subscriptions) add(name string, ts ...Trigger) {
	cur := s[name]
	if cur == nil {
		cur = []Trigger{}
	}
	for _, t := range ts {
		if !slices.Contains(cur, t) {
			cur = append(cur, t)
		}
	}
	s[name] = cur
}

// Names are the sinks named, sorted.
func (s Subscriptions) Names() []string {
	var out []string
	for n := range s {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Record is the subscriptions as a record keeps them (restart.Notifications.Subscribe):
// trigger to sink names.
func (s Subscriptions) Record() map[string][]string {
	if len(s) == 0 {
		return nil
	}
	out := map[string][]string{}
	for _, name := range s.Names() {
		for _, t := range s[name] {
			out[string(t)] = append(out[string(t)], name)
		}
	}
	return out
}

// FromRecord reads a record's subscriptions; a trigger this version does not know is
// left out (a newer version filed it).
func FromRecord(m map[string][]string) Subscriptions {
	subs := Subscriptions{}
	for _, tr := range Triggers() { // in order: what a sink hears reads the same each time
		for _, n := range m[string(tr)] {
			subs.add(n, tr)
		}
	}
	return subs
}

// FromMeta reads a job's subscriptions from its meta; Problems name the keys that were
// refused (an unknown trigger), to be reported and otherwise ignored.
func FromMeta(meta map[string]string) (subs Subscriptions, problems []string) {
	subs = Subscriptions{}
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		name, ok := strings.CutPrefix(k, MetaPrefix)
		if !ok {
			continue
		}
		ts, err := parseTriggers(name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("job meta %s: %v", k, err))
			continue
		}
		for _, n := range splitNames(meta[k]) {
			subs.add(n, ts...)
		}
	}
	return subs, problems
}
