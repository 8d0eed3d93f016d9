package consul

import (
	"encoding/hex"
	"net"
	"strings"

	"github.com/miekg/dns"
)

// DNS answers Consul's DNS interface for services, as HAProxy's resolvers and other
// balancers read it (measured on Consul 1.20.6's DNS, nomadsim/conformance's
// TestConsulDNS): <service>.service[.dc1].consul and the RFC 2782 form
// _<service>._tcp.service[.dc1].consul.
//
//   - An instance is listed unless one of its checks or its node's is critical: passing
//     and warning instances both, as Consul's default dns_config.only_passing = false.
//   - SRV: priority 1, weight 1, the instance's port, and as target
//     <hex of the IPv4 address>.addr.dc1.consul. for an instance with an address of its
//     own, else <node>.node.dc1.consul.; the targets' A records in the additional section.
//   - A: the instances' addresses (the node's when the instance has none).
//   - TTL 0 everywhere (dns_config.service_ttl unset); <hex>.addr.dc1.consul. answers its
//     address; an unknown name is NXDOMAIN with Consul's SOA in the authority section.
//
// Tags and prepared queries are not served.
func (c *Catalog) DNS() dns.Handler {
	return dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		m.RecursionAvailable = false
		if len(req.Question) == 1 {
			c.answer(m, req.Question[0])
		}
		_ = w.WriteMsg(m)
	})
}

// dnsDomain is Consul's default domain.
const dnsDomain = "consul."

func (c *Catalog) answer(m *dns.Msg, q dns.Question) {
	name := strings.ToLower(q.Name)
	labels := dns.SplitDomainName(strings.TrimSuffix(name, dnsDomain))
	if !strings.HasSuffix(name, "."+dnsDomain) || len(labels) < 2 {
		c.nxdomain(m)
		return
	}
	// [.dc1] before the domain is optional.
	if labels[len(labels)-1] == Datacenter {
		labels = labels[:len(labels)-1]
	}
	switch {
	case len(labels) == 2 && labels[1] == "addr":
		ip, err := hex.DecodeString(labels[0])
		if err != nil || len(ip) != 4 {
			c.nxdomain(m)
			return
		}
		if q.Qtype == dns.TypeA || q.Qtype == dns.TypeANY {
			m.Answer = append(m.Answer, aRecord(q.Name, net.IP(ip)))
		}
	case len(labels) == 2 && labels[1] == "service":
		c.serviceAnswer(m, q, labels[0])
	case len(labels) == 3 && labels[2] == "service" && strings.HasPrefix(labels[0], "_") && labels[1] == "_tcp":
		c.serviceAnswer(m, q, strings.TrimPrefix(labels[0], "_"))
	default:
		c.nxdomain(m)
	}
}

// dnsInstance is one instance as DNS lists it.
type dnsInstance struct {
	target string // the SRV target
	ip     net.IP
	port   int
}

func (c *Catalog) serviceAnswer(m *dns.Msg, q dns.Question, service string) {
	insts, known := c.dnsInstances(service)
	if !known {
		c.nxdomain(m)
		return
	}
	for _, in := range insts {
		switch q.Qtype {
		case dns.TypeSRV:
			m.Answer = append(m.Answer, &dns.SRV{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeSRV, Class: dns.ClassINET},
				Priority: 1, Weight: 1, Port: uint16(in.port), Target: in.target})
			m.Extra = append(m.Extra, aRecord(in.target, in.ip))
		case dns.TypeA, dns.TypeANY:
			m.Answer = append(m.Answer, aRecord(q.Name, in.ip))
		}
	}
}

// dnsInstances lists the service's instances that no critical check holds out, and
// whether the service is known at all.
func (c *Catalog) dnsInstances(service string) ([]dnsInstance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []dnsInstance
	known := false
NEXT:
	for _, st := range c.sortedInstances(service) {
		known = true
		n := c.nodes[strings.ToLower(st.inst.Node)]
		if n == nil {
			continue
		}
		for _, ch := range c.nodeChecks(n) {
			if ch.Status == StatusCritical {
				continue NEXT
			}
		}
		for _, ch := range st.checks {
			if ch.check.Status == StatusCritical {
				continue NEXT
			}
		}
		in := dnsInstance{port: st.inst.Port, target: n.name + ".node." + Datacenter + "." + dnsDomain, ip: net.ParseIP(n.address).To4()}
		if ip := net.ParseIP(st.inst.Address).To4(); ip != nil {
			in.ip, in.target = ip, hex.EncodeToString(ip)+".addr."+Datacenter+"."+dnsDomain
		}
		if in.ip != nil {
			out = append(out, in)
		}
	}
	return out, known
}

func aRecord(name string, ip net.IP) dns.RR {
	return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: ip}
}

// nxdomain answers a name Consul does not know, with its SOA.
func (c *Catalog) nxdomain(m *dns.Msg) {
	m.Rcode = dns.RcodeNameError
	m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: dnsDomain, Rrtype: dns.TypeSOA, Class: dns.ClassINET},
		Ns: "ns." + dnsDomain, Mbox: "hostmaster." + dnsDomain, Serial: uint32(c.idx.Current()), Refresh: 3600, Retry: 600, Expire: 86400})
}
