package nomadstore

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func bigRecord(n int) *restart.Record {
	rec := &restart.Record{ID: "0f0e0d0c-0000-4000-8000-000000000001", Namespace: "default", JobID: "web", Status: restart.StatusRunning}
	for i := range n {
		rec.Allocs = append(rec.Allocs, restart.AllocProgress{
			ID: fmt.Sprintf("%08x-1111-4222-8333-%012x", i*7919, i*104729), Name: fmt.Sprintf("web.web[%d]", i),
			Group: "web", NodeID: fmt.Sprintf("%08x-aaaa-4bbb-8ccc-%012x", i%97, i%89), Batch: i + 1, State: restart.AllocPending,
		})
	}
	return rec
}

// decodeAll reverses encodeRecord without Nomad in between.
func decodeAll(t *testing.T, e *encodedRecord) *restart.Record {
	t.Helper()
	for _, c := range e.chunks {
		c.name = c.freshName()
	}
	items, err := headItems(e)
	if err != nil {
		t.Fatal(err)
	}
	rec, names, err := decodeHead(items)
	if err != nil {
		t.Fatal(err)
	}
	raws := make([][]byte, len(names))
	for i, c := range e.chunks {
		data, err := pack(c.raw)
		if err != nil {
			t.Fatal(err)
		}
		if itemsSize(map[string]string{itemData: data}) > maxVariableSize {
			t.Fatalf("chunk %d is %d bytes packed, over Nomad's limit", i, len(data))
		}
		if raws[i], err = unpack(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := assemble(rec, names, raws); err != nil {
		t.Fatal(err)
	}
	return rec
}

func TestCodecRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name       string
		allocs     int
		hugeEvents bool
		wantChunks bool
	}{
		{"small record stays in the head", 10, false, false},
		{"3,000 allocations", 3000, false, true},
		{"events too large for the head move out too", 2000, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := bigRecord(tc.allocs)
			if tc.hugeEvents {
				for i := range restart.MaxEvents {
					rec.Events = append(rec.Events, restart.Event{Seq: uint64(i + 1), Type: restart.EventWarning, Message: strings.Repeat("x", 400)})
				}
			}
			e, err := encodeRecord(rec, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(e.chunks) > 0; got != tc.wantChunks {
				t.Fatalf("chunked = %v, want %v", got, tc.wantChunks)
			}
			if tc.hugeEvents && !strings.HasPrefix(e.chunks[len(e.chunks)-1].key(), "e") {
				t.Fatalf("events were not moved out of the head")
			}
			got := decodeAll(t, e)
			w, _ := json.Marshal(rec)
			g, _ := json.Marshal(got)
			if string(w) != string(g) {
				t.Fatalf("round trip changed the record (%d vs %d bytes)", len(w), len(g))
			}
		})
	}
}

// One changed allocation changes one chunk: the rest keep their content hash and so are
// reused rather than written again.
func TestCodecStableChunks(t *testing.T) {
	rec := bigRecord(3000)
	a, err := encodeRecord(rec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec.Allocs[1234].State = restart.AllocDone
	rec.Allocs[1234].Error = "a long error message that grows the allocation"
	b, err := encodeRecord(rec, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.chunks) != len(b.chunks) {
		t.Fatalf("chunk count changed: %d -> %d", len(a.chunks), len(b.chunks))
	}
	changed := 0
	for i := range a.chunks {
		if a.chunks[i].key() != b.chunks[i].key() {
			changed++
		}
	}
	if changed != 1 {
		t.Fatalf("%d chunks changed for one allocation, want 1", changed)
	}
}

// With a memo, each update encodes only the ranges it changed, and the result is the same
// as encoding everything afresh.
func TestCodecMemo(t *testing.T) {
	memo := &allocMemo{}
	rec := bigRecord(3000)
	for step, change := range []func(r *restart.Record){
		func(r *restart.Record) {},
		func(r *restart.Record) { r.Allocs[5].State = restart.AllocDone },
		func(r *restart.Record) {
			r.Allocs[2999].Before = &restart.Observation{Restarts: map[string]uint64{"web": 2}, AllocModifyIndex: 9}
		},
		func(r *restart.Record) { r.Allocs[2999].Before.Restarts = map[string]uint64{"web": 3} }, // a new map: a new fact
		func(r *restart.Record) { r.Allocs = r.Allocs[:2500] },                                   // ranges shorter than before
	} {
		change(rec)
		withMemo, err := encodeRecord(rec, nil, memo)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := encodeRecord(rec, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(withMemo.chunks) != len(fresh.chunks) {
			t.Fatalf("step %d: %d chunks with the memo, %d without", step, len(withMemo.chunks), len(fresh.chunks))
		}
		for i := range fresh.chunks {
			if withMemo.chunks[i].key() != fresh.chunks[i].key() || string(withMemo.chunks[i].raw) != string(fresh.chunks[i].raw) {
				t.Fatalf("step %d: chunk %d differs with the memo", step, i)
			}
		}
	}
}

// BenchmarkEncodeRecordUpdate is one driver write of a 10,000-allocation record after one
// batch of 100 changed, with the memo (as the store writes) and without (every range
// encoded again).
func BenchmarkEncodeRecordUpdate(b *testing.B) {
	for _, useMemo := range []bool{false, true} {
		b.Run(fmt.Sprintf("memo=%v", useMemo), func(b *testing.B) {
			rec := bigRecord(10000)
			var memo *allocMemo
			if useMemo {
				memo = &allocMemo{}
			}
			if _, err := encodeRecord(rec, nil, memo); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for n := 0; b.Loop(); n++ {
				start := (n * 100) % 10000
				for i := start; i < start+100; i++ {
					rec.Allocs[i].Attempts++
				}
				if _, err := encodeRecord(rec, nil, memo); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A chunk that inflates past what any writer makes (gzip inflates up to a thousandfold, so
// a 64 KiB variable could become 64 MiB) is refused instead of read whole into memory;
// one just under the bound still unpacks.
func TestUnpackBoundsWhatAChunkInflatesTo(t *testing.T) {
	for _, tc := range []struct {
		size int
		ok   bool
	}{
		{maxUnpacked, true},
		{maxUnpacked + 1, false},
	} {
		packed, err := pack(make([]byte, tc.size))
		if err != nil {
			t.Fatal(err)
		}
		if len(packed) > maxVariableSize {
			t.Fatalf("%d zero bytes packed to %d, more than a variable holds: the test no longer shows a crafted variable", tc.size, len(packed))
		}
		raw, err := unpack(packed)
		switch {
		case tc.ok && (err != nil || len(raw) != tc.size):
			t.Errorf("%d bytes: unpacked %d, %v; want them all", tc.size, len(raw), err)
		case !tc.ok && (err == nil || !strings.Contains(err.Error(), "more than 16 MiB")):
			t.Errorf("%d bytes: %v, want a refusal naming the bound", tc.size, err)
		}
	}
}
