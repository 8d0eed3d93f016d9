package restart

import (
	"errors"
	"strings"
	"time"
)

// Nomad's prompt texts (command/job_restart.go shouldProceed).
const (
	textProceed       = "Proceed with the next batch?"
	textIgnore        = "Ignore the errors above and proceed with the next batch?"
	textUnrecoverable = "The errors above are likely to happen again.\nIgnore them anyway and proceed with the next batch?"
	// Nomad never asks after the last batch; we do, and the question is how to end.
	textLastBatch = "The last batch had the errors above.\nIgnore them and mark the restart as succeeded?"
)

// QuestionLastBatch asks, after errors in the last batch, whether to end the restart as
// succeeded (yes) or failed (no, the default).
const QuestionLastBatch QuestionKind = "last-batch-errors"

// NewQuestion builds the question asked after a batch: with no errors Nomad's "Proceed with
// the next batch? [Y/n]"; with errors the [y/N] variants (unrecoverable ones say they will
// likely happen again); after the last batch whether to ignore its errors. When waitAsk
// (-batch-wait ask in force) a wait duration is also accepted, as in Nomad.
func NewQuestion(id string, batch int, hadErrors, unrecoverable, lastBatch, waitAsk bool, asked time.Time) *Question {
	q := &Question{ID: id, Asked: asked}
	switch {
	case lastBatch:
		q.Kind, q.Text, q.Options, q.Default = QuestionLastBatch, textLastBatch, "y/N", "n"
		return q // no next batch, so no wait to choose
	case !hadErrors:
		q.Kind, q.Text, q.Options, q.Default = QuestionProceed, textProceed, "Y/n", "y"
	case unrecoverable:
		q.Kind, q.Text, q.Options, q.Default = QuestionIgnoreError, textUnrecoverable, "y/N", "n"
	default:
		q.Kind, q.Text, q.Options, q.Default = QuestionIgnoreError, textIgnore, "y/N", "n"
	}
	if waitAsk {
		q.Options += "/<wait duration>"
	}
	return q
}

// Prompt is the question as Nomad prints it: the text followed by the options in brackets.
func (q *Question) Prompt() string {
	return q.Text + " [" + q.Options + "]"
}

// ErrPlacementFailure is the marker the engine wraps placement failures in, so that they are
// classified as unrecoverable.
var ErrPlacementFailure = errors.New("placement failure")

// PermissionDenied is the text Nomad's errors carry when the token lacks a permission.
const PermissionDenied = "Permission denied"

// Unrecoverable tells, as Nomad's isErrorRecoverable does, whether an error is likely to happen
// again: a placement failure, or any error whose text says "Permission denied".
func Unrecoverable(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, ErrPlacementFailure) || strings.Contains(err.Error(), PermissionDenied)
}
