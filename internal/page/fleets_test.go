package page

import (
	"strings"
	"testing"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// The list shows fleets above the restarts only when there are fleets, and words each
// fleet's jobs and running restarts; without fleets (the local store) it is as before.
func TestFleetListTemplate(t *testing.T) {
	restarts := listLive{Rows: []listRow{{Rec: &restart.Record{ID: "11111111-aaaa", JobID: "web", Status: restart.StatusRunning}}}}
	rec := &fleet.Record{Fleet: fleet.Fleet{ID: "22222222-bbbb", Status: restart.StatusRunning, Jobs: []fleet.Job{
		{Namespace: "default", JobID: "api", Status: fleet.JobSucceeded, RestartID: "r-api"},
		{Namespace: "default", JobID: "web", Status: fleet.JobRunning, RestartID: "r-web"},
		{Namespace: "default", JobID: "db", Status: fleet.JobFailed, RestartID: "r-db", Reason: "alloc 3f2a did not become healthy"},
		{Namespace: "default", JobID: "cache", Status: fleet.JobPending},
	}}, Namespace: "default", Selection: fleet.Selection{Namespace: "default", Filter: `Name matches "^a"`}}
	withFleets := restarts
	withFleets.Fleets = []fleetRow{newFleetRow(rec)}
	tests := []struct {
		name     string
		data     listLive
		want     []string
		wantNone []string
	}{
		{"no fleets", restarts, []string{`id="restarts"`, "/restart/11111111-aaaa"}, []string{`id="fleets"`, "Fleets"}},
		{"a fleet", withFleets, []string{`id="restarts"`, `id="fleets"`, `href="/fleet/22222222-bbbb"`, `data-done="1" data-total="4"`,
			"1/4 done, 1 failed", `class="child" href="/restart/r-web"`, `aria-valuenow="50"`}, []string{`href="/restart/r-api"`}},
		{"a failed listing", listLive{FleetsError: "Permission denied"}, []string{"The fleets could not be listed: Permission denied", "No restarts."}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			html, err := renderString(listPage, "listLive", tt.data)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.want {
				if !strings.Contains(html, want) {
					t.Errorf("the list lacks %q:\n%s", want, html)
				}
			}
			for _, no := range tt.wantNone {
				if strings.Contains(html, no) {
					t.Errorf("the list shows %q:\n%s", no, html)
				}
			}
		})
	}
}

// A fleet in waves is drawn as lanes, one per wave, each with its jobs, its state and
// what its held jobs wait for; a fleet without waves has no lanes.
func TestFleetPageDrawsWavesAsLanes(t *testing.T) {
	jobs := []fleet.Job{
		{Namespace: "default", JobID: "db-proxy", Status: fleet.JobSucceeded, RestartID: "r1", Wave: 1, Evidence: fleet.Evidence{Waits: "2 of 3 allocations healthy"}},
		{Namespace: "default", JobID: "api", Status: fleet.JobPending, Wave: 2, After: []fleet.Ref{{Namespace: "default", JobID: "db-proxy"}}},
		{Namespace: "default", JobID: "web", Status: fleet.JobPending, Wave: 3, After: []fleet.Ref{{Namespace: "default", JobID: "api"}, {Namespace: "mesh", JobID: "gateway"}}},
	}
	rec := &fleet.Record{Fleet: fleet.Fleet{ID: "33333333-cccc", Status: restart.StatusRunning, Jobs: jobs,
		Outside: []fleet.Upstream{{Namespace: "mesh", JobID: "gateway"}}}, Namespace: "default"}
	html, err := renderString(fleetPage, "fleetLive", newFleetRow(rec))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="waves"`, `class="lane" data-wave="1" data-state="done"`, `data-wave="2" data-state="waiting"`,
		`class="st s-succeeded lane-job" data-job="db-proxy"`, "api: waits for db-proxy: 2 of 3 allocations healthy",
		"web: waits for api: its turn (wave 2)", "Outside the fleet, must be healthy: mesh/gateway: not measured yet"} {
		if !strings.Contains(html, want) {
			t.Errorf("the fleet's page lacks %q:\n%s", want, html)
		}
	}
	plain := &fleet.Record{Fleet: fleet.Fleet{ID: "44444444-dddd", Status: restart.StatusRunning, Jobs: jobsWithoutWaves()}, Namespace: "default"}
	html, err = renderString(fleetPage, "fleetLive", newFleetRow(plain))
	if err != nil || strings.Contains(html, `id="waves"`) {
		t.Errorf("a fleet without waves drew lanes (%v):\n%s", err, html)
	}
}

func jobsWithoutWaves() []fleet.Job {
	return []fleet.Job{{Namespace: "default", JobID: "a", Status: fleet.JobPending}}
}
