package consul

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"strings"
	"time"
)

// registerRequest is the part of Consul's structs.RegisterRequest (what consul/api's
// CatalogRegistration encodes) that the sim keeps; other fields are read and ignored.
type registerRequest struct {
	Datacenter      string
	ID              string
	Node            string
	Address         string
	TaggedAddresses map[string]string
	NodeMeta        map[string]string
	Service         *registerService
	Check           *registerCheck
	Checks          []*registerCheck
	SkipNodeUpdate  bool
	PeerName        string
}

type registerService struct {
	ID       string
	Service  string
	Tags     []string
	Address  string
	Port     int
	PeerName string // refused (see hasPeerName)
}

type registerCheck struct {
	Node       string
	CheckID    string
	Name       string
	Status     string
	Notes      string
	Output     string
	ServiceID  string
	Type       string
	PeerName   string
	Definition struct {
		HTTP, TCP, UDP, GRPC, H2PING, OSService string
		ScriptArgs                              []string
		Interval                                duration
	}
}

// deregisterRequest is Consul's structs.DeregisterRequest (consul/api's
// CatalogDeregistration).
type deregisterRequest struct {
	Datacenter string
	Node       string
	ServiceID  string
	CheckID    string
	PeerName   string
}

// duration reads a check definition's interval as structs.HealthCheckDefinition does: a
// Go duration string, or nanoseconds.
type duration time.Duration

func (d *duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		*d = duration(v)
		return err
	}
	var n int64
	err := json.Unmarshal(b, &n)
	*d = duration(n)
	return err
}

// checkType is the type Consul gives a check registered through the catalog without one:
// that of its definition (structs.CheckType.Type), none for a check without.
func (ch *registerCheck) checkType() string {
	d := ch.Definition
	if d.Interval <= 0 {
		return ""
	}
	switch {
	case d.GRPC != "":
		return "grpc"
	case d.HTTP != "":
		return "http"
	case d.TCP != "":
		return "tcp"
	case d.UDP != "":
		return "udp"
	case len(d.ScriptArgs) > 0:
		return "script"
	case d.H2PING != "":
		return "h2ping"
	case d.OSService != "":
		return "os_service"
	}
	return ""
}

// catalogWriteAllow is the Allow header of the catalog's write endpoints.
const catalogWriteAllow = "OPTIONS,PUT"

// consulTypeNames spells the sim's request types in decoding errors as Consul's own are:
// structs.RegisterRequest with its NodeService and HealthCheck, and DeregisterRequest,
// which Consul decodes through an alias type.
var consulTypeNames = strings.NewReplacer(
	"consul.registerRequest", "structs.RegisterRequest",
	"consul.deregisterRequest", "struct { Address string; *structs.Alias }",
	"field registerRequest.", "field RegisterRequest.",
	"field registerService.", "field NodeService.",
	"field registerCheck.", "field HealthCheck.",
	"field deregisterRequest.", "field .Alias.",
)

// rpcError is an error of Consul's Catalog endpoint, which its HTTP layer answers with
// 500 and the error's text.
type rpcError string

func (e rpcError) Error() string { return string(e) }

// serveCatalogWrite answers PUT /v1/catalog/register and /v1/catalog/deregister.
func (c *Catalog) serveCatalogWrite(w http.ResponseWriter, r *http.Request, register bool) {
	switch r.Method {
	case http.MethodPut:
	case http.MethodOptions:
		w.Header().Set("Allow", catalogWriteAllow)
		w.Header().Set("Content-Type", "application/json")
		return
	default:
		w.Header().Set("Allow", catalogWriteAllow)
		kvError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed", r.Method))
		return
	}
	var err error
	if register {
		var req registerRequest
		if err = json.NewDecoder(r.Body).Decode(&req); err != nil {
			kvError(w, http.StatusBadRequest, "Request decode failed: "+consulTypeNames.Replace(err.Error()))
			return
		}
		err = c.catalogRegister(&req)
	} else {
		var req deregisterRequest
		if err = json.NewDecoder(r.Body).Decode(&req); err != nil {
			kvError(w, http.StatusBadRequest, "Request decode failed: "+consulTypeNames.Replace(err.Error()))
			return
		}
		err = c.catalogDeregister(&req)
	}
	if err != nil {
		kvError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeKVJSON(w, kvRequest{params: r.URL.Query()}, true)
}

// hasPeerName reports whether a registration names a peer (Catalog.Register refuses it).
func (req *registerRequest) hasPeerName() bool {
	if req.PeerName != "" || (req.Service != nil && req.Service.PeerName != "") {
		return true
	}
	if req.Check != nil && req.Check.PeerName != "" {
		return true
	}
	for _, ch := range req.Checks {
		if ch != nil && ch.PeerName != "" {
			return true
		}
	}
	return false
}

// parseUUID checks a node ID as go-uuid's ParseUUID does.
func parseUUID(s string) error {
	if len(s) != 36 {
		return errors.New("uuid string is wrong length")
	}
	if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return errors.New("uuid is improperly formatted")
	}
	_, err := hex.DecodeString(s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36])
	return err
}

