// Package steer is what operators do to a restart or a fleet that runs: pause it, resume
// it, cancel it, answer its question. A restart (driven by the engine) and a fleet (driven
// by the fleet driver) are steered through one interface, Steerer, and by the same rules on
// the part of their record operators write (restart.Control), so that the CLI and the page
// steer either kind with the same code and only what differs (a fleet's children) is
// written for fleets.
//
// The package is pure: it holds the interface, the rules and the typed errors; the engine
// and the fleet driver implement Steerer, and the CLI and the page render the errors.
package steer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Kind is what an ID names: a restart or a fleet.
type Kind string

// Kinds of steered records.
const (
	KindRestart Kind = "restart"
	KindFleet   Kind = "fleet"
)

// Head is the part of a record that steering reads and reports back.
type Head struct {
	Kind      Kind
	ID        string
	Namespace string
	// JobID is the job a restart restarts ("" for a fleet).
	JobID    string
	Status   restart.Status
	Question *restart.Question
	Control  restart.Control
	// Events is the record's event log (its last MaxEvents for a fleet), so that a caller
	// can show what a steering did on the way (a cancel scaling a surge back).
	Events []restart.Event
}

// RestartHead is the head of a restart record.
func RestartHead(r *restart.Record) Head {
	return Head{Kind: KindRestart, ID: r.ID, Namespace: r.Namespace, JobID: r.JobID, Status: r.Status,
		Question: r.Question, Control: r.Control, Events: r.Events}
}

// FleetHead is the head of a fleet record.
func FleetHead(r *fleet.Record) Head {
	return Head{Kind: KindFleet, ID: r.ID, Namespace: r.Namespace, Status: r.Status,
		Question: r.Question, Control: r.Control, Events: r.Events}
}

// Steerer steers the records of one kind. Each method changes only the record's Control
// (and rings its driver); Cancel also ends a record no process drives.
type Steerer interface {
	// Pause asks the driver to finish what it started and hold.
	Pause(ctx context.Context, namespace, id, by string) (Head, error)
	// Resume sets the intent run. The caller then drives the record if no one does.
	Resume(ctx context.Context, namespace, id, by string) (Head, error)
	// Cancel asks the driver to stop; a record no one drives is ended by the call.
	Cancel(ctx context.Context, namespace, id, by string) (Head, error)
	// Answer answers the question the record waits on, validated by restart.ParseAnswer
	// ("" takes its default). A fleet that asks nothing passes the answer on to its
	// running restarts that wait for one: Answered names them.
	Answer(ctx context.Context, namespace, id, answer, by string) (Answered, error)
}

// Answered says who took an answer.
type Answered struct {
	// Restarts are the restarts a fleet passed the answer on to (none when the record
	// answered its own question).
	Restarts []string
}

// Steering is steering that answers with the whole record, R (*restart.Record: the
// engine's methods; *fleet.Record: the fleet driver's), and, for an answer, the restarts it
// was passed on to (A: the engine's answer is a record, the fleet driver's a list of IDs).
type Steering[R Steered, A any] interface {
	Pause(ctx context.Context, namespace, id, by string) (R, error)
	Resume(ctx context.Context, namespace, id, by string) (R, error)
	Cancel(ctx context.Context, namespace, id, by string) (R, error)
	Answer(ctx context.Context, namespace, id, answer, by string) (A, error)
}

// Steered is a record operators steer.
type Steered interface {
	*restart.Record | *fleet.Record
}

// HeadOf is the head of a steered record.
func HeadOf[R Steered](rec R) Head {
	switch r := any(rec).(type) {
	case *restart.Record:
		return RestartHead(r)
	case *fleet.Record:
		return FleetHead(r)
	}
	panic("steer: a record of no kind") // Steered admits no other type
}

// Adapt is s as a Steerer: the record each method answers becomes its head, and an answer
// passed on to restarts (a []string of their IDs) becomes Answered.Restarts.
func Adapt[R Steered, A any](s Steering[R, A]) Steerer { return adapted[R, A]{s} }

type adapted[R Steered, A any] struct{ s Steering[R, A] }

func (a adapted[R, A]) Pause(ctx context.Context, namespace, id, by string) (Head, error) {
	return headOrNot(a.s.Pause(ctx, namespace, id, by))
}

func (a adapted[R, A]) Resume(ctx context.Context, namespace, id, by string) (Head, error) {
	return headOrNot(a.s.Resume(ctx, namespace, id, by))
}

