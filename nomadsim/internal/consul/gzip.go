package consul

import (
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
)

// gzipMinSize is the answer size from which Consul compresses: gziphandler's DefaultMinSize,
// which Consul's agent uses for every endpoint but its log and metrics streams.
const gzipMinSize = 1400

// withGzip compresses answers as Consul's agent does through NYTimes' gziphandler (v1.0.1):
//   - every answer gets "Vary: Accept-Encoding";
//   - a client that accepts gzip (a q-value above 0) gets the answer compressed once it
//     reaches 1400 bytes: Content-Encoding gzip, no Content-Length;
//   - a shorter answer goes out as written, its status held back until the end;
//   - a Content-Type the handler did not set is sniffed from the first bytes written.
func withGzip(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.ServeHTTP(w, r)
			return
		}
		gw := &gzipWriter{ResponseWriter: w}
		defer gw.close()
		h.ServeHTTP(gw, r)
	})
}

// acceptsGzip reads Accept-Encoding as gziphandler does: comma-separated codings, the last
// valid mention of gzip deciding, accepted when its q-value is above 0.
func acceptsGzip(header string) bool {
	q := 0.0
	for _, part := range strings.Split(header, ",") {
		if coding, qv, ok := parseCoding(part); ok && coding == "gzip" {
			q = qv
		}
	}
	return q > 0
}

// parseCoding is gziphandler's parseCoding, quirks included: each parameter resets the
// q-value to 1 before reading its own q=, and a q-value that does not parse voids the coding.
func parseCoding(s string) (coding string, q float64, ok bool) {
	ok = true
	for n, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		q = 1
		if n == 0 {
			coding = strings.ToLower(part)
			continue
		}
		if v, found := strings.CutPrefix(part, "q="); found {
			parsed, err := strconv.ParseFloat(v, 64)
			ok = ok && err == nil
			q = min(max(parsed, 0), 1)
		}
	}
	return coding, q, ok && coding != ""
}

// gzipWriter buffers an answer until it is long enough to compress.
type gzipWriter struct {
	http.ResponseWriter
	code int
	buf  []byte
	gz   *gzip.Writer
}

func (w *gzipWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *gzipWriter) Write(b []byte) (int, error) {
	if _, ok := w.Header()["Content-Type"]; !ok {
		w.Header().Set("Content-Type", http.DetectContentType(b))
	}
	if w.gz != nil {
		return w.gz.Write(b)
	}
	w.buf = append(w.buf, b...)
	if len(w.buf) >= gzipMinSize && w.Header().Get("Content-Encoding") == "" {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Del("Content-Length")
		if w.code != 0 {
			w.ResponseWriter.WriteHeader(w.code)
		}
		w.gz = gzip.NewWriter(w.ResponseWriter)
		if _, err := w.gz.Write(w.buf); err != nil {
			return 0, err
		}
		w.buf = nil
	}
	return len(b), nil
}

// close ends the answer: the gzip trailer, or the held status and short body as written.
func (w *gzipWriter) close() {
	if w.gz != nil {
		_ = w.gz.Close()
		return
	}
	if w.code != 0 {
		w.ResponseWriter.WriteHeader(w.code)
	}
	if w.buf != nil {
		_, _ = w.ResponseWriter.Write(w.buf)
	}
}
