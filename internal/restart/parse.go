package restart

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// batchSizeRe is Nomad's own check of a -batch-size value (command/job_restart.go).
var batchSizeRe = regexp.MustCompile(`^(\d+)%?$`)

// ValueError is an option's value that one of this package's parsers refused. The same
// options come from `run`'s flags and from a job's meta (nomad-restart.<flag>), so the error
// keeps the flag's name, the value and the reason apart for each caller to name the option
// its own way; Error reads as the command line says it.
type ValueError struct {
	Flag   string // the flag's name without its dash: "batch-wait"
	Value  string // the value refused, as given
	Reason string // what is wrong and what to give instead
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("invalid -%s value %q: %s", e.Flag, e.Value, e.Reason)
}

// ParseBatchSizes parses -batch-size: "n", "n%", or progressive sizes such as "1,10%,25%"
// (the last size repeats for the rest). Every size must be greater than zero.
func ParseBatchSizes(s string) ([]BatchSize, error) {
	if strings.TrimSpace(s) == "" {
		return nil, &ValueError{Flag: "batch-size", Value: s, Reason: "give a number of allocations like 2, or a percentage like 25%"}
	}
	var sizes []BatchSize
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			// An empty size (1,,2 or a trailing comma) has no text of its own to name.
			return nil, &ValueError{Flag: "batch-size", Value: s, Reason: "a size between commas is empty; give sizes like 1,10%,25%"}
		}
		if !batchSizeRe.MatchString(part) {
			return nil, &ValueError{Flag: "batch-size", Value: part, Reason: "give a number of allocations like 2, or a percentage like 25%"}
		}
		percent := strings.HasSuffix(part, "%")
		n, err := strconv.Atoi(strings.TrimSuffix(part, "%"))
		switch {
		case err != nil:
			return nil, &ValueError{Flag: "batch-size", Value: part, Reason: "it is too large: give a number of allocations like 2, or a percentage like 25%"}
		case n <= 0:
			return nil, &ValueError{Flag: "batch-size", Value: part, Reason: "it must be greater than zero"}
		case percent && n > 100:
			return nil, &ValueError{Flag: "batch-size", Value: part, Reason: "a percentage must be at most 100%"}
		}
		sizes = append(sizes, BatchSize{N: n, Percent: percent})
	}
	return sizes, nil
}

// ParseBatchWait parses -batch-wait: a non-negative duration with a unit, or "ask" (in any
// case). Whether a question can be answered where the restart runs is the caller's to check.
func ParseBatchWait(s string) (wait time.Duration, ask bool, err error) {
	if strings.EqualFold(s, "ask") {
		return 0, true, nil
	}
	d, err := ParseDuration("batch-wait", s, `give a duration with a unit like 10s or 2m, or "ask"`)
	return d, false, err
}

// durationSyntax is what time.ParseDuration reads ("1h30m", ".5s"): a value of this form
// that it refuses is out of its range, not misspelt.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

// ParseDuration parses a non-negative duration option, telling a misspelt value (want says
// what to give) from one too long for a duration or negative.
func ParseDuration(flag, s, want string) (time.Duration, error) {
	v := strings.TrimSpace(s)
	d, err := time.ParseDuration(v)
	switch {
	case err != nil && durationSyntax.MatchString(v):
		return 0, &ValueError{Flag: flag, Value: s, Reason: "it is too long: a duration is at most 2562047h (about 292 years)"}
	case err != nil:
		return 0, &ValueError{Flag: flag, Value: s, Reason: want}
	case d < 0:
		return 0, &ValueError{Flag: flag, Value: s, Reason: "it must not be negative"}
	}
	return d, nil
}

// ParseOnError parses -on-error: "ask" or "fail", exactly. Whether a question can be
// answered where the restart runs is the caller's to check.
func ParseOnError(s string) (OnError, error) {
	switch OnError(s) {
	case OnErrorAsk, OnErrorFail:
		return OnError(s), nil
	}
	return "", &ValueError{Flag: "on-error", Value: s, Reason: `valid options are "ask" and "fail"`}
}

// ParseHealthMode parses -health, ignoring case and surrounding space.
func ParseHealthMode(s string) (HealthMode, error) {
	switch h := HealthMode(strings.ToLower(strings.TrimSpace(s))); h {
	case HealthAuto, HealthChecks, HealthNone, HealthRunning:
		return h, nil
	}
	return "", &ValueError{Flag: "health", Value: s, Reason: `valid options are "auto" (default: checks where the groups define them, else running), "checks", "running" and "none" (Nomad's behaviour)`}
}

