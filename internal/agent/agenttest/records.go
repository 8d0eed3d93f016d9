package agenttest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/engine"
	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
)

// Detached files a pending restart of job, as `nomad-restart run -detach` does.
func (e *Env) Detached(t testing.TB, ns, job string, spec restart.Spec) *restart.Record {
	t.Helper()
	ctx := Context(t)
	p, err := e.Planner.Plan(ctx, engine.Request{Namespace: ns, Job: job, Spec: spec})
	if err != nil {
		t.Fatalf("planning a restart of %s: %v", job, err)
	}
	if err := e.Planner.Create(ctx, p.Record); err != nil {
		t.Fatalf("creating the restart of %s: %v", job, err)
	}
	return p.Record
}

// WaitRecord watches rec's record in st (blocking queries) until ok holds, and returns it.
func WaitRecord(t testing.TB, st store.Store, rec *restart.Record, what string, ok func(*restart.Record) bool) *restart.Record {
	t.Helper()
	ctx := Context(t)
	cur, err := st.Get(ctx, rec.Namespace, rec.ID)
	last := "unread"
	for err == nil && !ok(cur) {
		last = string(cur.Status)
		cur, err = st.Watch(ctx, rec.Namespace, rec.ID, cur.ModifyIndex)
	}
	if err != nil {
		t.Fatalf("waiting for restart %s of %s to be %s (last status %s): %v", Short(rec.ID), rec.JobID, what, last, err)
	}
	return cur
}

// WaitEnd watches rec's record in st until it is terminal, and returns it.
func WaitEnd(t testing.TB, st store.Store, rec *restart.Record) *restart.Record {
	t.Helper()
	return WaitRecord(t, st, rec, "ended", func(r *restart.Record) bool { return r.Status.Terminal() })
}

// WaitRecord is WaitRecord in the env's store.
func (e *Env) WaitRecord(t testing.TB, rec *restart.Record, what string, ok func(*restart.Record) bool) *restart.Record {
	t.Helper()
	return WaitRecord(t, e.Store, rec, what, ok)
}

// WaitEnd is WaitEnd in the env's store.
func (e *Env) WaitEnd(t testing.TB, rec *restart.Record) *restart.Record {
	t.Helper()
	return WaitEnd(t, e.Store, rec)
}

// WaitSucceeded waits for rec to end, and reports (without stopping the test) a restart
// that did not succeed or whose drivers overlapped; it returns the final record.
func (e *Env) WaitSucceeded(t testing.TB, rec *restart.Record) *restart.Record {
	t.Helper()
	final := e.WaitEnd(t, rec)
	if final.Status != restart.StatusSucceeded {
		t.Errorf("restart of %s ended %s (%s)", rec.JobID, final.Status, final.Reason)
	}
	if bad := DriverOverlaps(final); bad != nil {
		t.Errorf("restart of %s: %v", rec.JobID, bad)
	}
	return final
}

// CheckOnce asserts from Nomad's facts, read with client, that each allocation rec planned
// was restarted once, and no other.
func CheckOnce(t testing.TB, client *api.Client, rec *restart.Record) {
	t.Helper()
	ids := make([]string, len(rec.Allocs))
	for i, a := range rec.Allocs {
		ids[i] = a.ID
	}
	simtest.CheckOnce(t, client, rec.Namespace, rec.JobID, ids, false, Timeout)
}

// CheckOnce is CheckOnce with the env's client.
func (e *Env) CheckOnce(t testing.TB, rec *restart.Record) {
	t.Helper()
	CheckOnce(t, e.Client, rec)
}

// DriverOverlaps returns a description of every moment the record's events show a driver
// taking over while another had not let go: the record of two drivers at once. A driver
// starts the restart or takes it over, and holds it until it detaches.
func DriverOverlaps(rec *restart.Record) []string {
	var bad []string
	holding := false
	for _, ev := range rec.Events {
		switch driverStep(ev) {
		case stepStarted:
			if holding {
				bad = append(bad, fmt.Sprintf("event %d: started while driven", ev.Seq))
			}
			holding = true
		case stepTookOver:
			if holding {
				bad = append(bad, fmt.Sprintf("event %d: %q while another driver held it", ev.Seq, ev.Message))
			}
			holding = true
		case stepDetached:
			holding = false
		}
	}
	return bad
}

// DriverEvents counts the record's events of drivers: starts, takeovers and detaches.
func DriverEvents(rec *restart.Record) (started, tookOver, detached int) {
	for _, ev := range rec.Events {
		switch driverStep(ev) {
		case stepStarted:
			started++
		case stepTookOver:
			tookOver++
		case stepDetached:
			detached++
		}
	}
	return
}

// What an event says of the record's drivers.
const (
	stepNone = iota
	stepStarted
	stepTookOver
	stepDetached
)

func driverStep(ev restart.Event) int {
	switch {
	case ev.Type == restart.EventStarted:
		return stepStarted
	case ev.Type == restart.EventDriver && strings.Contains(ev.Message, "took over"):
		return stepTookOver
	case ev.Type == restart.EventDriver && strings.Contains(ev.Message, "detached"):
		return stepDetached
	}
	return stepNone
}

// Short is an ID shortened as Nomad shows IDs, for the tests' messages.
func Short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// EventLines is the record's events, one a line: its type, then its message.
func EventLines(rec *restart.Record) string {
	var b strings.Builder
	for _, ev := range rec.Events {
		fmt.Fprintf(&b, "%s %s\n", ev.Type, ev.Message)
	}
	return b.String()
}
