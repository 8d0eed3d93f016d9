package nomadsim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// countAllocEvents counts the Allocation events of the job from index on that the stream
// delivers before it stays quiet for the given real time (it replays its buffer at once).
func countAllocEvents(t *testing.T, c *Cluster, job string, from uint64, quiet time.Duration) map[string]int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctxT(t), "GET", fmt.Sprintf("%s/v1/event/stream?topic=Allocation:%s&index=%d", c.Addr(), job, from), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan []byte)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			lines <- append([]byte{}, sc.Bytes()...)
		}
		close(lines)
	}()
	counts := map[string]int{}
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				return counts
			}
			var f struct{ Events []api.Event }
			if err := json.Unmarshal(l, &f); err != nil {
				t.Fatal(err)
			}
			for _, e := range f.Events {
				counts[e.Key]++
			}
		case <-time.After(quiet):
			return counts
		}
	}
}

// TestEventsPerRestart: Nomad emitted about 4 allocation events per in-place restart and
// about 8 per stop and replacement (DESIGN facts); the simulation stays in that range.
func TestEventsPerRestart(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 20})
	a := runningAlloc(t, c, cl, serviceJob("web", 1))
	waitLatestDeployment(t, cl, "web", "deployment done", deploymentIs("successful"))
	from := c.sim.Index.Current() + 1
	if err := cl.Allocations().Restart(a, "", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "running again", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		return x.ClientStatus == "running" && x.TaskStates["main"].Restarts == 1
	})
	// The events are in the stream's buffer by now: it replays them from the index.
	n := countAllocEvents(t, c, "web", from, 300*time.Millisecond)[a.ID]
	if n < 2 || n > 6 {
		t.Errorf("%d events for an in-place restart, want about 4", n)
	}
	from = c.sim.Index.Current() + 1
	if _, err := cl.Allocations().Stop(a, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replacement running", func() bool {
		x, _, _ := cl.Allocations().Info(a.ID, nil)
		if x.ClientStatus != "complete" || x.NextAllocation == "" {
			return false
		}
		n, _, _ := cl.Allocations().Info(x.NextAllocation, nil)
		return n.ClientStatus == "running"
	})
	total := 0
	for _, k := range countAllocEvents(t, c, "web", from, 300*time.Millisecond) {
		total += k
	}
	if total < 5 || total > 12 {
		t.Errorf("%d events for a stop and replacement, want about 8", total)
	}
	t.Logf("in place %d, stop and replace %d", n, total)
}
