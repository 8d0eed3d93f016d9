package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/internal/store/storetest"
)

// benchUpdate measures Update of a record with n allocations, each update changing one
// allocation and adding an event, as a driver does. written reports the bytes written so
// far (a running total).
func benchUpdate(b *testing.B, s store.Store, n int, written func() int64) {
	ctx := context.Background()
	rec := storetest.NewRecord("default", fmt.Sprintf("bench-%d", n), n)
	if err := s.Create(ctx, rec); err != nil {
		b.Fatal(err)
	}
	base := written()
	last := base
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		a := &rec.Allocs[i%n]
		a.State = restart.AllocDone
		a.Attempts++
		rec.Events = append(rec.Events, restart.Event{Seq: uint64(len(rec.Events) + 1), Type: restart.EventAllocDone, AllocID: a.ID, Message: "allocation restarted"})
		if len(rec.Events) > restart.MaxEvents {
			rec.Events = rec.Events[1:]
		}
		if err := s.Update(ctx, rec); err != nil {
			b.Fatal(err)
		}
		last = written()
	}
	b.StopTimer()
	b.ReportMetric(float64(last-base)/float64(b.N), "bytes/update")
}

func BenchmarkLocalUpdate(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("allocs=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			s, err := store.NewLocal(dir)
			if err != nil {
				b.Fatal(err)
			}
			// The local store rewrites the record's file (and the index file) per update:
			// add up their sizes after each.
			var total int64
			benchUpdate(b, s, n, func() int64 {
				var sum int64
				files, _ := filepath.Glob(filepath.Join(dir, "records", "*", "*.json"))
				for _, f := range append(files, filepath.Join(dir, "index")) {
					if fi, err := os.Stat(f); err == nil {
						sum += fi.Size()
					}
				}
				total += sum
				return total
			})
		})
	}
}
