package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/steer"
	"github.com/nomad-restart/nomad-restart/internal/store"
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

// aclHint names the capability a 403 from the allocation restart or stop endpoint means is
// missing, and the policy rule that grants it: Nomad's own answer says only "Permission
// denied". "" when no failure was a denial.
func aclHint(rec *restart.Record, failed []restart.AllocProgress) string {
	denied := false
	for _, f := range failed {
		if strings.Contains(f.Error, "code: 403") || strings.Contains(f.Error, "Permission denied") {
			denied = true
			break
		}
	}
	if !denied {
		return ""
	}
	ns := rec.Namespace
	if ns == "" {
		ns = "default"
	}
	endpoint := "restart"
	if rec.Spec.Reschedule {
		endpoint = "stop"
	}
	return fmt.Sprintf("The token may not %s allocations: that needs the alloc-lifecycle capability in namespace %q. Add it to the token's policy, as in\n"+
		"  namespace %q { capabilities = [\"read-job\", \"alloc-lifecycle\"] }\n"+
		"(see docs/acl.md for every capability nomad-restart uses)", endpoint, ns, ns)
}

// jobBusyMessage is what to tell an operator whose restart the store refused because the
// job has one in progress: the store's fact, and the commands to attach to that restart or
// cancel it (the store names no commands: what to type is the CLI's to say).
func jobBusyMessage(busy *store.JobBusyError) string {
	id := output.ShortID(busy.RestartID, false)
	return fmt.Sprintf("%s; attach to it with `nomad-restart attach %s`, or cancel it with `nomad-restart cancel %s`", busy.Error(), id, id)
}
