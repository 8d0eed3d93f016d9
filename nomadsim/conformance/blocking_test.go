package conformance

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestBlockingQuery(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("blocking")
		running := tg.runSleepJob(t, id, 2)
		// Until the deployment is done, health updates change the allocations by themselves.
		tg.waitDeploymentSuccessful(t, id)
		path := "/v1/job/" + id + "/allocations"

		first := tg.do(t, "GET", path, tg.token, nil)
		index := headerIndex(t, first)
		for _, h := range []string{"X-Nomad-Index", "X-Nomad-Knownleader", "X-Nomad-Lastcontact"} {
			if first.header.Get(h) == "" {
				t.Errorf("GET %s: no %s header", path, h)
			}
		}

		// Nothing changes: the query waits out its wait and answers the same index. Nomad
		// wakes a job's allocation query on any change of the allocations table, so on a
		// busy agent (other cases run in parallel) a query may wake early with a higher
		// index: then ask again from there, until one quiet wait is seen. The elapsed time is
		// checked only from below (a query may not answer its own index before its wait),
		// which a slow machine cannot break.
		const wait = time.Second
		ctx := tg.ctx(t)
		for quiet := false; !quiet; {
			if ctx.Err() != nil {
				t.Fatalf("no quiet blocking query seen within %v", tg.patience)
			}
			start := time.Now()
			r := tg.do(t, "GET", fmt.Sprintf("%s?index=%d&wait=%s", path, index, wait), tg.token, nil)
			elapsed := time.Since(start)
			got := headerIndex(t, r)
			switch {
			case r.status != 200:
				t.Fatalf("blocking query: %d %q", r.status, r.body)
			case got < index:
				t.Fatalf("blocking query from index %d answered a lower index %d", index, got)
			case got == index:
				quiet = true
				if elapsed < wait {
					t.Errorf("blocking query without a change answered its own index %d after %v, before its wait of %v", index, elapsed, wait)
				}
			default:
				index = got
			}
		}

		// A change during the query wakes it with a higher index; following the index, the
		// stop shows.
		type answer struct {
			r   rawResponse
			err error
		}
		done := make(chan answer, 1)
		from := index
		go func() {
			r, err := tg.request(ctx, "GET", fmt.Sprintf("%s?index=%d&wait=60s", path, from), tg.token, nil)
			done <- answer{r, err}
		}()
		victim := running[0]
		if _, err := tg.api.Allocations().Stop(&api.Allocation{ID: victim.ID}, nil); err != nil {
			t.Fatalf("stop allocation: %v", err)
		}
		var got answer
		select {
		case got = <-done:
		case <-ctx.Done():
			t.Fatalf("blocking query did not answer after a change within %v", tg.patience)
		}
		if got.err != nil {
			t.Fatalf("blocking query: %v", got.err)
		}
		for {
			if got.r.status != 200 || headerIndex(t, got.r) <= from {
				t.Fatalf("blocking query after a change: %d, index %s; want 200 and an index above %d", got.r.status, got.r.header.Get("X-Nomad-Index"), from)
			}
			var allocs []*api.AllocationListStub
			if err := json.Unmarshal(got.r.body, &allocs); err != nil {
				t.Fatalf("decode allocations: %v", err)
			}
			stopped := false
			for _, a := range allocs {
				stopped = stopped || a.ID == victim.ID && a.DesiredStatus == "stop"
			}
			if stopped {
				break
			}
			from = headerIndex(t, got.r)
			r, err := tg.request(ctx, "GET", fmt.Sprintf("%s?index=%d&wait=60s", path, from), tg.token, nil)
			if err != nil {
				t.Fatalf("blocking query waiting for the stop to show: %v", err)
			}
			got.r = r
		}
	})
}

// headerIndex reads X-Nomad-Index, which every blocking read carries and is never 0.
func headerIndex(t *testing.T, r rawResponse) uint64 {
	t.Helper()
	return positiveIndex(t, r, "X-Nomad-Index")
}

// positiveIndex reads the index header, failing the test unless it is a positive integer.
func positiveIndex(t *testing.T, r rawResponse, header string) uint64 {
	t.Helper()
	s := r.header.Get(header)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("%s %q: want a positive integer (status %d, body %.200s)", header, s, r.status, r.body)
	}
	return n
}
