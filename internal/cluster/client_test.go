package cluster

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

func TestClientConfigLayering(t *testing.T) {
	env := map[string]string{
		"NOMAD_ADDR":            "http://env:4646",
		"NOMAD_REGION":          "env-region",
		"NOMAD_NAMESPACE":       "env-ns",
		"NOMAD_TOKEN":           "env-token",
		"NOMAD_CACERT":          "env-ca.pem",
		"NOMAD_CAPATH":          "env-ca-dir",
		"NOMAD_CLIENT_CERT":     "env-cert.pem",
		"NOMAD_CLIENT_KEY":      "env-key.pem",
		"NOMAD_TLS_SERVER_NAME": "env.nomad",
		"NOMAD_SKIP_VERIFY":     "",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}

	// Without flags the environment wins over the defaults.
	c := ClientConfig{}.APIConfig()
	if c.Address != "http://env:4646" || c.Region != "env-region" || c.Namespace != "env-ns" || c.SecretID != "env-token" ||
		c.TLSConfig.CACert != "env-ca.pem" || c.TLSConfig.CAPath != "env-ca-dir" || c.TLSConfig.ClientCert != "env-cert.pem" ||
		c.TLSConfig.ClientKey != "env-key.pem" || c.TLSConfig.TLSServerName != "env.nomad" || c.TLSConfig.Insecure {
		t.Fatalf("environment not applied: %+v %+v", c, c.TLSConfig)
	}

	// Flags override the environment, field by field.
	c = ClientConfig{Address: "https://flag:4646", Region: "flag-region", Namespace: "*", Token: "flag-token",
		CACert: "flag-ca.pem", ClientCert: "flag-cert.pem", ClientKey: "flag-key.pem", TLSServerName: "flag.nomad", Insecure: true}.APIConfig()
	if c.Address != "https://flag:4646" || c.Region != "flag-region" || c.Namespace != "*" || c.SecretID != "flag-token" ||
		c.TLSConfig.CACert != "flag-ca.pem" || c.TLSConfig.CAPath != "env-ca-dir" || c.TLSConfig.ClientCert != "flag-cert.pem" ||
		c.TLSConfig.ClientKey != "flag-key.pem" || c.TLSConfig.TLSServerName != "flag.nomad" || !c.TLSConfig.Insecure {
		t.Fatalf("flags not applied: %+v %+v", c, c.TLSConfig)
	}

	t.Setenv("NOMAD_SKIP_VERIFY", "true")
	if !(ClientConfig{}).APIConfig().TLSConfig.Insecure {
		t.Fatal("NOMAD_SKIP_VERIFY not applied")
	}
}

func TestNewClientReportsBadTLSFiles(t *testing.T) {
	t.Setenv("NOMAD_CACERT", "")
	t.Setenv("NOMAD_CAPATH", "")
	t.Setenv("NOMAD_CLIENT_CERT", "")
	t.Setenv("NOMAD_CLIENT_KEY", "")
	_, err := NewClient(ClientConfig{Address: "https://127.0.0.1:4646", ClientCert: "missing-cert.pem"})
	if err == nil || !strings.Contains(err.Error(), "https://127.0.0.1:4646") {
		t.Fatalf("want an error naming the address, got %v", err)
	}
	c, err := NewClient(ClientConfig{Address: "http://127.0.0.1:4646"})
	if err != nil || c.Address() != "http://127.0.0.1:4646" {
		t.Fatalf("got %v, %v", c, err)
	}
}

func TestReachable(t *testing.T) {
	n, rec := fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { jsonAt(w, 1, "127.0.0.1:4647") })
	if err := Reachable(context.Background(), n.client); err != nil {
		t.Fatal(err)
	}
	if p := rec.seen()[0].URL.Path; p != "/v1/status/leader" {
		t.Fatalf("asked %s", p)
	}

	n, _ = fakeNomad(t, func(w http.ResponseWriter, r *http.Request) { plain(w, 500, "No cluster leader") })
	err := Reachable(context.Background(), n.client)
	if err == nil || errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "No cluster leader") {
		t.Fatalf("an agent without leader answered: got %v", err)
	}

	addr := "http://" + simtest.ClosedAddr(t)
	client, err := NewClient(ClientConfig{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	err = Reachable(context.Background(), client)
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("want ErrUnreachable, got %v", err)
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "cannot reach Nomad at "+addr+": ") ||
		!strings.HasSuffix(msg, "; set -address or NOMAD_ADDR") || strings.Contains(msg, "\n") {
		t.Fatalf("message %q", msg)
	}
}

func TestObserveDatesHearsEachAnswersDate(t *testing.T) {
	dated := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			w.Header().Set("Date", "not a date")
		} else {
			w.Header().Set("Date", dated.Format(http.TimeFormat))
		}
		_, _ = w.Write([]byte("{}"))
	}))
	defer srv.Close()
	var heard []time.Time
	c := &http.Client{Transport: ObserveDates(http.DefaultTransport, func(d time.Time) { heard = append(heard, d) })}
	for _, p := range []string{"/good", "/bad"} {
		resp, err := c.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(heard) != 1 || !heard[0].Equal(dated) {
		t.Fatalf("heard %v, want only %v", heard, dated)
	}
	if ObserveDates(http.DefaultTransport, nil) != http.DefaultTransport {
		t.Fatal("without an observer the transport should be left as it is")
	}
}
