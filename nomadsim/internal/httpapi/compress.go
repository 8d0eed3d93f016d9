package httpapi

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// Response compression as Nomad's agent does it. Nomad 2.0.5 serves its whole HTTP mux
// through gorilla/handlers.CompressHandler (command/agent/http.go), which:
//   - adds "Vary: Accept-Encoding" to every answer, compressed or not;
//   - compresses when the first of the Accept-Encoding tokens that is exactly "gzip" or
//     "deflate" names one ("gzip;q=1.0" names none), unless the request asks for an Upgrade;
//   - compresses every answer then, whatever its size, content type or status (errors too;
//     an empty body still gets gzip's header and trailer), at the default level;
//   - drops Content-Length, sniffs a Content-Type from the uncompressed bytes when the
//     handler set none, and flushes the compressor before the connection on Flush.
//
// The one answer that escapes it is the event stream: Nomad hijacks the connection and
// writes the stream raw, keeping the headers set so far but deleting Content-Encoding.
//
// This is written on the standard library rather than on gorilla/handlers: the event stream
// must leave the compressor without hijacking the connection (which would take the stream
// out of net/http's hands and change when it notices its client going away), and gorilla's
// writer offers no such exit.

const (
	headerAcceptEncoding  = "Accept-Encoding"
	headerContentEncoding = "Content-Encoding"
	encodingGzip          = "gzip"
	encodingDeflate       = "deflate"
)

// acceptedEncoding is the encoding gorilla's handler picks from an Accept-Encoding header:
// the first comma-separated token that is exactly "gzip" or "deflate", or "".
func acceptedEncoding(header string) string {
	for _, enc := range strings.Split(header, ",") {
		enc = strings.TrimSpace(enc)
		if enc == encodingGzip || enc == encodingDeflate {
			return enc
		}
	}
	return ""
}

// compressResponse prepares w for r as Nomad's agent does. It returns the writer the
// handler must use and a function to call when the handler is done, which ends the
// compressed stream (its trailer is part of the answer's bytes).
func compressResponse(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, func()) {
	w.Header().Add("Vary", headerAcceptEncoding)
	encoding := acceptedEncoding(r.Header.Get(headerAcceptEncoding))
	if encoding == "" || r.Header.Get("Upgrade") != "" {
		return w, func() {}
	}
	var enc io.WriteCloser
	if encoding == encodingGzip {
		enc, _ = gzip.NewWriterLevel(w, gzip.DefaultCompression) // the level is valid
	} else {
		enc, _ = flate.NewWriter(w, flate.DefaultCompression) // the level is valid
	}
	w.Header().Set(headerContentEncoding, encoding)
	cw := &compressWriter{ResponseWriter: w, enc: enc}
	return cw, cw.finish
}

// compressWriter compresses a response body on its way to the writer underneath.
type compressWriter struct {
	http.ResponseWriter
	enc io.WriteCloser // nil once the answer went uncompressed
}

// flusher is what gzip.Writer and flate.Writer offer to push out what they hold.
type flusher interface{ Flush() error }

func (w *compressWriter) WriteHeader(code int) {
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(code)
}

func (w *compressWriter) Write(b []byte) (int, error) {
	if w.enc == nil {
		return w.ResponseWriter.Write(b)
	}
	h := w.Header()
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", http.DetectContentType(b))
	}
	h.Del("Content-Length")
	n, err := w.enc.Write(b)
	if err != nil {
		return n, fmt.Errorf("compressing the response: %w", err)
	}
	return n, nil
}

func (w *compressWriter) Flush() {
	if f, ok := w.enc.(flusher); ok {
		_ = f.Flush() // a failed write shows on the next one
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *compressWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("hijack not supported")
	}
	conn, rw, err := h.Hijack()
	if err == nil {
		// The connection is the caller's now: nothing more goes through the compressor.
		w.enc = nil
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *compressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// uncompressed sends the rest of the answer as it is, as Nomad's event stream does: the
// Vary header stays, Content-Encoding goes. It must come before anything is written.
func (w *compressWriter) uncompressed() {
	w.Header().Del(headerContentEncoding)
	w.enc = nil
}

// finish ends the compressed stream, writing what the compressor holds and its trailer.
func (w *compressWriter) finish() {
	if w.enc != nil {
		_ = w.enc.Close() // the answer is over: a failed write has no one left to tell
	}
}

// uncompressedResponse makes w send the rest of its answer uncompressed, when it would
// otherwise compress it.
func uncompressedResponse(w http.ResponseWriter) {
	if cw, ok := w.(*compressWriter); ok {
		cw.uncompressed()
	}
}
