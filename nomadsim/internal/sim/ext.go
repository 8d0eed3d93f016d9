package sim

import (
	"github.com/miekg/dns"

	"net/http"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/consul"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/variables"
)

// extensions are the subsystems served behind the cluster's middleware: ACLs, Variables
// and the Consul catalog.
type extensions struct {
	ACL     *acl.ACL
	Vars    *variables.Store
	catalog *consul.Catalog
}

func (c *Cluster) initExtensions() error {
	c.Ext.ACL = acl.New(c.Options.ACLs, c.Index)
	cfg := variables.Config{Index: c.Index, ACL: c.Ext.ACL, Now: c.Now, OnChange: c.onVariableChange}
	if c.Options.ScaleLockTTL {
		cfg.AfterFunc = func(d time.Duration, f func()) func() bool {
			return time.AfterFunc(c.Clock.Real(d), f).Stop
		}
	}
	c.Ext.Vars = variables.New(cfg)
	// The Consul agents' anti-entropy runs on the simulated clock.
	c.Ext.catalog = consul.New("consul-server-1", consul.Config{
		Now: c.Now,
		AfterFunc: func(d time.Duration, f func()) func() bool {
			return time.AfterFunc(c.Clock.Real(d), f).Stop
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
	return c.Ext.Vars.ExpireLock(namespace, path)
}

// BootstrapToken is the management token's secret when ACLs are on ("" otherwise).
func (c *Cluster) BootstrapToken() string { return c.Ext.ACL.BootstrapSecret() }

// CreateToken creates a client token with one policy per entry (policy name to HCL rules)
// and returns its secret.
func (c *Cluster) CreateToken(name string, policyRules map[string]string) (string, error) {
	return c.Ext.ACL.CreateToken(name, policyRules)
}

// consulRegister registers a Consul-provider service with its checks at their initial
// status (critical unless the check's initial_status says otherwise), and starts each
// check's runner as Consul's agent does: the first run after a random stagger within the
// interval, then one run every interval, each holding its status until the next
// (agent/checks: CheckHTTP.run and its siblings).
func (c *Cluster) consulRegister(ar *AllocRun, r *svcReg) {
	inst := consul.Instance{ID: r.Reg.ID, Service: r.Reg.ServiceName, Tags: r.Reg.Tags, Address: r.Reg.Address, Port: r.Reg.Port, Node: ar.Node.Node.Name}
	for k := range r.svc.Checks {
		chk := &r.svc.Checks[k]
		status := "critical"
		if chk.InitialStatus != "" {
			status = chk.InitialStatus
		}
		inst.Checks = append(inst.Checks, consul.Check{ID: consulCheckID(r.Reg.ID, chk), Name: checkName(r.svc, chk), Status: status, ServiceID: r.Reg.ID})
	}
	c.Ext.catalog.Register(inst)
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
func (c *Cluster) runConsulCheck(ar *AllocRun, r *svcReg, chk *api.ServiceCheck) {
	if ar.Services[r.Reg.ID] != r {
		return // deregistered: a registration anew runs checks of its own
	}
	status, out := "critical", "dial tcp: connection refused"
	if start, up := ar.base(r.task); up {
		s := ar.scriptFor(r.task, r.svc, chk)
		status, out = "passing", "HTTP GET: 200 OK"
		if !s.passing(c.Clock.Now().Sub(s.origin(start))) {
			status, out = "critical", "simulated check failure"
		}
	}
	c.Ext.catalog.SetCheck(consulCheckID(r.Reg.ID, chk), status, out)
	c.after(consulInterval(chk), func() { c.runConsulCheck(ar, r, chk) })
}

func (c *Cluster) consulDeregister(r *svcReg) {
	c.Ext.catalog.Deregister(r.Reg.ID)
}

// ConsulHandler serves Consul's HTTP API: the catalog, health and KV endpoints.
func (c *Cluster) ConsulHandler() http.Handler { return c.Ext.catalog.Handler() }

// ConsulDNS answers Consul's DNS interface for services (SRV and A).
func (c *Cluster) ConsulDNS() dns.Handler { return c.Ext.catalog.DNS() }
