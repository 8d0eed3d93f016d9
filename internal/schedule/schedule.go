// Package schedule keeps scheduled restarts: `nomad-restart run -at <time>` (one occurrence)
// and `run -every <cron>` (Nomad's periodic semantics). A Schedule is stored in Nomad
// Variables next to the restart records, in the job's namespace; the agent starts each due
// occurrence once, as a detached restart whose ID derives from the schedule and the due time,
// so that replicas racing on one occurrence collide on the restart store's Create.
//
// A schedule may hold a fleet instead of a job (`run -jobs '<filter>' -at|-every`): then it
// lives in the fleet's home namespace, and each occurrence selects the jobs anew and starts
// one fleet of them, whose ID derives from the schedule and the due time in the same way.
//
// Everything but the storage (nomad.go) is pure and takes the time as an argument.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
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
	ResultStarted Result = "started" // for a fleet schedule, a fleet (RestartID names it)
	// ResultSkipped: the occurrence was due while the job had a restart in progress (the
	// previous occurrence's fleet still ran), or there was nothing to restart (the
	// selection matched no job); not queued.
	ResultSkipped Result = "skipped"
	// ResultMissed: no agent started the occurrence within the grace after its due time.
	ResultMissed Result = "missed"
	// ResultFailed: planning the restart failed (the job is gone, a deployment runs...), or
	// the fleet's selection could not be made (a bad filter, a denied listing).
	ResultFailed Result = "failed"
)

// DefaultGrace is how late an occurrence may still be started (run's -schedule-grace).
const DefaultGrace = 5 * time.Minute

// HistoryLimit bounds the occurrences a schedule remembers.
const HistoryLimit = 20

// Schedule is a stored request to restart a job, or a fleet of the jobs a selection lists,
// at a time, or at every time a cron expression names.
type Schedule struct {
	ID string
	// Namespace is the variable's namespace: the job's, or a fleet schedule's home (the one
	// namespace its selection names, "default" for "*", as a fleet's record). It is not
	// trusted from the stored content.
	Namespace string `json:"-"`
	// JobID is the job a job schedule restarts; empty for a fleet schedule.
	JobID string
	// Fleet, when set, makes this a fleet schedule. A schedule stored without it (every
	// schedule written before fleet schedules existed) is a job schedule.
	Fleet *FleetTarget `json:",omitempty"`
	// Spec is the restart's options as given to run (planning resolves them anew at each
	// occurrence, against the job as it is then); for a fleet schedule, the options each
	// job's restart starts from.
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
	LastDue    time.Time `json:",omitzero"`
	LastResult Result    `json:",omitempty"`
	// LastRestartID names the restart the last occurrence started (or the one that made
	// it skip); for a fleet schedule, the fleet it started.
	LastRestartID string `json:",omitempty"`
	LastReason    string `json:",omitempty"`
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
	RestartID string // the occurrence's restart ID (OccurrenceID; a fleet schedule's: its fleet ID)
	Holder    string // the agent that claimed it
	Since     time.Time
}

// FleetTarget is what a fleet schedule restarts. The selection is made again at each
// occurrence, with the agent's token (so of the jobs the agent may list then), and fixed in
// the fleet that occurrence starts.
type FleetTarget struct {
	// Selection is -namespace as given ("*": every namespace) and -jobs' filter.
	Selection fleet.Selection
	// Options are the fleet's own options (-max-parallel-jobs, -max-failed-jobs, -order,
	// -busy, -on-error).
	Options fleet.Options
}

// IsFleet reports whether the schedule starts fleets rather than one job's restarts.
func (s *Schedule) IsFleet() bool { return s.Fleet != nil }

// Target names what the schedule restarts, for listings and logs: the job's ID, or
// "fleet: <filter>" for a fleet schedule.
func (s *Schedule) Target() string {
	if s.Fleet != nil {
		return "fleet: " + s.Fleet.Selection.Filter
	}
	return s.JobID
}

// validateTarget refuses a schedule that names no job and no fleet, or both, or a fleet
// whose selection or options its occurrences could never use.
func (s *Schedule) validateTarget() error {
	switch {
	case s.Fleet == nil && s.JobID == "":
		return errors.New("a schedule needs a JobID or a Fleet")
	case s.Fleet == nil:
		return nil
	case s.JobID != "":
		return fmt.Errorf("a schedule names a job (%q) or a fleet, not both", s.JobID)
	case strings.TrimSpace(s.Fleet.Selection.Filter) == "":
		return errors.New("a fleet schedule needs a selection filter (-jobs)")
	}
	return s.Fleet.Options.Validate()
}

// Kind is "at" or "every" (for a fleet schedule as for a job's: IsFleet tells them apart).
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

// OccurrenceID is the restart ID (a fleet schedule's: the fleet ID) of the schedule's
// occurrence due at due: the same for every agent, so that two agents starting one
// occurrence create one restart.
func OccurrenceID(scheduleID string, due time.Time) string {
	name := scheduleID + "@" + due.UTC().Format(time.RFC3339Nano)
	return uuid.NewSHA1(uuid.MustParse(occurrenceSpace), []byte(name)).String()
}
