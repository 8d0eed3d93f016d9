package agenttest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Get and Post reach an agent's page over HTTP, as a browser and the page's script do.

// Get reads url, which must answer code, and returns the body.
func Get(t testing.TB, url string, code int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(Context(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, body, err := do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if got != code {
		t.Fatalf("GET %s: %d, want %d: %s", url, got, code, body)
	}
	return body
}

// Post sends body to url as the page's script does (JSON), with the extra headers, and
// returns the status and the body of the answer.
func Post(t testing.TB, url string, headers map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(Context(t), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	code, answer, err := do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	return code, answer
}

func do(req *http.Request) (int, string, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}