// isAny reports whether a service address is a wildcard (ipaddr.IsAny).
func isAny(addr string) bool {
	addr = strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	ip := net.ParseIP(addr)
	return ip != nil && ip.IsUnspecified()
}

// catalogRegister is Consul's Catalog.Register: it checks the request in the order Consul
// does (agent/consul/catalog_endpoint.go: Register, nodePreApply, servicePreApply,
// checkPreApply, vetRegisterWithACL, which runs without ACLs too), then applies it as the
// state store's ensureRegistrationTxn: the node (created if unknown, updated unless
// SkipNodeUpdate), the service, then each check.
func (c *Catalog) catalogRegister(req *registerRequest) error {
	if req.hasPeerName() {
		return rpcError("cannot register requests with PeerName in them")
	}
	if req.Datacenter != "" && req.Datacenter != Datacenter {
		return rpcError("No path to datacenter")
	}
	if req.Node == "" {
		return rpcError("Must provide node")
	}
	if req.ID != "" {
		if err := parseUUID(req.ID); err != nil {
			return rpcError("Bad node ID: " + err.Error())
		}
	}
	if req.Address == "" && !req.SkipNodeUpdate {
		return rpcError("Must provide address if SkipNodeUpdate is not set")
	}
	if s := req.Service; s != nil {
		if s.ID == "" && s.Service != "" {
			s.ID = s.Service
		}
		if s.ID != "" && s.Service == "" {
			return rpcError("Must provide service name (Service.Service) when service ID is provided")
		}
		if isAny(s.Address) {
			return rpcError("Invalid service address")
		}
	}
	checks := req.Checks
	if req.Check != nil {
		checks = append(checks, req.Check)
	}
	for _, ch := range checks {
		if ch.Node == "" {
			ch.Node = req.Node
		}
		if ch.CheckID == "" && ch.Name != "" {
			ch.CheckID = ch.Name
		}
		if ch.Type == "" {
			ch.Type = ch.checkType()
		}
	}

	c.mu.Lock()
	err := c.vetRegister(req, checks)
	if err == nil {
		// The state store's check lookup, by node and check ID, fails without an ID.
		for _, ch := range checks {
			if ch.CheckID == "" {
				err = rpcError(fmt.Sprintf("failed inserting check on node %q: failed health check lookup: index error: object is missing a value for this index", req.Node))
				break
			}
		}
	}
	if err != nil {
		c.mu.Unlock()
		return err
	}
	i := c.idx.Next()
	if c.applyRegister(req, checks, i) {
		c.catalogIndex = i
	}
	c.mu.Unlock()
	c.idx.Notify()
	return nil
}

// vetRegister is vetRegisterWithACL's checks that do not depend on ACLs: each check on the
// request's node, and bound to the request's service or to one the node has.
func (c *Catalog) vetRegister(req *registerRequest, checks []*registerCheck) error {
	node := c.nodes[strings.ToLower(req.Node)]
	for _, ch := range checks {
		if !strings.EqualFold(ch.Node, req.Node) {
			return rpcError(fmt.Sprintf("Node '%s' for check '%s' doesn't match register request node '%s'",
				ch.Node, ch.CheckID, req.Node))
		}
		if ch.ServiceID == "" || (req.Service != nil && req.Service.ID == ch.ServiceID) {
			continue
		}
		known := false
		if node != nil {
			for _, s := range c.services {
				if s.inst.ID == ch.ServiceID && strings.EqualFold(s.inst.Node, node.name) {
					known = true
					break
				}
			}
		}
		if !known {
			return rpcError(fmt.Sprintf("Unknown service ID '%s' for check ID '%s'", ch.ServiceID, ch.CheckID))
		}
	}
	return nil
}

