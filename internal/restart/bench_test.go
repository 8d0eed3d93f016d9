package restart

import (
	"fmt"
	"testing"
	"time"
)

func bigJob(n int) ([]*Alloc, map[uint64]*Job) {
	job := &Job{Version: 1, Groups: []Group{{Name: "web", Tasks: []string{"main", "side"}}}}
	allocs := make([]*Alloc, n)
	for i := range allocs {
		allocs[i] = &Alloc{ID: fmt.Sprintf("%036d", i), Group: "web", JobVersion: 1, DesiredStatus: DesiredRun, ClientStatus: ClientRunning,
			CreateIndex: uint64(i), Tasks: map[string]TaskState{"main": {State: TaskRunning}}}
	}
	return allocs, map[uint64]*Job{1: job}
}

func BenchmarkSelect10k(b *testing.B) {
	allocs, versions := bigJob(10000)
	b.ReportAllocs()
	for b.Loop() {
		kept, _ := Select(allocs, versions, Selection{Tasks: []string{"side"}})
		if len(kept) != 10000 {
			b.Fatal(len(kept))
		}
	}
}

func BenchmarkProgress10k(b *testing.B) {
	r := &Record{Status: StatusRunning, StartTime: time.Unix(0, 0), Allocs: make([]AllocProgress, 10000)}
	r.Batches = AssignBatches(r.Allocs, []BatchSize{{N: 10, Percent: true}})
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Progress(time.Unix(60, 0))
	}
}

func BenchmarkAppendEvent(b *testing.B) {
	r := &Record{}
	b.ReportAllocs()
	for b.Loop() {
		r.AppendEvent(Event{Message: "x"})
	}
}
