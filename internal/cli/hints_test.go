package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/steer"
)

// TestErrorTextWordsNextSteps: the engine's typed errors read, where the CLI prints them,
// as they did when the engine wrote the commands itself.
func TestErrorTextWordsNextSteps(t *testing.T) {
	const id = "0123456789abcdef"
	cases := []struct {
		err  error
		want string
	}{
		{&engine.StepError{ID: id, Step: engine.StepStatus, Err: errors.New("restart 01234567: lost the lease on the restart")},
			"restart 01234567: lost the lease on the restart (another process may drive it now; see `nomad-restart status 01234567`)"},
		{fmt.Errorf("x: %w", &engine.StepError{ID: id, Step: engine.StepCancelAgain, Err: errors.New("restart 01234567: cancel recorded, but the restart could not be read again: boom")}),
			"x: restart 01234567: cancel recorded, but the restart could not be read again: boom; run `nomad-restart cancel 01234567` again"},
		{&steer.CancelingError{ID: id, By: "ops", Verb: "resume"},
			"restart 01234567 is being canceled (asked by ops), so it cannot be resumed; the cancel takes effect when its driver acts, or, if no process drives it, when `nomad-restart cancel 01234567` is run again once its lease is free"},
		{errors.New("plain"), "plain"},
	}
	for _, tc := range cases {
		if got := errorText(tc.err); got != tc.want {
			t.Errorf("errorText:\n got %s\nwant %s", got, tc.want)
		}
	}
}
