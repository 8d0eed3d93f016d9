package notify

import (
	"fmt"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// BenchmarkPending is what the outbox computes on each kick of a record: a full event log
// (restart.MaxEvents) of a 1,000-allocation restart, three sinks, one of them subscribed
// by the job's meta, half the log settled already.
func BenchmarkPending(b *testing.B) {
	r := &restart.Record{ID: "r1", Namespace: "default", JobID: "web", Status: restart.StatusRunning, Batches: 100}
	for i := range 1000 {
		r.Allocs = append(r.Allocs, restart.AllocProgress{ID: fmt.Sprint(i), State: restart.AllocDone})
	}
	types := []restart.EventType{restart.EventAllocRestart, restart.EventAllocDone, restart.EventBatchFinished, restart.EventQuestion, restart.EventAnswer}
	for i := range restart.MaxEvents {
		r.AppendEvent(restart.Event{Type: types[i%len(types)], Message: "Proceed with the next batch? [Y/n]"})
	}
	r.Notify = &restart.Notifications{Through: map[string]uint64{"ops": 100, "chat": 100, "team": 100}}
	cfg := Config{Sinks: []string{"ops", "chat", "team"}, On: Subscriptions{"team": {}}}
	meta := map[string]string{MetaPrefix + "question": "team"}
	b.ReportAllocs()
	for b.Loop() {
		if len(cfg.Pending(RestartSubject(r), meta)) == 0 {
			b.Fatal("nothing pending")
		}
	}
}
