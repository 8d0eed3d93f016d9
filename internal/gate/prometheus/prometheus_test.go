package prometheus

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/gate"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
)

// fakeAPI answers /api/v1/query as Prometheus does, with the body named by the query, and
// keeps the last request's form and Authorization header.
type fakeAPI struct {
	mu     sync.Mutex
	bodies map[string]string
	status map[string]int
	form   map[string]string
	auth   string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/prom/api/v1/query" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.form = map[string]string{"query": r.Form.Get("query"), "time": r.Form.Get("time"), "timeout": r.Form.Get("timeout")}
	f.auth = r.Header.Get("Authorization")
	q := r.Form.Get("query")
	body, ok := f.bodies[q]
	if !ok {
		w.WriteHeader(http.StatusBadRequest)
		msg, _ := json.Marshal(fmt.Sprintf(`invalid parameter "query": 1:1: parse error: unexpected %q`, q))
		fmt.Fprintf(w, `{"status":"error","errorType":"bad_data","error":%s}`, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if code := f.status[q]; code != 0 {
		w.WriteHeader(code)
	}
	fmt.Fprint(w, body)
}

func vector(samples ...string) string {
	return `{"status":"success","data":{"resultType":"vector","result":[` + strings.Join(samples, ",") + `]}}`
}

func series(labels, value string) string {
	return `{"metric":{` + labels + `},"value":[1772366400,"` + value + `"]}`
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{bodies: map[string]string{
		"scalar":  `{"status":"success","data":{"resultType":"scalar","result":[1772366400,"0.5"]}}`,
		"one":     vector(series(`"code":"500"`, "0.31")),
		"empty":   vector(),
		"nan":     vector(series(``, "NaN")),
		"inf":     vector(series(``, "+Inf")),
		"three":   vector(series(`"code":"500"`, "1"), series(`"code":"502"`, "2"), series(`"__name__":"x","code":"503"`, "3")),
		"four":    vector(series(`"code":"500"`, "1"), series(`"code":"502"`, "2"), series(`"code":"503"`, "3"), series(`"code":"504"`, "4")),
		"matrix":  `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1772366400,"1"]]}]}}`,
		"string":  `{"status":"success","data":{"resultType":"string","result":[1772366400,"hello"]}}`,
		"warned":  `{"status":"success","warnings":["PromQL info: metric might not be a counter"],"data":{"resultType":"vector","result":[` + series(``, "2") + `]}}`,
		"broken":  `{"status":"error","errorType":"execution","error":"expanding series: too many samples"}`,
		"slow":    `{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}`,
		"garbage": "<html>\n<h1>502 Bad Gateway</h1>\n</html>",
	}, status: map[string]int{"broken": http.StatusUnprocessableEntity, "slow": http.StatusServiceUnavailable, "garbage": http.StatusBadGateway}}
}

func TestPrometheusReadsOneNumber(t *testing.T) {
	api := newFakeAPI()
	srv := httptest.NewServer(api)
	defer srv.Close()
	p, err := New(Config{Address: srv.URL + "/prom/", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()
	at := time.Date(2026, 3, 1, 12, 0, 0, 500e6, time.UTC)

	good := []struct {
		query string
		want  gate.Sample
	}{
		{"scalar", gate.Sample{Value: 0.5}},
		{"one", gate.Sample{Value: 0.31}},
		{"empty", gate.Sample{Empty: true}},
		{"inf", gate.Sample{Value: math.Inf(1)}},
	}
	for _, tt := range good {
		got, err := p.Query(ctx, tt.query, at)
		if err != nil || got.Value != tt.want.Value || got.Empty != tt.want.Empty {
			t.Errorf("%s: %+v, %v; want %+v", tt.query, got, err, tt.want)
		}
	}
	if api.form["time"] != "1772366400.5" || api.form["timeout"] != "5s" {
		t.Errorf("sent %v: want the evaluation time and the timeout", api.form)
	}
	// NaN is passed on as it came; Judge counts it as no data.
	if got, err := p.Query(ctx, "nan", at); err != nil || !math.IsNaN(got.Value) || got.Empty || errorsGate.Judge(got) != gate.VerdictNoData {
		t.Errorf("nan: %+v, %v", got, err)
	}
	if got, err := p.Query(ctx, "warned", at); err != nil || got.Value != 2 || len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], "might not be a counter") {
		t.Errorf("warned: %+v, %v", got, err)
	}
	if _, err := p.Query(ctx, "one", time.Time{}); err != nil || api.form["time"] != "" {
		t.Errorf("a zero time is Prometheus's now: sent %v, %v", api.form, err)
	}

	bad := []struct{ query, want string }{
		{"three", `query returned 3 series, want 1: {code="500"}, {code="502"}, x{code="503"}; aggregate it, e.g. sum(...)`},
		{"four", `query returned 4 series, want 1: {code="500"}, {code="502"}, {code="503"}, …; aggregate it, e.g. sum(...)`},
		{"matrix", "query returned a range vector, want one number"},
		// The client reads no string result, and says so.
		{"string", "querying Prometheus at " + srv.URL + `/prom: bad_response: unexpected value type "string"`},
		{"sum(", "querying Prometheus at " + srv.URL + `/prom: bad_data: invalid parameter "query": 1:1: parse error: unexpected "sum("`},
		{"broken", "querying Prometheus at " + srv.URL + "/prom: execution: expanding series: too many samples"},
		{"slow", "querying Prometheus at " + srv.URL + "/prom: server_error: server error: 503 (timeout: query timed out in expression evaluation)"},
		{"garbage", "querying Prometheus at " + srv.URL + "/prom: server_error: server error: 502 (<html> <h1>502 Bad Gateway</h1> </html>)"},
	}
	for _, tt := range bad {
		_, err := p.Query(ctx, tt.query, at)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line starting %q", tt.query, err, tt.want)
		}
	}
}

func TestPrometheusDownAndSlow(t *testing.T) {
	addr := simtest.ClosedAddr(t)
	err := queryOn(t, Config{Address: "http://" + addr}, "up")
	if err == nil || !strings.HasPrefix(err.Error(), "querying Prometheus at http://"+addr+": ") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Prometheus down: %v", err)
	}

	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	defer srv.Close()
	defer close(hang)
	want := "Prometheus at " + srv.URL + " did not answer within 100ms; check -prometheus-address, or raise -request-timeout"
	if err := queryOn(t, Config{Address: srv.URL, Timeout: 100 * time.Millisecond}, "up"); err == nil || err.Error() != want {
		t.Fatalf("a hung Prometheus: %v, want %q", err, want)
	}
}

