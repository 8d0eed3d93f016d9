package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/store"
)

// losableLease is a lease whose loss the test decides.
type losableLease struct{ lost chan struct{} }

func (l losableLease) Lost() <-chan struct{}         { return l.lost }
func (l losableLease) Release(context.Context) error { return nil }

var _ store.Lease = losableLease{}

// TestWhileHeldEndsWithErrLeaseLost checks the cause a lost lease gives the drive's
// context: the agent tells a lost lease from other failures by it (errors.Is), not by text.
func TestWhileHeldEndsWithErrLeaseLost(t *testing.T) {
	lease := losableLease{lost: make(chan struct{})}
	held, cancel := whileHeld(t.Context(), lease)
	defer cancel()
	if held.Err() != nil {
		t.Fatalf("the context ended before the lease was lost: %v", context.Cause(held))
	}
	close(lease.lost)
	<-held.Done()
	if cause := context.Cause(held); !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("cause = %v, want ErrLeaseLost", cause)
	}
	stepErr := error(&StepError{ID: "r1", Step: StepStatus, Err: ErrLeaseLost})
	if !errors.Is(stepErr, ErrLeaseLost) {
		t.Errorf("a drive's StepError hides ErrLeaseLost from errors.Is")
	}
}

func TestWhileHeldCanceledIsNoLoss(t *testing.T) {
	held, cancel := whileHeld(t.Context(), losableLease{lost: make(chan struct{})})
	cancel()
	<-held.Done()
	if errors.Is(context.Cause(held), ErrLeaseLost) {
		t.Errorf("a canceled drive reads as a lost lease")
	}
}
