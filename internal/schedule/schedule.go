// Package schedule keeps scheduled restarts: `nomad-restart run -at <time>` (one occurrence)
// and `run -every <cron>` (Nomad's periodic semantics). A Schedule is stored in Nomad
// Variables next to the restart records, in the job's namespace; the agent starts each due
// occurrence once, as a detached restart whose ID derives from the schedule and the due time,
// so that replicas racing on one occurrence collide on the restart store's Create.
//
// Everything but the storage (nomad.go) is pure and takes the time as an argument.
package schedule

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// Status of a schedule.
type Status string

const (
	// StatusActive schedules have a next occurrence.
	StatusActive Status = "active"
	// StatusDone schedules have none left: an -at schedule after its occurrence.
	StatusDone Status = "done"
)

// Result of one occurrence.
type Result string

const (
	// ResultStarted: a restart was created for the occurrence (RestartID names it).
	ResultStarted Result = "started"
	// ResultSkipped: the occurrence was due while the job had a restart in progress, or
	// there was nothing to restart; not queued.
	ResultSkipped Result = "skipped"
	// ResultMissed: no agent started the occurrence within the grace after its due time.
	ResultMissed Result = "missed"
	// ResultFailed: planning the restart failed (the job is gone, a deployment runs...).
	ResultFailed Result = "failed"
)

// DefaultGrace is how late an occurrence may still be started (run's -schedule-grace).
const DefaultGrace = 5 * time.Minute

// HistoryLimit bounds the occurrences a schedule remembers.
const HistoryLimit = 20

// Schedule is a stored request to restart a job at a time, or at every time a cron
// expression names.
type Schedule struct {
	ID string
	// Namespace is the variable's (the job's) namespace; it is not trusted from the
	// stored content.
	Namespace string `json:"-"`
	JobID     string
	// Spec is the restart's options as given to run (planning resolves them anew at each
	// occurrence, against the job as it is then).
	Spec restart.Spec
	// SpecTimesGiven keep Spec's planning inputs that its JSON leaves out.
	MinHealthyTimeGiven  bool `json:",omitempty"`
	HealthyDeadlineGiven bool `json:",omitempty"`

	// At is -at's time; Cron and TimeZone are -every's expression and -time-zone.
	At       time.Time `json:",omitzero"`
	Cron     string    `json:",omitempty"`
	TimeZone string    `json:",omitempty"`
	// Grace is how late an occurrence may start; later it is missed.
	Grace time.Duration

	Status Status
	// Next is the next occurrence's due time (zero when done).
	Next time.Time `json:",omitzero"`

	// LastDue is the last occurrence handled (started, skipped or failed), with what
	// happened to it.
	LastDue       time.Time `json:",omitzero"`
	LastResult    Result    `json:",omitempty"`
	LastRestartID string    `json:",omitempty"`
	LastReason    string    `json:",omitempty"`
	// Started, Skipped, Failed and Missed count occurrences by result.
	Started, Skipped, Failed, Missed int
	// LastMissed is the due time of the last missed occurrence, MissedReason why.
	LastMissed   time.Time `json:",omitzero"`
	MissedReason string    `json:",omitempty"`
	// Pending is the occurrence an agent claimed and is starting (see Claim); nil when none.
	Pending *Pending `json:",omitempty"`
	// History holds the latest occurrences, oldest first; missed occurrences handled in
	// one pass are one entry with their Count.
	History []Occurrence `json:",omitempty"`

	CreateTime time.Time
	CreatedBy  string `json:",omitempty"`
	// CreateIndex and ModifyIndex are the variable's Raft indexes (check-and-set).
	CreateIndex uint64 `json:"-"`
	ModifyIndex uint64 `json:"-"`
}

// Occurrence is what happened to one due time (or, for missed ones, to Count of them
// ending with Due).
type Occurrence struct {
	Due       time.Time
	Result    Result
	RestartID string `json:",omitempty"`
	Reason    string `json:",omitempty"`
	Count     int    `json:",omitempty"`
	// Handled is when an agent recorded it, by its clock.
	Handled time.Time
}

// Pending is a claimed occurrence whose restart is being created.
type Pending struct {
	Due       time.Time
	RestartID string // the occurrence's restart ID (OccurrenceID)
	Holder    string // the agent that claimed it
	Since     time.Time
}

// Kind is "at" or "every".
func (s *Schedule) Kind() string {
	if s.Cron != "" {
		return "every"
	}
	return "at"
}

// When describes the schedule for humans: the -at time or the cron expression and zone.
func (s *Schedule) When() string {
	if s.Cron == "" {
		return s.At.UTC().Format(time.RFC3339)
	}
	tz := s.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("%q (%s)", s.Cron, tz)
}

// RestartSpec is the spec to plan an occurrence with.
func (s *Schedule) RestartSpec() restart.Spec {
	spec := s.Spec
	spec.MinHealthyTimeGiven, spec.HealthyDeadlineGiven = s.MinHealthyTimeGiven, s.HealthyDeadlineGiven
	return spec
}

// SetSpec stores spec, keeping its planning inputs.
func (s *Schedule) SetSpec(spec restart.Spec) {
	s.Spec = spec
	s.MinHealthyTimeGiven, s.HealthyDeadlineGiven = spec.MinHealthyTimeGiven, spec.HealthyDeadlineGiven
}

// occurrenceSpace is the UUID namespace of occurrence restart IDs (a constant: changing
// it would let an upgraded agent start an occurrence an old one already started).
const occurrenceSpace = "3b8f6c1e-7a52-4d0e-9f3a-6c2b1d4e5f70"

// OccurrenceID is the restart ID of the schedule's occurrence due at due: the same for
// every agent, so that two agents starting one occurrence create one restart.
func OccurrenceID(scheduleID string, due time.Time) string {
	name := scheduleID + "@" + due.UTC().Format(time.RFC3339Nano)
	return uuid.NewSHA1(uuid.MustParse(occurrenceSpace), []byte(name)).String()
}
