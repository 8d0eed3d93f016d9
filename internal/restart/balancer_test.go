package restart

import (
	"strings"
	"testing"
	"time"
)

func TestParseDrainUntil(t *testing.T) {
	for _, c := range []struct {
		in   string
		want DrainEvidence
		// refused, when not empty, is what the refusal must say.
		refused string
	}{
		{in: "traefik=http://traefik:8080", want: DrainEvidence{Kind: EvidenceTraefik, Address: "http://traefik:8080"}},
		{in: " Traefik = https://lb.example.com/ ", want: DrainEvidence{Kind: EvidenceTraefik, Address: "https://lb.example.com/"}},
		{in: "haproxy=http://127.0.0.1:8404/stats", want: DrainEvidence{Kind: EvidenceHAProxy, Address: "http://127.0.0.1:8404/stats"}},
		{in: "haproxy=unix:/run/haproxy/admin.sock", want: DrainEvidence{Kind: EvidenceHAProxy, Address: "unix:/run/haproxy/admin.sock"}},
		{in: "haproxy=tcp://127.0.0.1:9999", want: DrainEvidence{Kind: EvidenceHAProxy, Address: "tcp://127.0.0.1:9999"}},
		{in: "envoy=http://127.0.0.1:19000", want: DrainEvidence{Kind: EvidenceEnvoy, Address: "http://127.0.0.1:19000"}},
		{in: `prometheus: sum(rate(req{instance="{{address}}"}[15s])) == 0`, want: DrainEvidence{Kind: EvidencePrometheus, Query: `sum(rate(req{instance="{{address}}"}[15s])) == 0`}},
		{in: "", refused: "it is empty"},
		{in: "nginx=http://x:80", refused: "unknown balancer"},
		{in: "traefik", refused: "unknown balancer"},
		{in: "traefik=", refused: "no address"},
		{in: "traefik=traefik:8080", refused: "give the URL of traefik's API"},
		{in: "envoy=unix:/x", refused: "give the URL of envoy's API"},
		{in: "haproxy=unix:relative", refused: "runtime API's socket"},
		{in: "haproxy=tcp://host", refused: "runtime API's socket"},
		{in: "prometheus:", refused: "the query is empty"},
		{in: "prometheus:up{{ip}}", refused: "unknown template variable {{ip}}; use one of {{address}}"},
	} {
		got, err := ParseDrainUntil(c.in)
		if c.refused != "" {
			if err == nil || !strings.Contains(err.Error(), c.refused) || !strings.Contains(err.Error(), "-drain-until") || strings.Contains(err.Error(), "\n") {
				t.Errorf("ParseDrainUntil(%q) = %+v, %v; want one line refusing it with %q", c.in, got, err, c.refused)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseDrainUntil(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

// TestDrainQueryFor: the query's variables stand for the instance, escaped for a PromQL
// string.
func TestDrainQueryFor(t *testing.T) {
	ev, err := ParseDrainUntil(`prometheus:sum(rate(req{instance="{{address}}",host="{{host}}",port="{{port}}",alloc="{{alloc}}",svc="{{ service }}",name="{{alloc_name}}"}[15s])) == 0`)
	if err != nil {
		t.Fatal(err)
	}
	got := ev.QueryFor(DrainTarget{Address: "10.0.0.5:8080", AllocID: "a1", AllocName: `web.api[0]`, Service: `we"b`})
	want := `sum(rate(req{instance="10.0.0.5:8080",host="10.0.0.5",port="8080",alloc="a1",svc="we\"b",name="web.api[0]"}[15s])) == 0`
	if got != want {
		t.Errorf("QueryFor = %s\nwant       %s", got, want)
	}
}

func TestBalancerOfTags(t *testing.T) {
	for _, c := range []struct {
		name    string
		tags    []string
		refresh map[string]time.Duration
		key     string
		drain   time.Duration
	}{
		{"Traefik's defaults: 15s refresh + 2s throttle", []string{"traefik.enable=true", "traefik.http.routers.web.rule=Host(`web`)"}, nil, BalancerTraefik, 17 * time.Second},
		{"Traefik said to refresh every 5s", []string{"traefik.enable=true"}, map[string]time.Duration{"traefik": 5 * time.Second}, BalancerTraefik, 7 * time.Second},
		{"Fabio follows blocking queries: the default drain", []string{"urlprefix-/web"}, nil, BalancerFabio, DefaultDrain},
		{"no balancer's tags", []string{"web", "traefik"}, nil, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, ok := BalancerOfTags(c.tags, c.refresh)
			if ok != (c.key != "") || b.Key != c.key || (ok && b.Drain() != c.drain) {
				t.Errorf("BalancerOfTags(%q) = %+v (drain %s), %v; want %q draining %s", c.tags, b, b.Drain(), ok, c.key, c.drain)
			}
			if ok && !strings.Contains(b.String(), b.Name) {
				t.Errorf("the plan's words %q do not name %s", b.String(), b.Name)
			}
		})
	}
}

// TestResolveDrainUntil: -drain-until and -balancer-refresh are parsed once into the spec,
// and a wrong one is refused in one line from Resolve, as from every entry point.
func TestResolveDrainUntil(t *testing.T) {
	res, err := Options{DrainUntil: []string{"traefik=http://t:8080", "traefik=http://t:8080", "prometheus:up == 0"},
		BalancerRefresh: []string{"traefik=5s"}}.Resolve(Detached)
	if err != nil {
		t.Fatal(err)
	}
	want := []DrainEvidence{{Kind: EvidenceTraefik, Address: "http://t:8080"}, {Kind: EvidencePrometheus, Query: "up == 0"}}
	if len(res.Spec.DrainUntil) != 2 || res.Spec.DrainUntil[0] != want[0] || res.Spec.DrainUntil[1] != want[1] || res.Spec.BalancerRefresh["traefik"] != 5*time.Second {
		t.Errorf("spec %+v, %v", res.Spec.DrainUntil, res.Spec.BalancerRefresh)
	}
	for _, o := range []Options{{DrainUntil: []string{"traefik=:8080"}}, {BalancerRefresh: []string{"nginx=5s"}}} {
		if _, err := o.Resolve(Detached); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("Resolve(%+v) = %v, want a one-line refusal", o, err)
		}
	}
	// A job's meta replaces a fleet's -drain-until, option by option.
	s := res.Spec
	if errs := (Options{DrainUntil: []string{"envoy=http://e:19000"}}).Apply(&s, Detached); len(errs) > 0 || len(s.DrainUntil) != 1 || s.DrainUntil[0].Kind != EvidenceEnvoy {
		t.Errorf("Apply over a spec: %v, %+v", errs, s.DrainUntil)
	}
}
