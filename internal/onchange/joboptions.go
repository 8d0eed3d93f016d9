package onchange

import (
	"fmt"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// levelJob is the Level of a Problem in a job's own meta.
const levelJob = "job"

// JobOptions applies the run options a job's own meta gives (the nomad-restart.* keys named
// after run's flags: batch-size, batch-wait, health, healthy-deadline, min-healthy-time,
// max-unavailable, on-error, surge) onto spec, the options of a run that restarts the job
// among others: the job's word wins, option by option. The keys of config-change rollouts
// (on-change, debounce) are not run options and are left alone, as are keys without the
// prefix. An invalid value or an unknown nomad-restart.* key is a Problem; with any, spec
// comes back unchanged, so that no job restarts with options its author did not mean.
func JobOptions(spec restart.Spec, meta map[string]string) (restart.Spec, []Problem) {
	s := spec
	var problems []Problem
	var debounce time.Duration // applyOption's, never read: debounce is not a run option
	for _, key := range knownKeys() {
		value, ok := meta[key]
		if !ok || !isRunOption(key) {
			continue
		}
		if err := applyOption(&s, &debounce, key, value); err != nil {
			problems = append(problems, Problem{Key: key, Value: value, Level: levelJob, Reason: reasonOf(err)})
		}
	}
	if p, ok := deadlineProblem(s, meta); ok {
		problems = append(problems, p)
	}
	// A job's own gates replace the run's: they name what the job's service exports.
	problems = append(problems, applyGates(&s, groupMeta(meta, nil))...)
	problems = append(problems, unknownKeys(groupMeta(meta, nil))...)
	if len(problems) > 0 {
		return spec, problems
	}
	return s, nil
}

// isRunOption reports whether key is one of run's options (not a rollout's own key).
func isRunOption(key string) bool {
	return key != KeyOnChange && key != KeyDebounce && key != KeyOnFailure
}

// deadlineProblem is the job's healthy deadline when it is not longer than the min healthy
// time the run gives (the job leaving min-healthy-time to the run): the engine would refuse
// the job's restart at its planning, after other jobs restarted.
func deadlineProblem(s restart.Spec, meta map[string]string) (Problem, bool) {
	value, jobDeadline := meta[KeyHealthyDeadline]
	_, jobMinHealthy := meta[KeyMinHealthyTime]
	// An invalid deadline is a problem of its own already (HealthyDeadlineGiven is false).
	if !jobDeadline || jobMinHealthy || !s.HealthyDeadlineGiven || !s.MinHealthyTimeGiven ||
		s.MinHealthyTime < s.HealthyDeadline {
		return Problem{}, false
	}
	return Problem{Key: KeyHealthyDeadline, Value: value, Level: levelJob,
		Reason: fmt.Sprintf("it must be longer than the run's -min-healthy-time (%s); set %s too", s.MinHealthyTime, KeyMinHealthyTime)}, true
}
