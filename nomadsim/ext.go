package nomadsim

import (
	"net/http"
	"slices"
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
	cfg := variables.Config{Index: c.idx, ACL: c.ext.acl, Now: c.Now, OnChange: c.onVariableChange}
	if c.opts.ScaleLockTTL {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool {
			return time.AfterFunc(c.clk.real(d), f).Stop
		}
	}
	c.ext.vars = variables.New(cfg)
	// The Consul agents' anti-entropy runs on the simulated clock.
	c.ext.catalog = consul.New("consul-server-1", consul.Config{
		Now: c.Now,
		AfterFunc: func(d time.Duration, f func()) func() bool {
			return time.AfterFunc(c.clk.real(d), f).Stop
		},
	})
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

// authorizeToken resolves the request's token and refuses it, with Nomad's 403, unless
// allowed says it may; with ACLs off every request may. authorize, authorizeAny,
// authorizeManagement and authorizeLevel are its rules.
func (c *Cluster) authorizeToken(r *http.Request, allowed func(tok *acl.Token) bool) error {
	if !c.ext.acl.Enabled() {
		return nil
	}
	tok, err := c.ext.acl.Resolve(secretOf(r))
	if err != nil {
		return err
	}
	if !allowed(tok) {
		return acl.ErrPermissionDenied()
	}
	return nil
}

// authorize resolves the request's token and checks a namespace capability (an empty
// capability only requires a valid token).
func (c *Cluster) authorize(r *http.Request, namespace, capability string) error {
	return c.authorizeToken(r, func(tok *acl.Token) bool {
		return capability == "" || tok.AllowNamespace(namespace, capability)
	})
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
	return c.authorizeToken(r, func(tok *acl.Token) bool {
		return slices.ContainsFunc(caps, func(cp string) bool { return tok.AllowNamespace(namespace, cp) })
	})
}

// authorizeManagement requires a management token (namespace writes), when ACLs are on.
func (c *Cluster) authorizeManagement(r *http.Request) error {
	return c.authorizeToken(r, (*acl.Token).Management)
}

// authorizeLevel checks node, agent or operator read/write access.
func (c *Cluster) authorizeLevel(r *http.Request, scope, op string) error {
	return c.authorizeToken(r, func(tok *acl.Token) bool {
		switch scope {
		case "node":
			return tok.AllowNode(op)
		case "agent":
			return tok.AllowAgent(op)
		case "operator":
			return tok.AllowOperator(op)
		}
		return false
	})
}

// secretOf reads the token as Nomad's agent does, also from the ?token= query parameter.
func secretOf(r *http.Request) string {
	if s := acl.SecretFromRequest(r); s != "" {
		return s
	}
	return strings.TrimSpace(r.URL.Query().Get("token"))
}

// consulRegister registers a Consul-provider service with its checks at their initial
// status (critical unless the check's initial_status says otherwise), and starts each
// check's runner as Consul's agent does: the first run after a random stagger within the
// interval, then one run every interval, each holding its status until the next
// (agent/checks: CheckHTTP.run and its siblings).
func (c *Cluster) consulRegister(ar *allocRun, r *svcReg) {
	inst := consul.Instance{ID: r.reg.ID, Service: r.reg.ServiceName, Tags: r.reg.Tags, Address: r.reg.Address, Port: r.reg.Port, Node: ar.node.n.Name}
	for k := range r.svc.Checks {
		chk := &r.svc.Checks[k]
		status := "critical"
		if chk.InitialStatus != "" {
			status = chk.InitialStatus
		}
		inst.Checks = append(inst.Checks, consul.Check{ID: consulCheckID(r.reg.ID, chk), Name: checkName(r.svc, chk), Status: status, ServiceID: r.reg.ID})
	}
	c.ext.catalog.Register(inst)
	for k := range r.svc.Checks {
		chk := &r.svc.Checks[k]
		interval := consulInterval(chk)
		c.after(time.Duration(c.rng.Int64N(int64(interval))), func() { c.runConsulCheck(ar, r, chk) })
	}
}

// consulInterval is the check's interval, Nomad's 10 s when the job leaves it out.
func consulInterval(chk *api.ServiceCheck) time.Duration {
	if chk.Interval > 0 {
		return chk.Interval
	}
	return 10 * time.Second
}

// runConsulCheck runs the check once against the workload as it is now, sets its status,
// and runs it again an interval later, while its service stays registered. A check of a
// workload that is down is critical (connection refused).
func (c *Cluster) runConsulCheck(ar *allocRun, r *svcReg, chk *api.ServiceCheck) {
	if ar.svcs[r.reg.ID] != r {
		return // deregistered: a registration anew runs checks of its own
	}
	status, out := "critical", "dial tcp: connection refused"
	if start, up := ar.base(r.task); up {
		s := ar.scriptFor(r.task, r.svc, chk)
		status, out = "passing", "HTTP GET: 200 OK"
		if !s.passing(c.clk.now().Sub(s.origin(start))) {
			status, out = "critical", "simulated check failure"
		}
	}
	c.ext.catalog.SetCheck(consulCheckID(r.reg.ID, chk), status, out)
	c.after(consulInterval(chk), func() { c.runConsulCheck(ar, r, chk) })
}

func (c *Cluster) consulDeregister(r *svcReg) {
	c.ext.catalog.Deregister(r.reg.ID)
}

func (c *Cluster) consulHandler() http.Handler { return c.ext.catalog.Handler() }
