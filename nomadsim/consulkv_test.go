package nomadsim

import (
	"strings"
	"testing"

	consulapi "github.com/hashicorp/consul/api"
)

// TestConsulKVGoAPI checks that the Go API and Consul's HTTP API on ConsulAddr see one store.
func TestConsulKVGoAPI(t *testing.T) {
	c, _ := startCluster(t, Options{})
	cfg := consulapi.DefaultConfig()
	cfg.Address = strings.TrimPrefix(c.ConsulAddr(), "http://")
	consul, err := consulapi.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}

	c.ConsulKVPut("app/feature", "on")
	p, _, err := consul.KV().Get("app/feature", nil)
	if err != nil || p == nil || string(p.Value) != "on" {
		t.Fatalf("HTTP read of a key set with ConsulKVPut: %+v %v; want on", p, err)
	}

	if _, err := consul.KV().Put(&consulapi.KVPair{Key: "app/feature", Value: []byte("off")}, nil); err != nil {
		t.Fatal(err)
	}
	if v, ok := c.ConsulKVGet("app/feature"); !ok || v != "off" {
		t.Fatalf("ConsulKVGet after an HTTP put: %q %v; want off", v, ok)
	}
	if v, ok := c.ConsulKVGet("app/missing"); ok || v != "" {
		t.Fatalf("ConsulKVGet of a missing key: %q %v; want not found", v, ok)
	}
}
