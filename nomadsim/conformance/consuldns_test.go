package conformance

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	consulapi "github.com/hashicorp/consul/api"
	"github.com/miekg/dns"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// envConsulDNS names the real Consul agent's DNS interface (host:port, such as
// 127.0.0.1:8600) for TestConsulDNS, beside CONSUL_CONFORMANCE_ADDR.
const envConsulDNS = "CONSUL_CONFORMANCE_DNS"

// TestConsulDNS: Consul's DNS interface, as HAProxy's resolvers read it, lists a service's
// passing and warning instances and leaves out critical ones (dns_config.only_passing is
// false by default): SRV with priority 1, weight 1, the port, and a target
// <hex IPv4>.addr.dc1.consul. for an instance with an address of its own, else
// <node>.node.dc1.consul., whose A records come in the additional section; A records of
// the addresses, in plain and RFC 2782 forms alike; NXDOMAIN for an unknown service. TTLs
// are 0. Measured on Consul 1.20.6.
func TestConsulDNS(t *testing.T) {
	for _, name := range []string{"sim", "real"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			httpAddr, dnsAddr := os.Getenv(envConsulAddr), os.Getenv(envConsulDNS)
			if name == "sim" {
				c := simtest.Start(t, nomadsim.Options{Datacenters: []string{"dc1"}, NodesPerDatacenter: 1})
				httpAddr, dnsAddr = c.ConsulAddr(), c.ConsulDNSAddr()
			} else if httpAddr == "" || dnsAddr == "" {
				t.Skip(envConsulAddr + " and " + envConsulDNS + " not both set: no real Consul agent to check this case against")
			}
			checkConsulDNS(t, httpAddr, dnsAddr, "conf-dns-"+randomHex(t, 4))
		})
	}
}

func checkConsulDNS(t *testing.T, httpAddr, dnsAddr, prefix string) {
	cfg := consulapi.DefaultConfig()
	cfg.Address = httpAddr
	consul, err := consulapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	service := prefix + "-web"
	var nodes []string
	register := func(i int, serviceAddr, status string) {
		t.Helper()
		node := fmt.Sprintf("%s-n%d", prefix, i)
		nodes = append(nodes, node)
		reg := &consulapi.CatalogRegistration{Node: node, Address: fmt.Sprintf("127.0.1.%d", i),
			Service: &consulapi.AgentService{ID: fmt.Sprintf("%s-%d", service, i), Service: service, Address: serviceAddr, Port: 9000 + i}}
		if status != "" {
			reg.Check = &consulapi.AgentCheck{Node: node, CheckID: fmt.Sprintf("%s-c%d", prefix, i), Name: "ready", Status: status, ServiceID: reg.Service.ID}
		}
		if _, err := consul.Catalog().Register(reg, nil); err != nil {
			t.Fatalf("registering %s: %v", node, err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_, _ = consul.Catalog().Deregister(&consulapi.CatalogDeregistration{Node: n}, nil)
		}
	})
	register(1, "127.0.2.1", consulapi.HealthPassing)
	register(2, "127.0.2.2", consulapi.HealthWarning)
	register(3, "127.0.2.3", consulapi.HealthCritical)
	register(4, "", "") // no check, the node's address

	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		r, err := dns.Exchange(m, dnsAddr)
		if err != nil {
			t.Fatalf("asking %s for %s: %v", dnsAddr, name, err)
		}
		return r
	}
	want := []string{"9001 7f000201.addr.dc1.consul. 127.0.2.1", "9002 7f000202.addr.dc1.consul. 127.0.2.2", fmt.Sprintf("9004 %s-n4.node.dc1.consul. 127.0.1.4", prefix)}
	for _, name := range []string{service + ".service.consul.", "_" + service + "._tcp.service.consul.", service + ".service.dc1.consul."} {
		r := ask(name, dns.TypeSRV)
		extra := map[string]string{}
		for _, rr := range r.Extra {
			if a, ok := rr.(*dns.A); ok {
				extra[a.Hdr.Name] = a.A.String()
			}
		}
		var got []string
		for _, rr := range r.Answer {
			srv, ok := rr.(*dns.SRV)
			if !ok || srv.Priority != 1 || srv.Weight != 1 || srv.Hdr.Ttl != 0 {
				t.Errorf("%s SRV: answer %v, want SRV 1 1 with TTL 0", name, rr)
				continue
			}
			got = append(got, fmt.Sprintf("%d %s %s", srv.Port, srv.Target, extra[srv.Target]))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) || r.Rcode != dns.RcodeSuccess || !r.Authoritative {
			t.Errorf("%s SRV: %q (rcode %d, aa %v), want %q", name, got, r.Rcode, r.Authoritative, want)
		}
		a := ask(name, dns.TypeA)
		var addrs []string
		for _, rr := range a.Answer {
			if rec, ok := rr.(*dns.A); ok {
				addrs = append(addrs, rec.A.String())
			}
		}
		slices.Sort(addrs)
		if w := []string{"127.0.1.4", "127.0.2.1", "127.0.2.2"}; !slices.Equal(addrs, w) {
			t.Errorf("%s A: %q, want %q", name, addrs, w)
		}
	}
	if r := ask(prefix+"-nothing.service.consul.", dns.TypeA); r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 || !strings.HasPrefix(r.Ns[0].String(), "consul.\t0\tIN\tSOA\tns.consul. hostmaster.consul. ") {
		t.Errorf("unknown service: rcode %d, authority %v; want NXDOMAIN with Consul's SOA", r.Rcode, r.Ns)
	}
	if r := ask("7f000203.addr.dc1.consul.", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "127.0.2.3" {
		t.Errorf("an addr name: %v, want its address", r.Answer)
	}
}
