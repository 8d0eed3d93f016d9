package sim

import (
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Meta keys through which a job scripts its simulated behaviour (see the nomadsim package
// documentation).
const (
	MetaStartDelay   = "nomadsim.start_delay"
	MetaRunFor       = "nomadsim.run_for"
	metaExitCode     = "nomadsim.exit_code"
	MetaIgnoreSignal = "nomadsim.ignore_signal"
	MetaFailAfter    = "nomadsim.fail_after"
	metaCheckPrefix  = "nomadsim.check."
)

// defaultStartDelay is how long a simulated driver takes to start a task: a real Nomad
// 2.0 agent took 0.33-0.71 s from Restarting to Started for a raw_exec task.
const defaultStartDelay = 500 * time.Millisecond

// taskScript is a task's scripted behaviour, read from task Meta over group and job Meta.
type taskScript struct {
	startDelay   time.Duration
	runFor       time.Duration // 0: runs until killed
	exitCode     int
	ignoreSignal bool
	failAfter    time.Duration // 0: never fails by itself
}

// lookupMeta finds key in the task's, then the group's, then the job's Meta, as Nomad
// interpolates ${NOMAD_META_*} with task Meta overriding group and job Meta.
func lookupMeta(job *api.Job, tg *api.TaskGroup, t *api.Task, key string) (string, bool) {
	if t != nil {
		if v, ok := t.Meta[key]; ok {
			return v, true
		}
	}
	if tg != nil {
		if v, ok := tg.Meta[key]; ok {
			return v, true
		}
	}
	if job != nil {
		if v, ok := job.Meta[key]; ok {
			return v, true
		}
	}
	return "", false
}

func metaDuration(job *api.Job, tg *api.TaskGroup, t *api.Task, key string, def time.Duration) time.Duration {
	v, ok := lookupMeta(job, tg, t, key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		return def
	}
	return d
}

func readTaskScript(job *api.Job, tg *api.TaskGroup, t *api.Task) taskScript {
	s := taskScript{
		startDelay: metaDuration(job, tg, t, MetaStartDelay, defaultStartDelay),
		runFor:     metaDuration(job, tg, t, MetaRunFor, 0),
		failAfter:  metaDuration(job, tg, t, MetaFailAfter, 0),
	}
	if v, ok := lookupMeta(job, tg, t, metaExitCode); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			s.exitCode = n
		}
	}
	if v, ok := lookupMeta(job, tg, t, MetaIgnoreSignal); ok {
		s.ignoreSignal, _ = strconv.ParseBool(strings.TrimSpace(v))
	}
	return s
}

// checkScript scripts one check's results as a function of the time elapsed since the
// checked task (or, for group services, the group's main tasks) last started.
//
//	pass            passes from the start (the default)
//	fail            never passes
//	pass_after=D    fails until D has elapsed, then passes
//	fail_after=D    passes until D has elapsed, then fails
//	flap=D          passes for D, fails for D, and so on
type checkScript struct {
	kind string
	d    time.Duration
	// since, when set (runtime overrides), is when the script's clock starts if that is
	// later than the workload's start.
	since time.Time
	// bad says the check fails because the workload loaded a bad value
	// (nomadsim.bad_when): the workload still answers, with errors.
	bad bool
}

// origin is when the script's clock starts for a workload started at start.
func (s checkScript) origin(start time.Time) time.Time {
	if s.since.After(start) {
		return s.since
	}
	return start
}

func parseCheckScript(v string) checkScript {
	v = strings.TrimSpace(v)
	name, arg, _ := strings.Cut(v, "=")
	d, _ := time.ParseDuration(strings.TrimSpace(arg))
	switch strings.TrimSpace(name) {
	case "fail":
		return checkScript{kind: "fail"}
	case "pass_after":
		return checkScript{kind: "pass_after", d: d}
	case "fail_after":
		return checkScript{kind: "fail_after", d: d}
	case "flap":
		if d <= 0 {
			d = time.Second
		}
		return checkScript{kind: "flap", d: d}
	default:
		return checkScript{kind: "pass"}
	}
}

// passing reports whether the check passes at elapsed time el.
func (s checkScript) passing(el time.Duration) bool {
	switch s.kind {
	case "fail":
		return false
	case "pass_after":
		return el >= s.d
	case "fail_after":
		return el < s.d
	case "flap":
		return (el/s.d)%2 == 0
	default:
		return true
	}
}

// passingSince returns the elapsed time at which the current passing streak began, and
// false if the check does not pass at el.
func (s checkScript) passingSince(el time.Duration) (time.Duration, bool) {
	if !s.passing(el) {
		return 0, false
	}
	switch s.kind {
	case "pass_after":
		return s.d, true
	case "flap":
		return (el / s.d) * s.d, true
	default:
		return 0, true
	}
}

// nextChange returns the elapsed time of the next change of result after el, and false if
// the result never changes again.
func (s checkScript) nextChange(el time.Duration) (time.Duration, bool) {
	switch s.kind {
	case "pass_after", "fail_after":
		if el < s.d {
			return s.d, true
		}
		return 0, false
	case "flap":
		return (el/s.d + 1) * s.d, true
	default:
		return 0, false
	}
}