// TestPrometheusNotItsAPI: something else answering at the address (a login page, another
// service's JSON) is one line naming the address and what answered.
func TestPrometheusNotItsAPI(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body, want string
	}{
		{"a login page", "text/html", "<html><head><title>Login</title></head></html>",
			` answered with text/html ("<html><head><title>Login</title></head><"...), not Prometheus's API; check -prometheus-address`},
		{"another service's JSON", "application/json", `{"status":"ok"}`,
			` answered with application/json ("{\"status\":\"ok\"}"), not Prometheus's API (no "data" in the answer); check -prometheus-address`},
		{"broken JSON", "application/json", `{"status":`,
			` answered with application/json ("{\"status\":"), not Prometheus's API (bad_response: unexpected end of JSON input); check -prometheus-address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.contentType)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			if err := queryOn(t, Config{Address: srv.URL}, "up"); err == nil || err.Error() != srv.URL+tc.want {
				t.Fatalf("got  %v\nwant %s", err, srv.URL+tc.want)
			}
		})
	}
}

func TestPrometheusBearerToken(t *testing.T) {
	api := newFakeAPI()
	srv := httptest.NewServer(api)
	defer srv.Close()
	addr := srv.URL + "/prom"

	p, err := New(Config{Address: addr, BearerToken: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Query(context.Background(), "one", time.Time{}); err != nil || api.auth != "Bearer s3cret" {
		t.Fatalf("sent %q, %v", api.auth, err)
	}

	file := filepath.Join(t.TempDir(), "token")
	writeFile(t, file, "first\n")
	p, err = New(Config{Address: addr, BearerTokenFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Query(context.Background(), "one", time.Time{}); err != nil || api.auth != "Bearer first" {
		t.Fatalf("sent %q, %v", api.auth, err)
	}
	writeFile(t, file, "rotated")
	if _, err := p.Query(context.Background(), "one", time.Time{}); err != nil || api.auth != "Bearer rotated" {
		t.Fatalf("after rotation sent %q, %v", api.auth, err)
	}
	os.Remove(file)
	if _, err := p.Query(context.Background(), "one", time.Time{}); err == nil || !strings.Contains(err.Error(), "prometheus bearer token: ") {
		t.Fatalf("token file gone: %v", err)
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestPrometheusTLS(t *testing.T) {
	dir := t.TempDir()
	api := newFakeAPI()
	srv := httptest.NewUnstartedServer(api)
	// One self-signed certificate is the client's and its own CA: the server asks for it.
	clientCert, clientKey := selfSigned(t, dir)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(readFile(t, clientCert))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are expected
	srv.StartTLS()
	defer srv.Close()
	caFile := filepath.Join(dir, "ca.pem")
	writeFile(t, caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))
	addr := srv.URL + "/prom"

	query := func(cfg Config) error { return queryOn(t, cfg, "one") }
	if err := query(Config{Address: addr, CACert: caFile, ClientCert: clientCert, ClientKey: clientKey}); err != nil {
		t.Fatalf("mutual TLS: %v", err)
	}
	if err := query(Config{Address: addr, InsecureSkipVerify: true, ClientCert: clientCert, ClientKey: clientKey}); err != nil {
		t.Fatalf("skipping verification: %v", err)
	}
	if err := query(Config{Address: addr, ClientCert: clientCert, ClientKey: clientKey}); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a server certificate from an unknown CA: %v", err)
	}
	if err := query(Config{Address: addr, CACert: caFile}); err == nil {
		t.Fatal("no client certificate was accepted")
	}
}

// selfSigned writes a self-signed client certificate and its key.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nomad-restart"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return certFile, keyFile
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	empty := filepath.Join(dir, "empty")
	writeFile(t, notPEM, "hello")
	writeFile(t, empty, " \n")
	tests := []struct {
		cfg  Config
		want string
	}{
		{Config{}, `prometheus address "": want an http:// or https:// URL, e.g. http://prometheus.service.consul:9090`},
		{Config{Address: "localhost:9090"}, `prometheus address "localhost:9090": want an http:// or https:// URL`},
		{Config{Address: "prometheus:9090"}, `want an http:// or https:// URL`},
		{Config{Address: "ftp://p"}, `want an http:// or https:// URL`},
		{Config{Address: "http://"}, `want an http:// or https:// URL`},
		{Config{Address: "http://p:9090 x"}, `want an http:// or https:// URL`},
		{Config{Address: "http://p", BearerToken: "a", BearerTokenFile: "b"}, "prometheus: give a bearer token or a bearer token file, not both"},
		{Config{Address: "http://p", BearerTokenFile: filepath.Join(dir, "none")}, "prometheus bearer token: open "},
		{Config{Address: "http://p", BearerTokenFile: empty}, "prometheus bearer token file " + empty + " is empty"},
		{Config{Address: "http://p", CACert: notPEM}, `prometheus address "http://p": the TLS options need an https:// address`},
		{Config{Address: "https://p", CACert: filepath.Join(dir, "none")}, "prometheus CA certificate: open "},
		{Config{Address: "https://p", CACert: notPEM}, "prometheus CA certificate " + notPEM + ": no PEM certificate in it"},
		{Config{Address: "https://p", ClientCert: notPEM}, "prometheus client certificate: give both the certificate and its key"},
		{Config{Address: "https://p", ClientCert: notPEM, ClientKey: notPEM}, "prometheus client certificate: tls: "},
		{Config{Address: "http://p", Timeout: -time.Second}, "prometheus timeout -1s: use a positive duration, or 0 for 10s"},
	}
	for _, tt := range tests {
		_, err := New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error containing %q", tt.cfg, err, tt.want)
		}
	}
}

func TestPrometheusMasksThePasswordOfItsAddress(t *testing.T) {
	addr := simtest.ClosedAddr(t)
	if err := queryOn(t, Config{Address: "http://user:hunter2@" + addr}, "up"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %v shows the password", err)
	}
}

// queryOn is what querying promql on a client of cfg answers.
func queryOn(t *testing.T, cfg Config, promql string) error {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = p.Query(context.Background(), promql, time.Time{})
	return err
}

// errorsGate is an error-ratio gate, for judging what a query returns.
var errorsGate = gate.Spec{Name: "errors", PromQL: "rate", Op: gate.OpLess, Threshold: 0.02}
