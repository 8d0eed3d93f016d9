package steer

import (
	"context"
	"errors"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestSetIntent(t *testing.T) {
	const id = "0123456789abcdef"
	tests := []struct {
		name    string
		kind    Kind
		status  restart.Status
		before  restart.Control
		intent  restart.Intent
		want    restart.Control
		wantErr string
	}{
		{"a running restart pauses", KindRestart, restart.StatusRunning, restart.Control{Intent: restart.IntentRun},
			restart.IntentPause, restart.Control{Intent: restart.IntentPause, By: "ops"}, ""},
		{"a paused fleet resumes", KindFleet, restart.StatusPaused, restart.Control{Intent: restart.IntentPause, By: "dev"},
			restart.IntentRun, restart.Control{Intent: restart.IntentRun, By: "ops"}, ""},
		{"a cancel is final for a restart", KindRestart, restart.StatusRunning, restart.Control{Intent: restart.IntentCancel, By: "dev"},
			restart.IntentRun, restart.Control{Intent: restart.IntentCancel, By: "dev"},
			"restart 01234567 is being canceled (asked by dev), so it cannot be resumed; the cancel takes effect when its driver acts, or, if no process drives it, when the cancel is run again once its lease is free"},
		{"a cancel is final for a fleet", KindFleet, restart.StatusRunning, restart.Control{Intent: restart.IntentCancel},
			restart.IntentPause, restart.Control{Intent: restart.IntentCancel}, "fleet 01234567 is being canceled; a cancel is final"},
		{"a cancel may be asked again", KindRestart, restart.StatusRunning, restart.Control{Intent: restart.IntentCancel, By: "dev"},
			restart.IntentCancel, restart.Control{Intent: restart.IntentCancel, By: "ops"}, ""},
		{"an ended restart is not steered", KindRestart, restart.StatusSucceeded, restart.Control{Intent: restart.IntentRun},
			restart.IntentPause, restart.Control{Intent: restart.IntentRun}, "restart 01234567 is already succeeded; nothing to pause"},
		{"an ended fleet is not steered", KindFleet, restart.StatusCanceled, restart.Control{Intent: restart.IntentCancel},
			restart.IntentCancel, restart.Control{Intent: restart.IntentCancel}, "fleet 01234567 has already ended (canceled)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.before
			err := SetIntent(Head{Kind: tt.kind, ID: id, Status: tt.status}, &c, tt.intent, "ops")
			if (err == nil) != (tt.wantErr == "") || (err != nil && err.Error() != tt.wantErr) {
				t.Fatalf("error %v, want %q", err, tt.wantErr)
			}
			if c != tt.want {
				t.Fatalf("control %+v, want %+v", c, tt.want)
			}
			var ended *EndedError
			var canceling *CancelingError
			if err != nil && !errors.As(err, &ended) && !errors.As(err, &canceling) {
				t.Fatalf("error %T is neither an EndedError nor a CancelingError", err)
			}
		})
	}
}

func TestSetAnswer(t *testing.T) {
	q := &restart.Question{ID: "q1", Kind: restart.QuestionIgnoreError, Text: "Ignore the errors above and proceed with the next batch?", Options: "y/N", Default: "no"}
	tests := []struct {
		name    string
		status  restart.Status
		q       *restart.Question
		answer  string
		want    restart.Control
		wantErr error
	}{
		{"yes", restart.StatusWaiting, q, "yes", restart.Control{Answer: "yes", AnswerTo: "q1", By: "ops"}, nil},
		{"empty is refused", restart.StatusWaiting, q, " ", restart.Control{}, restart.ErrInvalidAnswer},
		{"not an answer", restart.StatusWaiting, q, "maybe", restart.Control{}, restart.ErrInvalidAnswer},
		{"nothing asked", restart.StatusRunning, nil, "yes", restart.Control{}, ErrNoQuestion},
		{"asked but no longer waiting", restart.StatusRunning, q, "yes", restart.Control{}, ErrNoQuestion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c restart.Control
			err := SetAnswer(Head{Kind: KindRestart, ID: "r1", Status: tt.status, Question: tt.q}, &c, tt.answer, "ops")
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if c != tt.want {
				t.Fatalf("control %+v, want %+v", c, tt.want)
			}
		})
	}
}

func TestSteerersFor(t *testing.T) {
	restarts, fleets := nopSteerer{"restarts"}, nopSteerer{"fleets"}
	s := Steerers{Restarts: restarts, Fleets: fleets}
	if s.For(KindRestart) != restarts || s.For(KindFleet) != fleets {
		t.Fatal("For gave the wrong kind's steerer")
	}
	if (Steerers{Restarts: restarts}).For(KindFleet) != nil {
		t.Fatal("where there are no fleets, For(KindFleet) must be nil")
	}
}

// nopSteerer steers nothing; its name tells instances apart.
type nopSteerer struct{ name string }

func (nopSteerer) Pause(context.Context, string, string, string) (Head, error)  { return Head{}, nil }
func (nopSteerer) Resume(context.Context, string, string, string) (Head, error) { return Head{}, nil }
func (nopSteerer) Cancel(context.Context, string, string, string) (Head, error) { return Head{}, nil }
func (nopSteerer) Answer(context.Context, string, string, string, string) (Answered, error) {
	return Answered{}, nil
}
