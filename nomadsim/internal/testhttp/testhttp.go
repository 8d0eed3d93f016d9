// Package testhttp holds the HTTP helpers that the tests of nomadsim's packages share: raw
// exchanges, for what the official api clients hide (status codes, headers, bodies), and
// official api clients. Only tests import it.
package testhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// Response is an HTTP answer read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// Exchange sends a request with client (http.DefaultClient when nil) and reads the whole
// answer. It sets each header whose value is not "" (an absent token, an Accept-Encoding
// left to the client). It returns failures instead of ending a test, so that any
// goroutine may use it.
func Exchange(ctx context.Context, client *http.Client, method, url string, body io.Reader, header map[string]string) (Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return Response{}, fmt.Errorf("build %s %s: %w", method, url, err)
	}
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: %w", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: read body: %w", method, url, err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}, nil
}

// NomadClient is an official api client for the Nomad agent at addr, sending token ("" for
// none); a failure ends the test.
func NomadClient(t testing.TB, addr, token string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = addr
	cfg.SecretID = token
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("api client for %s: %v", addr, err)
	}
	return c
}
