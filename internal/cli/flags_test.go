package cli

import "testing"

func TestClientFlagsEnv(t *testing.T) {
	env := map[string]string{"NOMAD_ADDR": "http://env:4646", "NOMAD_TOKEN": "envtok", "NOMAD_NAMESPACE": "envns", "NOMAD_SKIP_VERIFY": "true"}
	c := clientFlags{token: "flagtok"}.withEnv(func(k string) string { return env[k] })
	if c.address != "http://env:4646" || c.token != "flagtok" || c.namespace != "envns" || !c.insecure {
		t.Fatalf("flags must win over the environment, which fills the rest: %+v", c)
	}
	d := clientFlags{}.withEnv(func(string) string { return "" })
	if d.address != "http://127.0.0.1:4646" {
		t.Fatalf("default address %q", d.address)
	}
}
