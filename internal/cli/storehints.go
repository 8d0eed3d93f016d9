package cli

import (
	"fmt"

	"github.com/nomad-restart/nomad-restart/internal/cli/output"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// jobBusyMessage is what to tell an operator whose restart the store refused because the
// job has one in progress: the store's fact, and the commands to attach to that restart or
// cancel it (the store names no commands: what to type is the CLI's to say).
func jobBusyMessage(busy *store.JobBusyError) string {
	id := output.ShortID(busy.RestartID, false)
	return fmt.Sprintf("%s; attach to it with `nomad-restart attach %s`, or cancel it with `nomad-restart cancel %s`", busy.Error(), id, id)
}
