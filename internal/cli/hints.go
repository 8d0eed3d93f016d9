package cli

import (
	"errors"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// errorText is err's text with the next steps the engine's typed errors name worded as the
// commands to type (the engine names the step; what to type is the CLI's to say).
func errorText(err error) string {
	msg := err.Error()
	var se *engine.StepError
	if errors.As(err, &se) {
		msg = strings.Replace(msg, se.Error(), se.Explain(stepCommand(se.Step, se.ID)), 1)
	}
	var ce *steer.CancelingError
	if errors.As(err, &ce) {
		msg = strings.Replace(msg, ce.Error(), ce.Explain(stepCommand(engine.StepCancelAgain, ce.ID)), 1)
	}
	return msg
}

// stepCommand is the command that takes step on restart id, quoted as the CLI prints
// commands.
func stepCommand(step engine.NextStep, id string) string {
	id = output.ShortID(id, false)
	switch step {
	case engine.StepStatus:
		return "`nomad-restart status " + id + "`"
	case engine.StepCancelAgain:
		return "`nomad-restart cancel " + id + "`"
	}
	return ""
}
