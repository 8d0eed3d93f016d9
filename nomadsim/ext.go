package nomadsim

import (
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/consul"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/variables"
)

// extensions are the subsystems served behind the cluster's middleware: ACLs, Variables
// and the Consul catalog.
type extensions struct {
	acl     *acl.ACL
	vars    *variables.Store
	catalog *consul.Catalog
}

func (c *Cluster) initExtensions() error {
	c.ext.acl = acl.New(c.opts.ACLs, c.idx)
	cfg := variables.Config{Index: c.idx, ACL: c.ext.acl, Now: c.Now}
	if c.opts.ScaleLockTTL {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool {
			return time.AfterFunc(c.clk.real(d), f).Stop
		}
	}
	c.ext.vars = variables.New(cfg)
	c.ext.catalog = consul.NewCatalog("consul-server-1")
	return nil
}

// ExpireLock ends the TTL of the lock held on the variable at path now, as if its holder
// had died and stopped renewing: the lock is released after its lock delay (on the lock
// clock: real time unless Options.ScaleLockTTL). It reports whether a lock's TTL was
// running. An empty namespace is "default".
func (c *Cluster) ExpireLock(namespace, path string) bool {
	if namespace == "" {
		namespace = "default"
	}
	return c.ext.vars.ExpireLock(namespace, path)
}

// BootstrapToken is the management token's secret when ACLs are on ("" otherwise).
func (c *Cluster) BootstrapToken() string { return c.ext.acl.BootstrapSecret() }

// CreateToken creates a client token with one policy per entry (policy name to HCL rules)
// and returns its secret.
func (c *Cluster) CreateToken(name string, policyRules map[string]string) (string, error) {
	return c.ext.acl.CreateToken(name, policyRules)
}

// authorize resolves the request's token and checks a namespace capability (an empty
// capability only requires a valid token).
func (c *Cluster) authorize(r *http.Request, namespace, capability string) error {
	if !c.ext.acl.Enabled() {
		return nil
	}
	tok, err := c.ext.acl.Resolve(secretOf(r))
	if err != nil {
		return err
	}
	if capability == "" || tok.AllowNamespace(namespace, capability) {
		return nil
	}
	return acl.ErrPermissionDenied()
}

// nsAllowed returns a filter of the namespaces whose objects the request may see with
// the capability, for lists across namespaces (namespace=*), as Nomad filters them. An
// unknown token denies all.
func (c *Cluster) nsAllowed(r *http.Request, capability string) func(ns string) bool {
	if !c.ext.acl.Enabled() {
		return func(string) bool { return true }
	}
	tok, err := c.ext.acl.Resolve(secretOf(r))
	if err != nil {
		return func(string) bool { return false }
	}
	return func(ns string) bool { return tok.AllowNamespace(ns, capability) }
}

// authorizeList checks a list request: a capability in the namespace, or, for "*", a
// valid token whose visible namespaces filter the answer.
func (c *Cluster) authorizeList(r *http.Request, namespace, capability string) (func(ns string) bool, error) {
	if namespace != "*" {
		if err := c.authorize(r, namespace, capability); err != nil {
			return nil, err
		}
		return func(string) bool { return true }, nil
	}
	if err := c.authorize(r, namespace, ""); err != nil {
		return nil, err
	}
	return c.nsAllowed(r, capability), nil
}

// authorizeAny allows the request if the token holds any of the capabilities.
func (c *Cluster) authorizeAny(r *http.Request, namespace string, caps ...string) error {
	if !c.ext.acl.Enabled() {
		return nil
	}
	tok, err := c.ext.acl.Resolve(secretOf(r))
	if err != nil {
		return err
	}
	for _, cp := range caps {
		if tok.AllowNamespace(namespace, cp) {
			return nil
		}
	}
	return acl.ErrPermissionDenied()
}

// authorizeManagement requires a management token (namespace writes), when ACLs are on.
func (c *Cluster) authorizeManagement(r *http.Request) error {
	if !c.ext.acl.Enabled() {
		return nil
	}
	tok, err := c.ext.acl.Resolve(secretOf(r))
	if err != nil {
		return err
	}
	if !tok.Management() {
		return acl.ErrPermissionDenied()
	}
	return nil
}

// authorizeLevel checks node, agent or operator read/write access.
func (c *Cluster) authorizeLevel(r *http.Request, scope, op string) error {
	if !c.ext.acl.Enabled() {
		return nil
	}
	tok, err := c.ext.acl.Resolve(secretOf(r))
	if err != nil {
		return err
	}
	ok := false
	switch scope {
	case "node":
		ok = tok.AllowNode(op)
	case "agent":
		ok = tok.AllowAgent(op)
	case "operator":
		ok = tok.AllowOperator(op)
	}
	if !ok {
		return acl.ErrPermissionDenied()
	}
	return nil
}

// secretOf reads the token as Nomad's agent does, also from the ?token= query parameter.
func secretOf(r *http.Request) string {
	if s := acl.SecretFromRequest(r); s != "" {
		return s
	}
	return strings.TrimSpace(r.URL.Query().Get("token"))
}

// consulRegister registers a Consul-provider service and keeps its checks' statuses
// following their scripts.
func (c *Cluster) consulRegister(ar *allocRun, r *svcReg) {
	inst := consul.Instance{ID: r.reg.ID, Service: r.reg.ServiceName, Tags: r.reg.Tags, Address: r.reg.Address, Port: r.reg.Port, Node: ar.node.n.Name}
	for k := range r.svc.Checks {
		chk := &r.svc.Checks[k]
		inst.Checks = append(inst.Checks, consul.Check{ID: consulCheckID(r.reg.ID, chk), Name: checkName(r.svc, chk), Status: "critical", ServiceID: r.reg.ID})
	}
	c.ext.catalog.Register(inst)
}

// kickConsulChecks restarts the status loops of a Consul service's checks.
func (c *Cluster) kickConsulChecks(ar *allocRun, r *svcReg) {
	r.loopGen++
	for k := range r.svc.Checks {
		c.consulCheckLoop(ar, r, &r.svc.Checks[k], r.loopGen)
	}
}

// consulCheckLoop pushes the check's current status, then re-arms at its next change. A
// check of a workload that is down is critical (connection refused).
func (c *Cluster) consulCheckLoop(ar *allocRun, r *svcReg, chk *api.ServiceCheck, gen uint64) {
	if ar.svcs[r.reg.ID] != r || r.loopGen != gen {
		return
	}
	start, up := ar.base(r.task)
	if !up {
		c.ext.catalog.SetCheck(consulCheckID(r.reg.ID, chk), "critical", "dial tcp: connection refused")
		return
	}
	s := ar.scriptFor(r.task, r.svc, chk)
	start = s.origin(start)
	el := c.clk.now().Sub(start)
	status, out := "passing", "HTTP GET: 200 OK"
	if !s.passing(el) {
		status, out = "critical", "simulated check failure"
	}
	c.ext.catalog.SetCheck(consulCheckID(r.reg.ID, chk), status, out)
	if nc, more := s.nextChange(el); more {
		c.after(nc-el+time.Millisecond, func() { c.consulCheckLoop(ar, r, chk, gen) })
	}
}

func (c *Cluster) consulDeregister(r *svcReg) {
	c.ext.catalog.Deregister(r.reg.ID)
}

func (c *Cluster) consulHandler() http.Handler { return c.ext.catalog.Handler() }
