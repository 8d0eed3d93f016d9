package health

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	consulapi "github.com/hashicorp/consul/api"
)

// DrainCheckPrefix starts the ID of the check a drain registers on a service instance:
// nomad-restart-drain:<service ID>. Operators and Consul's UI see it by this name.
const DrainCheckPrefix = "nomad-restart-drain:"

// DrainCheckName is the name of a drain's check.
const DrainCheckName = "nomad-restart drain"

// Drained is what a drain registered: the service instances of one allocation taken out
// of Consul's passing answers, to put back with Undrain.
type Drained struct {
	AllocID   string
	Instances []DrainedInstance
}

// DrainedInstance is one service instance with the drain's check on it.
type DrainedInstance struct {
	Service    string
	ServiceID  string
	Node       string
	Address    string
	Datacenter string
	Namespace  string
	Partition  string
	// ServiceAddress and ServicePort are where the instance serves, as a balancer reading
	// Consul sends to it (ServiceAddress is empty when the service has the node's).
	ServiceAddress string
	ServicePort    int
}

// Endpoint is the instance's address and port as a balancer knows it: 10.0.0.5:8080.
func (i DrainedInstance) Endpoint() string {
	return net.JoinHostPort(cmp.Or(i.ServiceAddress, i.Address), strconv.Itoa(i.ServicePort))
}

// CheckID is the ID of the drain's check on the instance.
func (i DrainedInstance) CheckID() string { return DrainCheckPrefix + i.ServiceID }

// ErrDrainDenied is wrapped by Drain's error when Consul's ACLs refuse the catalog write.
var ErrDrainDenied = errors.New("Consul denied the drain")

// Drain takes the allocation's instances of the named Consul services out of the answers
// a load balancer reads (/v1/health/service/<name>?passing): it registers, through the
// catalog, a critical check bound to each instance. The catalog API takes the write at any
// Consul address, where maintenance mode would need the agent of the allocation's node.
// The check heals by itself: the node's agent removes, at the next full sync of its
// anti-entropy (every one to two minutes), a check it did not register; and Nomad's client
// deregisters the service, checks and all, on the restart. Undrain removes it as soon as
// an in-place restart request returned; Redrain holds it against the agent's syncs.
//
// It returns what it registered, also when it fails part way (to undrain), and an error
// wrapping ErrDrainDenied when the token may not write the catalog.
func (c *Consul) Drain(ctx context.Context, allocID string, services []string, reason string) (Drained, error) {
	out := Drained{AllocID: allocID}
	prefix := ServicePrefix(allocID)
	for _, svc := range services {
		entries, _, err := c.client.Catalog().Service(svc, "", (&consulapi.QueryOptions{}).WithContext(ctx))
		if err != nil {
			return out, fmt.Errorf("reading the instances of Consul service %q at %s: %w", svc, c.addr, err)
		}
		for _, e := range entries {
			if e == nil || !strings.HasPrefix(e.ServiceID, prefix) {
				continue
			}
			inst := DrainedInstance{Service: svc, ServiceID: e.ServiceID, Node: e.Node, Address: e.Address,
				Datacenter: e.Datacenter, Namespace: e.Namespace, Partition: e.Partition,
				ServiceAddress: e.ServiceAddress, ServicePort: e.ServicePort}
			if err := c.registerDrainCheck(ctx, inst, reason); err != nil {
				return out, err
			}
			out.Instances = append(out.Instances, inst)
		}
	}
	return out, nil
}

// registerDrainCheck registers (or registers again: the same check changes nothing in
// Consul, and wakes no blocking query) the drain's critical check on one instance.
func (c *Consul) registerDrainCheck(ctx context.Context, inst DrainedInstance, reason string) error {
	reg := &consulapi.CatalogRegistration{
		Node: inst.Node, Address: inst.Address, Datacenter: inst.Datacenter, Partition: inst.Partition,
		// The node is its agent's: change nothing of it.
		SkipNodeUpdate: true,
		Check: &consulapi.AgentCheck{Node: inst.Node, CheckID: inst.CheckID(), Name: DrainCheckName,
			Status: consulapi.HealthCritical, ServiceID: inst.ServiceID, ServiceName: inst.Service,
			Namespace: inst.Namespace, Partition: inst.Partition,
			Notes:  "Registered by nomad-restart while it restarts this instance; removed after the restart request, or by the node's agent at its next full sync.",
			Output: reason},
	}
	if _, err := c.client.Catalog().Register(reg, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
		return c.drainError(inst.Service, err)
	}
	return nil
}

// Redrain registers the drain's checks again: the node's agent removes, at each full sync
// of its anti-entropy (every one to two minutes, measured: as soon as a few seconds after
// the registration), a check it did not register, and the drain must hold until the
// request.
func (c *Consul) Redrain(ctx context.Context, d Drained, reason string) error {
	var errs []error
	for _, inst := range d.Instances {
		if err := c.registerDrainCheck(ctx, inst, reason); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// drainError says why a drain's write failed, naming the ACL rules it needs when denied.
func (c *Consul) drainError(service string, err error) error {
	var se consulapi.StatusError
	if errors.As(err, &se) && (se.Code == 401 || se.Code == 403) {
		return fmt.Errorf("%w of service %q at %s (%d %s): give -consul-token or CONSUL_HTTP_TOKEN a token with service:write on the service (and node:read, as the health gate needs), or set -drain 0",
			ErrDrainDenied, service, c.addr, se.Code, firstLine(se.Body))
	}
	return fmt.Errorf("registering the drain check of service %q at %s: %w", service, c.addr, err)
}

// Undrain removes the checks a drain registered. A check already gone (Nomad's client
// deregistered the service on the restart, or the agent's anti-entropy removed it) is no
// error: Consul answers a deregistration of a missing check with success.
func (c *Consul) Undrain(ctx context.Context, d Drained) error {
	var errs []error
	for _, inst := range d.Instances {
		dereg := &consulapi.CatalogDeregistration{Node: inst.Node, Datacenter: inst.Datacenter, CheckID: inst.CheckID(),
			Namespace: inst.Namespace, Partition: inst.Partition}
		if _, err := c.client.Catalog().Deregister(dereg, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
			errs = append(errs, fmt.Errorf("removing the drain check %q at %s: %w", inst.CheckID(), c.addr, err))
		}
	}
	return errors.Join(errs...)
}
