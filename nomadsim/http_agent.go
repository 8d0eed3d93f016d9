package nomadsim

import (
	"net/http"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

func (c *Cluster) serverAddr() string { return "127.0.0.1:4647" }

func (c *Cluster) handleStatusLeader(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	simhttp.WriteJSON(w, c.serverAddr())
}

func (c *Cluster) handleStatusPeers(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	simhttp.WriteJSON(w, []string{c.serverAddr()})
}

func (c *Cluster) handleRegions(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	simhttp.WriteJSON(w, []string{c.opts.Region})
}

func (c *Cluster) handleAgentHealth(w http.ResponseWriter, r *http.Request) {
	simhttp.WriteJSON(w, map[string]any{
		"client": map[string]any{"ok": true, "message": "ok"},
		"server": map[string]any{"ok": true, "message": "ok"},
	})
}

func (c *Cluster) handleAgentSelf(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	if err := c.authorizeLevel(r, "agent", "read"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	dc := c.opts.Datacenters[0]
	simhttp.WriteJSON(w, map[string]any{
		"config": map[string]any{
			"Region": c.opts.Region, "Datacenter": dc, "NodeName": "nomadsim-server-1", "Version": map[string]any{"Version": simVersion, "VersionPrerelease": "", "Revision": "nomadsim"},
			"ACL": map[string]any{"Enabled": c.opts.ACLs},
			// JobMaxCount as the agent's configuration holds it: null unless set.
			"Server": map[string]any{"Enabled": true, "JobMaxCount": c.opts.JobMaxCount}, "Client": map[string]any{"Enabled": true},
		},
		"member": c.member(),
		"stats":  map[string]any{"nomad": map[string]string{"leader": "true", "known_regions": "1", "server": "true"}},
	})
}

func (c *Cluster) member() *api.AgentMember {
	return &api.AgentMember{
		Name: "nomadsim-server-1." + c.opts.Region, Addr: "127.0.0.1", Port: 4648, Status: "alive",
		Tags:        map[string]string{"region": c.opts.Region, "dc": c.opts.Datacenters[0], "role": "nomad", "build": simVersion, "raft_vsn": "3", "rpc_addr": "127.0.0.1", "port": "4647"},
		ProtocolMin: 1, ProtocolMax: 5, ProtocolCur: 2, DelegateMin: 2, DelegateMax: 5, DelegateCur: 4,
	}
}

func (c *Cluster) handleAgentMembers(w http.ResponseWriter, r *http.Request) {
	if !methodIs(w, r, http.MethodGet) {
		return
	}
	if err := c.authorizeLevel(r, "node", "read"); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	simhttp.WriteJSON(w, &api.ServerMembers{ServerName: "nomadsim-server-1", ServerRegion: c.opts.Region, ServerDC: c.opts.Datacenters[0], Members: []*api.AgentMember{c.member()}})
}