func (a adapted[R, A]) Cancel(ctx context.Context, namespace, id, by string) (Head, error) {
	return headOrNot(a.s.Cancel(ctx, namespace, id, by))
}

func (a adapted[R, A]) Answer(ctx context.Context, namespace, id, answer, by string) (Answered, error) {
	got, err := a.s.Answer(ctx, namespace, id, answer, by)
	restarts, _ := any(got).([]string)
	return Answered{Restarts: restarts}, err
}

// headOrNot is the head of rec, the zero Head when there is none (an error).
func headOrNot[R Steered](rec R, err error) (Head, error) {
	if rec == nil {
		return Head{}, err
	}
	return HeadOf(rec), err
}

// Steerers steer every kind.
type Steerers struct {
	Restarts Steerer
	// Fleets is nil where there are no fleets (records kept in a local file).
	Fleets Steerer
}

// For is the steerer of kind k, nil when there is none.
func (s Steerers) For(k Kind) Steerer {
	if k == KindFleet {
		return s.Fleets
	}
	return s.Restarts
}

// ErrNoQuestion says the record (and, for a fleet, none of its running restarts) waits
// for no answer.
var ErrNoQuestion = errors.New("not waiting for an answer")

// EndedError refuses to steer a record that has ended.
type EndedError struct {
	Kind   Kind
	ID     string
	Status restart.Status
	// Verb is what was asked: pause, resume, cancel, answer.
	Verb string
}

func (e *EndedError) Error() string {
	if e.Kind == KindFleet {
		return fmt.Sprintf("fleet %s has already ended (%s)", short(e.ID), e.Status)
	}
	return fmt.Sprintf("restart %s is already %s; nothing to %s", short(e.ID), e.Status, e.Verb)
}

// CancelingError refuses to pause or resume a record whose cancel is pending (its driver
// has not applied it yet): a cancel is final.
type CancelingError struct {
	Kind   Kind
	ID, By string
	Verb   string
}

func (e *CancelingError) Error() string { return e.Explain("") }

// Explain words the refusal with the cancel to run again as command (what to type; "":
// in words).
func (e *CancelingError) Explain(command string) string {
	if e.Kind == KindFleet {
		return fmt.Sprintf("fleet %s is being canceled; a cancel is final", short(e.ID))
	}
	by := ""
	if e.By != "" {
		by = " by " + e.By
	}
	if command == "" {
		command = "the cancel"
	}
	return fmt.Sprintf("restart %s is being canceled (asked%s), so it cannot be %s; the cancel takes effect when its driver acts, or, if no process drives it, when %s is run again once its lease is free",
		short(e.ID), by, e.Verb+"d", command)
}

// SetIntent applies an operator's intent to c, the Control of the record h heads, by the
// rules every record follows: an ended record is not steered, and a cancel is final (the
// next driver to take the lease applies it, whoever asks otherwise meanwhile).
func SetIntent(h Head, c *restart.Control, intent restart.Intent, by string) error {
	if h.Status.Terminal() {
		return &EndedError{Kind: h.Kind, ID: h.ID, Status: h.Status, Verb: IntentVerb(intent)}
	}
	if c.Intent == restart.IntentCancel && intent != restart.IntentCancel {
		return &CancelingError{Kind: h.Kind, ID: h.ID, By: c.By, Verb: IntentVerb(intent)}
	}
	c.Intent, c.By = intent, by
	return nil
}

// SetAnswer records in c an operator's answer to the question the record h heads waits on.
// An empty answer is refused (restart.ParseAnswer).
func SetAnswer(h Head, c *restart.Control, answer, by string) error {
	if h.Status != restart.StatusWaiting || h.Question == nil {
		return fmt.Errorf("%w: %s %s is %s", ErrNoQuestion, h.Kind, short(h.ID), h.Status)
	}
	if _, err := restart.ParseAnswer(h.Question, answer); err != nil {
		return fmt.Errorf("%w (the question: %s)", err, strings.ReplaceAll(h.Question.Prompt(), "\n", " "))
	}
	a := strings.TrimSpace(answer)
	c.Answer, c.AnswerTo, c.By = a, h.Question.ID, by
	return nil
}

// IntentVerb is the command that sets intent: pause, resume (for run) or cancel.
func IntentVerb(i restart.Intent) string {
	if i == restart.IntentRun {
		return "resume"
	}
	return string(i)
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