// ParseHealthyDeadline parses -healthy-deadline: a positive duration.
func ParseHealthyDeadline(s string) (time.Duration, error) {
	d, err := ParseDuration("healthy-deadline", s, "give a positive duration like 5m")
	if err == nil && d == 0 {
		err = &ValueError{Flag: "healthy-deadline", Value: s, Reason: "give a positive duration like 5m"}
	}
	return d, err
}

// ParseMinHealthyTime parses -min-healthy-time: a non-negative duration shorter than the
// healthy deadline that applies (given, or DefaultHealthyDeadline).
func ParseMinHealthyTime(s string, deadline time.Duration) (time.Duration, error) {
	d, err := ParseDuration("min-healthy-time", s, "give a duration like 10s, or 0")
	if err != nil {
		return 0, err
	}
	if d >= deadline {
		return 0, &ValueError{Flag: "min-healthy-time", Value: s, Reason: fmt.Sprintf("it must be shorter than -healthy-deadline (%s)", deadline)}
	}
	return d, nil
}

// ParseSurge parses -surge: the number of extra allocations per group, 1 or more.
func ParseSurge(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 {
		return 0, &ValueError{Flag: "surge", Value: s, Reason: "give the number of extra allocations per group, 1 or more"}
	}
	return n, nil
}

// DrainAuto is -drain's default: DefaultDrain where the health gate reads Consul.
const DrainAuto = "auto"

// ParseDrain parses -drain: "auto" (given false: planning decides), or a duration from 0
// (no drain) to MaxDrain.
func ParseDrain(s string) (d time.Duration, given bool, err error) {
	v := strings.TrimSpace(s)
	if v == DrainAuto {
		return 0, false, nil
	}
	d, err = time.ParseDuration(v)
	if err != nil || d < 0 || d > MaxDrain {
		return 0, false, &ValueError{Flag: "drain", Value: s, Reason: fmt.Sprintf("give a duration from 0 (no drain) to %s, such as 2s, or auto", MaxDrain)}
	}
	return d, true, nil
}

// String formats batch sizes the way ParseBatchSizes reads them.
func FormatBatchSizes(sizes []BatchSize) string {
	parts := make([]string, len(sizes))
	for i, b := range sizes {
		parts[i] = strconv.Itoa(b.N)
		if b.Percent {
			parts[i] += "%"
		}
	}
	return strings.Join(parts, ",")
}

// Answer is an operator's answer to a Question.
type Answer struct {
	Proceed bool
	// Wait, when set, is a new batch wait that replaces -batch-wait=ask for the rest of the
	// restart (Nomad's prompt accepts a duration when -batch-wait is ask).
	Wait *time.Duration
}

// ErrInvalidAnswer is returned for an answer the question does not accept; Nomad's command
// says "Invalid answer" and asks again.
var ErrInvalidAnswer = errors.New("invalid answer")

// AtPrompt is a line typed at a terminal's prompt as an answer: Enter alone takes the
// question's default, as Nomad's prompts do. Only a prompt does this; an answer given
// otherwise (`nomad-restart answer`, the page) must say what it means.
func AtPrompt(q *Question, line string) string {
	if strings.TrimSpace(line) == "" && q != nil {
		return q.Default
	}
	return line
}

// ParseAnswer reads an answer as Nomad's prompts do: y or yes proceeds, n or no stops, and
// a duration (only where the question's options offer one) proceeds with a new batch wait.
// Case and surrounding space are ignored. An empty answer is refused: from a script it is
// an unset variable, not a choice (a prompt's Enter goes through AtPrompt first).
func ParseAnswer(q *Question, text string) (Answer, error) {
	a := strings.ToLower(strings.TrimSpace(text))
	if a == "" {
		choices := "y or n"
		if q != nil && strings.Contains(q.Options, "<wait duration>") {
			choices = "y, n, or a wait duration like 30s"
		}
		return Answer{}, fmt.Errorf("%w %q: it is empty; answer %s", ErrInvalidAnswer, text, choices)
	}
	switch a {
	case "y", "yes":
		return Answer{Proceed: true}, nil
	case "n", "no":
		return Answer{Proceed: false}, nil
	}
	if q != nil && strings.Contains(q.Options, "<wait duration>") {
		if d, err := time.ParseDuration(a); err == nil && d >= 0 {
			return Answer{Proceed: true, Wait: &d}, nil
		}
	}
	if q != nil && strings.Contains(q.Options, "<wait duration>") {
		return Answer{}, fmt.Errorf("%w %q: answer y, n, or a wait duration like 30s", ErrInvalidAnswer, text)
	}
	return Answer{}, fmt.Errorf("%w %q: answer y or n", ErrInvalidAnswer, text)
}
