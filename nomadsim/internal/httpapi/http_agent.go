package httpapi

import (
	"net/http"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/sim"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *server) serverAddr() string { return "127.0.0.1:4647" }

func (c *server) handleStatusLeader(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	simhttp.WriteJSON(w, c.serverAddr())
}

func (c *server) handleStatusPeers(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	simhttp.WriteJSON(w, []string{c.serverAddr()})
}

func (c *server) handleRegions(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	simhttp.WriteJSON(w, []string{c.Options.Region})
}

func (c *server) handleAgentHealth(w http.ResponseWriter, r *http.Request) {
	simhttp.WriteJSON(w, map[string]any{
		"client": map[string]any{"ok": true, "message": "ok"},
		"server": map[string]any{"ok": true, "message": "ok"},
	})
}

func (c *server) handleAgentSelf(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	if err := c.authorizeLevel(r, "agent", "read"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	dc := c.Options.Datacenters[0]
	simhttp.WriteJSON(w, map[string]any{
		"config": map[string]any{
			"Region": c.Options.Region, "Datacenter": dc, "NodeName": "nomadsim-server-1", "Version": map[string]any{"Version": sim.NomadVersion, "VersionPrerelease": "", "Revision": "nomadsim"},
			"ACL": map[string]any{"Enabled": c.Options.ACLs},
			// JobMaxCount as the agent's configuration holds it: null unless set.
			"Server": map[string]any{"Enabled": true, "JobMaxCount": c.Options.JobMaxCount}, "Client": map[string]any{"Enabled": true},
		},
		"member": c.member(),
		"stats":  map[string]any{"nomad": map[string]string{"leader": "true", "known_regions": "1", "server": "true"}},
	})
}

func (c *server) member() *api.AgentMember {
	return &api.AgentMember{
		Name: "nomadsim-server-1." + c.Options.Region, Addr: "127.0.0.1", Port: 4648, Status: "alive",
		Tags:        map[string]string{"region": c.Options.Region, "dc": c.Options.Datacenters[0], "role": "nomad", "build": sim.NomadVersion, "raft_vsn": "3", "rpc_addr": "127.0.0.1", "port": "4647"},
		ProtocolMin: 1, ProtocolMax: 5, ProtocolCur: 2, DelegateMin: 2, DelegateMax: 5, DelegateCur: 4,
	}
}

func (c *server) handleAgentMembers(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	if err := c.authorizeLevel(r, "node", "read"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	simhttp.WriteJSON(w, &api.ServerMembers{ServerName: "nomadsim-server-1", ServerRegion: c.Options.Region, ServerDC: c.Options.Datacenters[0], Members: []*api.AgentMember{c.member()}})
}
