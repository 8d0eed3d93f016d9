package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// recordedFrames returns the event stream frames recorded from a real agent during
// `nomad job restart -batch-size 3 web`.
func recordedFrames(t *testing.T) []json.RawMessage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "nomad-http", "57-event-stream-allocation-restart.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ex struct {
		Response struct {
			Frames []json.RawMessage `json:"frames"`
		} `json:"response"`
	}
	if err := json.Unmarshal(raw, &ex); err != nil {
		t.Fatal(err)
	}
	return ex.Response.Frames
}

func TestStreamJobAllocationsRecorded(t *testing.T) {
	frames := recordedFrames(t)
	var connections atomic.Int32
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/event/stream":
			w.Header().Set("Content-Type", "application/json")
			if connections.Add(1) > 1 {
				// A reconnection: nothing new, hold until the client leaves.
				<-r.Context().Done()
				return
			}
			for _, f := range frames {
				_, _ = w.Write(append(f, '\n'))
			}
			// The first connection then breaks, as a network cut would.
		case "/v1/job/web/allocations":
			jsonAt(w, 27, []*api.AllocationListStub{}) // the list knows nothing newer
		default:
			plain(w, 404, "Invalid URL")
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	updates := n.StreamJobAllocations(ctx, "default", "web", 27)

	// Expected: each allocation's state once per ModifyIndex.
	type key struct {
		id    string
		index uint64
	}
	got := map[key]string{}
	var replacementSeen, oldComplete bool
	for len(got) < 12 {
		select {
		case u, ok := <-updates:
			if !ok {
				t.Fatalf("stream closed after %d updates", len(got))
			}
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			k := key{u.Alloc.ID, u.Alloc.ModifyIndex}
			if _, dup := got[k]; dup {
				t.Fatalf("update %v sent twice", k)
			}
			got[k] = u.Alloc.ClientStatus
			if u.Index != u.Alloc.ModifyIndex {
				t.Fatalf("update index %d for modify index %d", u.Index, u.Alloc.ModifyIndex)
			}
			if u.Alloc.ID[:8] == "d0df02ac" {
				replacementSeen = true
			}
			if u.Alloc.ID[:8] == "531bd8b8" && u.Alloc.ClientStatus == "complete" {
				oldComplete = u.Alloc.Tasks["server"].State == "dead" && u.Alloc.Tasks["server"].Restarts == 2
			}
		case <-ctx.Done():
			t.Fatalf("only %d updates: %v", len(got), got)
		}
	}
	// 3 allocations at 28, 29, 36, 37 (12), then 38, 39 (x2), 44 (x2): the first 12
	// states are the restarts; read on for the stop and the replacement.
	for !replacementSeen || !oldComplete {
		select {
		case u := <-updates:
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			if u.Alloc.ID[:8] == "d0df02ac" {
				replacementSeen = true
			}
			if u.Alloc.ID[:8] == "531bd8b8" && u.Alloc.ClientStatus == "complete" {
				oldComplete = true
			}
		case <-ctx.Done():
			t.Fatal("the replacement or the stopped allocation never came")
		}
	}
	// After the cut, the stream reconnects from the last index it saw.
	deadline := time.After(5 * time.Second)
	for connections.Load() < 2 {
		select {
		case <-deadline:
			t.Fatal("no reconnection")
		case <-time.After(5 * time.Millisecond):
		}
	}
	var lastStream *http.Request
	for _, r := range rec.seen() {
		if r.URL.Path == "/v1/event/stream" {
			lastStream = r
		}
	}
	q := lastStream.URL.Query()
	if q.Get("index") != "44" || q.Get("topic") != "Allocation:web" || q.Get("namespace") != "default" {
		t.Fatalf("reconnected with %v", q)
	}
	cancel()
	for range updates {
	}
}

func TestStreamJobAllocationsResyncsFromTheList(t *testing.T) {
	var stubs []*api.AllocationListStub
	loadExchange(t, "11-job-allocations").decodeBody(t, &stubs)
	n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/event/stream":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			jsonAt(w, 28, stubs)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The three allocations changed at 26, after index 25 the caller knew.
	updates := n.StreamJobAllocations(ctx, "default", "sleepy", 25)
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case u := <-updates:
			if u.Err != nil || u.Alloc.ModifyIndex != 26 || u.Index != 26 {
				t.Fatalf("got %+v", u)
			}
			seen[u.Alloc.ID] = true
		case <-ctx.Done():
			t.Fatalf("resync sent %d of 3 allocations", len(seen))
		}
	}
	cancel()
	for range updates {
	}
}

func TestStreamJobAllocationsStopsOnDenial(t *testing.T) {
	n, _ := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { plain(w, 403, "Permission denied") })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	updates := n.StreamJobAllocations(ctx, "default", "web", 0)
	u, ok := <-updates
	if !ok || u.Err == nil || !errors.Is(u.Err, ErrPermissionDenied) {
		t.Fatalf("got %+v", u)
	}
	if _, ok := <-updates; ok {
		t.Fatal("stream not closed after a permanent error")
	}
}

// TestEventAllocMatchesTheAPIDecoding decodes every allocation of the frames recorded from a
// real agent both ways: as the api client does (api.Event.Allocation, then convertAlloc)
// and as the stream does (eventAlloc), and wants the same allocation from each.
func TestEventAllocMatchesTheAPIDecoding(t *testing.T) {
	compared := 0
	for _, raw := range recordedFrames(t) {
		var official api.Events
		if err := json.Unmarshal(raw, &official); err != nil {
			t.Fatal(err)
		}
		var lean allocFrame
		if err := json.Unmarshal(raw, &lean); err != nil {
			t.Fatal(err)
		}
		if len(official.Events) != len(lean.Events) {
			t.Fatalf("%d events decoded by the api, %d by the stream", len(official.Events), len(lean.Events))
		}
		for i := range official.Events {
			ev := &official.Events[i]
			if ev.Topic != api.TopicAllocation {
				continue
			}
			a, err := ev.Allocation()
			if err != nil {
				t.Fatal(err)
			}
			want := convertAlloc(a)
			got := lean.Events[i].Payload.Allocation.convert()
			// The api's path goes through float64 (mapstructure from a map): task event
			// times lose up to a few hundred nanoseconds there, and are exact here.
			for name, ts := range want.Tasks {
				for k := range ts.Events {
					if g := got.Tasks[name]; k < len(g.Events) && g.Events[k].Time.Sub(ts.Events[k].Time).Abs() < time.Microsecond {
						ts.Events[k].Time = g.Events[k].Time
					}
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("allocation %s:\nstream %+v\napi    %+v", a.ID, got, want)
			}
			compared++
		}
	}
	if compared < 10 {
		t.Fatalf("only %d allocations compared", compared)
	}
}
