package consul

import "testing"

func TestAcceptsGzip(t *testing.T) {
	tests := []struct {
		header string
		want   bool
	}{
		{"", false},
		{"gzip", true},
		{"GZIP", true},
		{"deflate, gzip;q=0.5", true},
		{"gzip;q=0", false},
		{"gzip;q=0, deflate", false},
		{"gzip;q=0;level=1", true}, // gziphandler resets the q-value at each parameter
		{"gzip;q=x", false},        // a q-value that does not parse voids the coding
		{"gzip, gzip;q=0", false},  // the last mention wins
		{"gzip;q=0, gzip;q=x", false},
		{"br, deflate", false},
	}
	for _, tc := range tests {
		if got := acceptsGzip(tc.header); got != tc.want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", tc.header, got, tc.want)
		}
	}
}
