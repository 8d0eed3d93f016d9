package conformance

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

// TestConsulKVCompression checks Consul's gzip (gziphandler, 1400-byte minimum): Vary on
// every answer, compression only for a client that accepts gzip and an answer that long.
func TestConsulKVCompression(t *testing.T) {
	forEachConsul(t, func(t *testing.T, tg *consulTarget) {
		big, small := tg.key(t, "big"), tg.key(t, "small")
		tg.put(t, big, strings.Repeat("consul ", 300), 0) // 2100 bytes, more once in base64
		tg.put(t, small, "tiny", 0)
		tests := []struct {
			name, path, accept string
			code               int
			gzipped            bool
		}{
			{"long answer", "/v1/kv/" + big, "gzip", 200, true},
			{"long raw value", "/v1/kv/" + big + "?raw", "gzip", 200, true},
			{"long answer, gzip refused", "/v1/kv/" + big, "gzip;q=0", 200, false},
			{"long answer, gzip not asked", "/v1/kv/" + big, "", 200, false},
			{"long answer, q-value reset by a later parameter", "/v1/kv/" + big, "gzip;q=0;level=1", 200, true},
			{"short answer", "/v1/kv/" + small, "gzip", 200, false},
			{"not found", "/v1/kv/" + tg.key(t, "missing"), "gzip", 404, false},
		}
		for _, tc := range tests {
			r := tg.getEncoded(t, tc.path, tc.accept)
			where := tc.name + " (" + tc.path + ", Accept-Encoding " + tc.accept + ")"
			if r.status != tc.code || r.header.Get("Vary") != "Accept-Encoding" {
				t.Errorf("%s: %d Vary %q, want %d varying on Accept-Encoding", where, r.status, r.header.Get("Vary"), tc.code)
			}
			gzipped := r.header.Get("Content-Encoding") == "gzip"
			if gzipped != tc.gzipped {
				t.Errorf("%s: Content-Encoding %q, want gzip %v", where, r.header.Get("Content-Encoding"), tc.gzipped)
				continue
			}
			if gzipped {
				zr, err := gzip.NewReader(bytes.NewReader(r.body))
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				if plain, err := io.ReadAll(zr); err != nil || !bytes.Contains(plain, []byte("consul")) && !bytes.Contains(plain, []byte("Y29uc3Vs")) {
					t.Errorf("%s: gunzipped %.100q %v", where, plain, err)
				}
			}
		}
		// The mux's redirects come before compression: they do not vary.
		if r := tg.getEncoded(t, "/v1/kv", "gzip"); r.status != 307 || r.header.Get("Vary") != "" {
			t.Errorf("redirect: %d Vary %q, want 307 without Vary", r.status, r.header.Get("Vary"))
		}
	})
}

// getEncoded sends a GET with the given Accept-Encoding ("" for none) and reads the answer
// as sent, compressed or not.
func (tg *consulTarget) getEncoded(t *testing.T, path, accept string) rawResponse {
	t.Helper()
	r, err := sendRaw(t.Context(), tg.http, "GET", tg.addr+path, nil, map[string]string{"Accept-Encoding": accept})
	if err != nil {
		t.Fatal(err)
	}
	return r
}
