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

// ParseBatchSizes parses -batch-size: "n", "n%", or progressive sizes such as "1,10%,25%"
// (the last size repeats for the rest). Every size must be greater than zero.
func ParseBatchSizes(s string) ([]BatchSize, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New(`invalid -batch-size value "": give a number of allocations like 2, or a percentage like 25%`)
	}
	var sizes []BatchSize
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if !batchSizeRe.MatchString(part) {
			return nil, fmt.Errorf("invalid -batch-size value %q: give a number of allocations like 2, or a percentage like 25%%", part)
		}
		n, err := strconv.Atoi(strings.TrimSuffix(part, "%"))
		if err != nil {
			return nil, fmt.Errorf("invalid -batch-size value %q: %w", part, err)
		}
		if n <= 0 {
			return nil, fmt.Errorf("invalid -batch-size value %q: it must be greater than zero", part)
		}
		sizes = append(sizes, BatchSize{N: n, Percent: strings.HasSuffix(part, "%")})
	}
	return sizes, nil
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

// ParseAnswer reads an answer as Nomad's prompts do: y or yes proceeds, n or no stops, an
// empty answer takes the question's default, and a duration (only where the question's
// options offer one) proceeds with a new batch wait. Case and surrounding space are ignored.
func ParseAnswer(q *Question, text string) (Answer, error) {
	a := strings.ToLower(strings.TrimSpace(text))
	if a == "" && q != nil {
		a = strings.ToLower(q.Default)
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