// applyRegister is ensureRegistrationTxn. It reports whether the catalog changed.
func (c *Catalog) applyRegister(req *registerRequest, checks []*registerCheck, i uint64) bool {
	changed := false
	n := c.nodes[strings.ToLower(req.Node)]
	want := &nodeRow{name: req.Node, id: req.ID, address: req.Address, datacenter: Datacenter,
		tagged: req.TaggedAddresses, meta: req.NodeMeta}
	switch {
	case n == nil:
		want.createIndex, want.modifyIndex = i, i
		c.nodes[strings.ToLower(req.Node)] = want
		n = want
		changed = true
	case !req.SkipNodeUpdate && changesNode(n, want):
		n.name, n.id, n.address, n.tagged, n.meta, n.modifyIndex = want.name, want.id, want.address, want.tagged, want.meta, i
		c.touchNodeServices(n.name, i)
		if n.agent {
			if _, ok := c.nodeDrift[strings.ToLower(n.name)]; !ok {
				now := c.now()
				c.nodeDrift[strings.ToLower(n.name)] = now
				c.scheduleAntiEntropy(now.Add(AntiEntropyDelay))
			}
		}
		changed = true
	}
	if s := req.Service; s != nil {
		inst := Instance{ID: s.ID, Service: s.Service, Tags: s.Tags, Address: s.Address, Port: s.Port, Node: n.name}
		changed = c.ensureService(inst, true, i) || changed
	}
	for _, ch := range checks {
		status := ch.Status
		if status == "" {
			status = StatusCritical
		}
		chk := Check{ID: ch.CheckID, Name: ch.Name, Status: status, Output: ch.Output, ServiceID: ch.ServiceID,
			Notes: ch.Notes, Type: ch.Type}
		if ch.ServiceID != "" {
			// Bound as the service's index spells its ID.
			chk.ServiceID = c.services[rowKey(n.name, ch.ServiceID)].inst.ID
		}
		changed = c.ensureCheck(n.name, chk, true, i) || changed
	}
	return changed
}

// changesNode is structs.RegisterRequest.ChangesNode for an existing node.
func changesNode(n, want *nodeRow) bool {
	return want.id != n.id || want.name != n.name || want.address != n.address ||
		!maps.Equal(want.tagged, n.tagged) || !maps.Equal(want.meta, n.meta)
}

// catalogDeregister is Consul's Catalog.Deregister, applied as the FSM's applyDeregister
// does: with a ServiceID it deletes that service and its checks, else with a CheckID that
// check, else the whole node. Deleting what does not exist succeeds (deleteServiceTxn,
// deleteCheckTxn and deleteNodeTxn return nil then). What an agent registered comes back
// at its anti-entropy.
func (c *Catalog) catalogDeregister(req *deregisterRequest) error {
	if req.Datacenter != "" && req.Datacenter != Datacenter {
		return rpcError("No path to datacenter")
	}
	if req.Node == "" {
		return rpcError("Must provide node")
	}
	c.write(func(i uint64) bool {
		now := c.now()
		gone := func(ls *localService) {
			if ls != nil && ls.gone.IsZero() {
				ls.gone = now
				c.scheduleAntiEntropy(now.Add(AntiEntropyDelay))
			}
		}
		switch {
		case req.ServiceID != "":
			row := c.services[rowKey(req.Node, req.ServiceID)]
			if row == nil {
				return false
			}
			gone(c.localOn(row.inst.Node, row.inst.ID))
			c.deleteService(row, i)
		case req.CheckID != "":
			row := c.checks[rowKey(req.Node, req.CheckID)]
			if row == nil {
				return false
			}
			ls, _ := c.localCheckOn(row.node, row.check.ID)
			gone(ls)
			c.deleteCheck(row, i)
		default:
			n := c.nodes[strings.ToLower(req.Node)]
			if n == nil {
				return false
			}
			if n.agent {
				c.agentGone[n.name] = now
				c.scheduleAntiEntropy(now.Add(AntiEntropyDelay))
			}
			c.deleteNode(n, i)
		}
		return true
	})
	return nil
}
