package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/cluster"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/internal/store"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// sseEvent is one server-sent event as a browser's EventSource would dispatch it.
type sseEvent struct{ name, data string }

// streamEvents opens the page's stream at url and delivers its events until ctx ends.
func streamEvents(t *testing.T, ctx context.Context, url string) <-chan sseEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("opening the stream %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream %s answered %s", url, resp.Status)
	}
	out := make(chan sseEvent)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 4<<20)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.data != "" && !send(ctx, out, ev) {
					return
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}

// waitStale reads events until a "stale" one for which ok holds, and returns it.
func waitStale(t *testing.T, ctx context.Context, events <-chan sseEvent, what string, ok func(staleState) bool) staleState {
	t.Helper()
	for {
		select {
		case ev, open := <-events:
			if !open {
				t.Fatalf("waiting for %s: the stream ended", what)
			}
			if ev.name != "stale" {
				continue
			}
			var st staleState
			if err := json.Unmarshal([]byte(ev.data), &st); err != nil {
				t.Fatalf("stale event %q: %v", ev.data, err)
			}
			if ok(st) {
				return st
			}
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, ctx.Err())
		}
	}
}

// While the agent cannot reach Nomad, its page's stream, which still works, says since when
// and why (a "stale" event, for the page's banner); the first listing that works again
// clears it.
func TestStreamSaysWhileNomadCannotBeReached(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nomadsim.Options{})
	// Short blocking queries, so that the agent's watch meets the outage soon.
	a := e.newAgent(t, "agent-1", e.sim.BootstrapToken(), func(c *Config) { c.ListWait = 200 * time.Millisecond })
	start(t, a)
	srv := serve(t, a, nil)
	ctx := testContext(t)
	simtest.WaitFor(t, ctx, "the agent's first listing", a.Ready)
	events := streamEvents(t, ctx, srv.URL+"/events")
	for ev := range events {
		if ev.name == "stale" {
			t.Fatalf("a stale event %q while Nomad answers", ev.data)
		}
		if ev.name == "update" {
			break
		}
	}

	before := time.Now().Add(-time.Second)
	reachable := e.sim.SetFault(nomadsim.Fault{Path: "/v1/", Drop: true}) // every connection dropped
	st := waitStale(t, ctx, events, "the stream to say Nomad cannot be read", func(s staleState) bool { return s.Since != "" })
	since, err := time.Parse(time.RFC3339, st.Since)
	if err != nil || since.Before(before.Truncate(time.Second)) || st.Error == "" {
		t.Errorf("stale event = %+v (%v), want the time of the first failure and its error", st, err)
	}
	get(t, srv.URL+"/", http.StatusOK) // the page is still served, from what the agent read last

	reachable()
	waitStale(t, ctx, events, "the stream to say Nomad is read again", func(s staleState) bool { return s == staleState{} })
}

// An agent that never reached Nomad (nothing listens at its address) says so on a stream
// opened meanwhile, before anything else.
func TestStreamSaysWhenNomadWasNeverReached(t *testing.T) {
	t.Parallel()
	conf := api.DefaultConfig()
	conf.Address = "http://" + simtest.ClosedAddr(t)
	client, err := api.NewClient(conf)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Cluster: cluster.NewNomad(client), Store: store.NewNomad(client, store.NomadOptions{}), Client: client})
	if err != nil {
		t.Fatal(err)
	}
	start(t, a)
	srv := serve(t, a, nil)
	ctx := testContext(t)
	simtest.WaitFor(t, ctx, "the agent's first listing to fail", func() bool { return a.page.stale().Since != "" })
	ev := <-streamEvents(t, ctx, srv.URL+"/events")
	var st staleState
	if err := json.Unmarshal([]byte(ev.data), &st); ev.name != "stale" || err != nil || !strings.Contains(st.Error, "refused") {
		t.Errorf("first event = %+v (%v), want a stale event naming the refused connection", ev, err)
	}
}
