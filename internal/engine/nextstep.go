package engine

import "fmt"

// NextStep is what an operator should do about a restart after an error that stopped short
// of what was asked. The engine names the step; the CLI words it as the command to type.
type NextStep int

const (
	// StepStatus: another process may drive the restart now; its status tells.
	StepStatus NextStep = iota + 1
	// StepCancelAgain: the cancel is recorded but did not finish; running it again does.
	StepCancelAgain
)

// StepError is an error after which the operator has a next step about restart ID.
type StepError struct {
	ID   string // the restart's full ID
	Step NextStep
	Err  error // what happened, worded to be followed by the step
}

func (e *StepError) Error() string { return e.Explain("") }
func (e *StepError) Unwrap() error { return e.Err }

// Explain words the error with its step, done by command (what to type, quoted as the
// caller likes; "": the step in words).
func (e *StepError) Explain(command string) string {
	switch e.Step {
	case StepStatus:
		if command == "" {
			command = "its status"
		}
		return fmt.Sprintf("%v (another process may drive it now; see %s)", e.Err, command)
	case StepCancelAgain:
		if command == "" {
			command = "the cancel"
		}
		return fmt.Sprintf("%v; run %s again", e.Err, command)
	}
	return e.Err.Error()
}
