package nomadsim

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

func TestFaultsAndAccounting(t *testing.T) {
	c, cl := startCluster(t, Options{Seed: 7})
	if _, _, err := cl.Jobs().List(nil); err != nil {
		t.Fatal(err)
	}
	c.ResetStats()
	remove := c.SetFault(Fault{Method: "GET", Path: "/v1/jobs", Status: 503, Body: "overloaded"})
	_, _, err := cl.Jobs().List(nil)
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "overloaded") {
		t.Errorf("fault not applied: %v", err)
	}
	remove()
	if _, _, err := cl.Jobs().List(nil); err != nil {
		t.Errorf("fault not removed: %v", err)
	}
	if _, _, err := cl.Jobs().Register(serviceJob("web", 1), nil); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	if got := st.Get("GET", "/v1/jobs"); got.Requests != 2 || got.ResponseBytes == 0 {
		t.Errorf("GET /v1/jobs stats %+v", got)
	}
	if st.Mutations != 1 || st.Get("PUT", "/v1/jobs").Requests != 1 {
		t.Errorf("mutations %d, register %+v (%v)", st.Mutations, st.Get("PUT", "/v1/jobs"), st.Keys())
	}
	c.ResetStats()
	if s := c.Stats(); s.Requests != 0 || s.Mutations != 0 {
		t.Errorf("after reset %+v", s)
	}

	// Dropped connections.
	remove = c.SetFault(Fault{Path: "/v1/job/", Drop: true})
	if _, _, err := cl.Jobs().Info("web", nil); err == nil {
		t.Errorf("dropped connection answered")
	}
	remove()

	// An error rate applies to about that share of requests, deterministically.
	remove = c.SetFault(Fault{Path: "/v1/status/leader", ErrorRate: 0.5, Status: 500})
	fails := 0
	for i := 0; i < 200; i++ {
		if _, err := cl.Status().Leader(); err != nil {
			fails++
		}
	}
	remove()
	if fails < 60 || fails > 140 {
		t.Errorf("error rate 0.5 failed %d of 200", fails)
	}
}

func TestLoseLeader(t *testing.T) {
	c, cl := startCluster(t, Options{TimeScale: 1})
	c.LoseLeader(time.Hour)
	resp, err := http.Get(c.Addr() + "/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 || resp.Header.Get("X-Nomad-KnownLeader") != "false" {
		t.Errorf("leaderless read: %d %v", resp.StatusCode, resp.Header)
	}
	if _, _, err := cl.Jobs().Register(serviceJob("web", 1), nil); err == nil || !strings.Contains(err.Error(), "No cluster leader") {
		t.Errorf("leaderless write: %v", err)
	}
	c.LoseLeader(0)
	if _, _, err := cl.Jobs().List(nil); err != nil {
		t.Errorf("leader back: %v", err)
	}
}

func TestEventStream(t *testing.T) {
	c, cl := startCluster(t, Options{})
	a := runningAlloc(t, c, cl, serviceJob("web", 1))
	resp, err := http.Get(c.Addr() + "/v1/event/stream?topic=Allocation:web")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	go func() {
		time.Sleep(20 * time.Millisecond)
		_ = cl.Allocations().Restart(a, "", nil)
	}()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	sawRestart := false
	deadline := time.Now().Add(10 * time.Second)
	for !sawRestart && time.Now().Before(deadline) && sc.Scan() {
		var frame struct {
			Index  uint64
			Events []api.Event
		}
		if err := json.Unmarshal(sc.Bytes(), &frame); err != nil {
			t.Fatalf("frame %q: %v", sc.Text(), err)
		}
		for _, e := range frame.Events {
			if e.Topic != "Allocation" || e.FilterKeys[0] != "web" {
				t.Errorf("unexpected event %s %v", e.Topic, e.FilterKeys)
			}
			al, err := e.Allocation()
			if err != nil || al == nil {
				t.Fatalf("payload: %v", err)
			}
			if al.Job != nil {
				t.Errorf("event payload carries the job")
			}
			if ts := al.TaskStates["main"]; ts != nil && ts.Restarts == 1 {
				sawRestart = true
			}
		}
	}
	if !sawRestart {
		t.Errorf("no event showed the restart")
	}
}

func TestACLs(t *testing.T) {
	c, _ := startCluster(t, Options{ACLs: true})
	anon, _ := c.APIClient("")
	if _, _, err := anon.Jobs().List(nil); err == nil || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("anonymous list: %v", err)
	}
	mgmt, _ := c.APIClient(c.BootstrapToken())
	if _, _, err := mgmt.Jobs().Register(serviceJob("web", 1), nil); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitJobRunning(ctxT(t), "default", "web"); err != nil {
		t.Fatal(err)
	}
	secret, err := c.CreateToken("reader", map[string]string{"read": `namespace "default" { policy = "read" }`})
	if err != nil {
		t.Fatal(err)
	}
	reader, _ := c.APIClient(secret)
	stubs, _, err := reader.Jobs().Allocations("web", false, nil)
	if err != nil || len(stubs) != 1 {
		t.Fatalf("reader allocations: %v", err)
	}
	a, _, _ := reader.Allocations().Info(stubs[0].ID, nil)
	if err := reader.Allocations().Restart(a, "", nil); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("reader restart: %v", err)
	}
}
