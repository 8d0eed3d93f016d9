package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/nomadvars"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/localstore"
	"github.com/nomad-restart/nomad-restart/internal/store/nomadstore"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// scenario is one kind of restart the campaign drives.
type scenario struct {
	jobType    string
	count      int
	reschedule bool
	state      string // local or nomad
	batchSize  int
}

func (s scenario) String() string {
	mode := "in-place"
	if s.reschedule {
		mode = "reschedule"
	}
	return fmt.Sprintf("%s/%s/%s", s.jobType, mode, s.state)
}

// runArgs is the driver's command line.
func (s scenario) runArgs(jobID string) []string {
	args := []string{"run", "-yes", "-on-error", "fail", "-state", s.state, "-batch-size", fmt.Sprint(s.batchSize)}
	if s.reschedule {
		args = append(args, "-reschedule")
	}
	return append(args, jobID)
}

// outcome is what one driven restart came to.
type outcome struct {
	kills     int
	processes int
	record    *restart.Record
	elapsed   time.Duration // from the first process's start to the record's end
	created   time.Duration // from the first process's start to its record's creation
	bad       []string      // breaches of exactly-once or of the record
}

// killPlan decides, for each new process, whether and when to SIGKILL it.
type killPlan struct {
	rng      *rand.Rand
	maxKills int
	// created and rest are, from an uninterrupted restart of the same kind, the time from
	// the process's start to the record's creation and from there to the end. Kill
	// instants are drawn uniformly over them, so that kills land before creation,
	// mid-batch, during the wait and between batches alike.
	created, rest time.Duration
	// measure makes drive find out when the record was created even without kills (the
	// calibration run).
	measure bool
	// observe, when set, hears where each kill landed (killPhase).
	observe func(phase string)
}

// next draws the kill of a new process, if any: whether to wait for the record to exist
// first (most kills: the moments before creation are few), and the delay after that. For
// a resumer (rec not nil) the span is its start-up and the work the record has left.
func (k *killPlan) next(killsSoFar int, rec *restart.Record) (delay time.Duration, afterCreate, ok bool) {
	if killsSoFar >= k.maxKills || k.rest <= 0 {
		return 0, false, false
	}
	if rec != nil {
		left := 1.0
		if n := len(rec.Allocs); n > 0 {
			done := 0
			for _, a := range rec.Allocs {
				if a.State == restart.AllocDone {
					done++
				}
			}
			left = float64(n-done) / float64(n)
		}
		span := k.created + time.Duration(float64(k.rest)*left)
		return time.Duration(k.rng.Int64N(int64(span) + 1)), false, true
	}
	if k.rng.Float64() < 0.15 {
		return time.Duration(k.rng.Int64N(int64(k.created+k.rest) + 1)), false, true
	}
	return time.Duration(k.rng.Int64N(int64(k.rest) + 1)), true, true
}

// waitRecord polls the store until the job's record exists or the process ends; it is the
// test's own reading, not the tool's.
func waitRecord(ctx context.Context, st store.Store, jobID string, ch *child) {
	for {
		if rec, err := latestRecord(ctx, st, jobID); err == nil && rec != nil {
			return
		}
		select {
		case <-ch.done:
			return
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// drive registers a fresh job for the scenario, restarts it with nomad-restart processes,
// killing them as plan says and resuming from a new process after each kill, until the
// record is terminal; then checks exactly-once from Nomad's facts.
func drive(ctx context.Context, c *nomadsim.Cluster, client *api.Client, env driverEnv, sc scenario, jobID string, plan *killPlan) (*outcome, error) {
	if err := register(ctx, c, newJob(jobID, sc.jobType, sc.count)); err != nil {
		return nil, err
	}
	pre, err := snapshot(client, jobID)
	if err != nil {
		return nil, err
	}
	var st store.Store
	if sc.state == "nomad" {
		st = nomadstore.NewRestarts(nomadvars.New(client, nomadvars.Options{}), nomadstore.Options{})
	} else {
		if st, err = localstore.New(env.localDir()); err != nil {
			return nil, err
		}
	}
	out := &outcome{}
	begin := time.Now()
	id := ""
	var last *restart.Record
	for {
		if out.processes > 3*plan.maxKills+10 {
			return nil, fmt.Errorf("%s %s: no end after %d processes", sc, jobID, out.processes)
		}
		args := sc.runArgs(jobID)
		if id != "" {
			args = []string{"resume", "-state", sc.state, id}
		}
		ch, err := env.start(args...)
		if err != nil {
			return nil, err
		}
		out.processes++
		killed := false
		if plan.measure && id == "" {
			waitRecord(ctx, st, jobID, ch)
			out.created = time.Since(begin)
		}
		if delay, afterCreate, ok := plan.next(out.kills, last); ok {
			if afterCreate && id == "" {
				waitRecord(ctx, st, jobID, ch)
			}
			select {
			case <-ch.done:
			case <-time.After(delay):
				killed = ch.kill()
			}
		}
		wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
		code, err := ch.wait(wctx)
		cancel()
		if err != nil {
			return nil, err
		}
		rec, err := latestRecord(ctx, st, jobID)
		if err != nil {
			return nil, err
		}
		if killed {
			// A kill after the record ended (the process was printing its summary) tests
			// nothing: it is reported, not counted.
			if rec == nil || !rec.Status.Terminal() {
				out.kills++
			}
			if plan.observe != nil {
				plan.observe(killPhase(rec))
			}
		}
		if rec == nil {
			if !killed {
				return nil, fmt.Errorf("%s %s: `%v` exited %d without a record:\n%s", sc, jobID, args, code, ch.out.String())
			}
			continue // killed before creation: start over with a new run
		}
		id, last = rec.ID, rec
		if rec.Status.Terminal() {
			out.record = rec
			out.elapsed = time.Since(begin)
			// A resume that found the restart ended drove nothing: the killed driver's last
			// write (its end) was in flight when the record was read after the kill, and
			// landed before the resume read it. Any other process must exit 0 on success.
			endedBefore := args[0] == "resume" && strings.Contains(ch.out.String(), "has already ended (succeeded); there is nothing to resume")
			if !killed && code != 0 && rec.Status == restart.StatusSucceeded && !endedBefore {
				out.bad = append(out.bad, fmt.Sprintf("`%v` exited %d after success:\n%s", args, code, ch.out.String()))
			}
			if rec.Status != restart.StatusSucceeded {
				out.bad = append(out.bad, fmt.Sprintf("last process `%v` exited %d:\n%s", args, code, ch.out.String()))
			}
			break
		}
		if !killed {
			return nil, fmt.Errorf("%s %s: `%v` exited %d leaving the restart %s:\n%s", sc, jobID, args, code, rec.Status, ch.out.String())
		}
		if sc.state == "nomad" {
			if _, err := freeLease(client, id); err != nil {
				return nil, err
			}
		}
	}
	out.bad = append(out.bad, checkRecord(out.record, pre)...)
	var bad []string
	if sc.reschedule {
		bad, err = checkRescheduled(client, jobID, pre)
	} else {
		bad, err = checkInPlace(client, jobID, pre, []string{"main"})
	}
	if err != nil {
		return nil, err
	}
	out.bad = append(out.bad, bad...)
	return out, nil
}
