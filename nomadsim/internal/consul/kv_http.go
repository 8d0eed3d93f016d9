package consul

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

const (
	// kvAllow is the Allow header of /v1/kv/: Consul's registered methods plus OPTIONS.
	kvAllow = "OPTIONS,GET,PUT,DELETE"
	// kvMaxValueSize is Consul's default limits.kv_max_value_size (raft's suggested
	// maximum entry size).
	kvMaxValueSize = 512 * 1024
)

// kvRequest is a parsed /v1/kv/ request.
type kvRequest struct {
	key    string // the path after /v1/kv/, a key or a prefix
	dc     string
	q      simhttp.Query
	params url.Values
}

func (k kvRequest) has(param string) bool {
	_, ok := k.params[param]
	return ok
}

// serveKV answers /v1/kv/ as Consul's KVSEndpoint does: GET reads a key, ?recurse a prefix,
// ?keys the key names under a prefix (cut at ?separator); PUT writes (?flags, ?cas) and
// DELETE removes (?recurse, ?cas). Reads are blocking queries over Consul's KV indexes.
func (c *Catalog) serveKV(w http.ResponseWriter, r *http.Request) {
	setAgentHeaders(w)
	switch r.Method {
	case http.MethodOptions:
		w.Header().Set("Allow", kvAllow)
		return
	case http.MethodGet, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", kvAllow)
		kvError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed", r.Method))
		return
	}
	req, ok := parseKVRequest(w, r)
	if !ok {
		return
	}
	switch {
	case r.Method == http.MethodGet && req.has("keys"):
		c.serveKVKeys(w, r, req)
	case r.Method == http.MethodGet:
		c.serveKVGet(w, r, req)
	case r.Method == http.MethodPut:
		c.serveKVPut(w, r, req)
	default:
		c.serveKVDelete(w, r, req)
	}
}

// parseKVRequest reads what Consul's HTTPHandlers.parse reads, in its order: the
// datacenter (?datacenter before ?dc), the consistency options, then ?wait and ?index.
func parseKVRequest(w http.ResponseWriter, r *http.Request) (kvRequest, bool) {
	params := r.URL.Query()
	req := kvRequest{key: strings.TrimPrefix(r.URL.Path, "/v1/kv/"), dc: Datacenter, params: params}
	if dc := params.Get("datacenter"); dc != "" {
		req.dc = dc
	} else if dc := params.Get("dc"); dc != "" {
		req.dc = dc
	}
	if s := params.Get("max_stale"); s != "" {
		if _, err := time.ParseDuration(s); err != nil {
			badRequest(w, fmt.Sprintf("Invalid max_stale value %q", s))
			return req, false
		}
	}
	if req.has("stale") && req.has("consistent") {
		badRequest(w, "Cannot specify ?stale with ?consistent, conflicting semantics.")
		return req, false
	}
	q, ok := parseQuery(w, r)
	req.q = q
	return req, ok
}

// reachDC fails a request for another datacenter as a lone Consul does: it knows no route
// to any, so forwarding the RPC fails with a 500.
func reachDC(w http.ResponseWriter, req kvRequest) bool {
	if req.dc == Datacenter {
		return true
	}
	kvError(w, http.StatusInternalServerError, "No path to datacenter")
	return false
}

func (c *Catalog) serveKVGet(w http.ResponseWriter, r *http.Request, req kvRequest) {
	recurse := req.has("recurse")
	if !recurse && req.key == "" {
		kvError(w, http.StatusBadRequest, "Missing key name")
		return
	}
	if !communityEdition(w, r) || !reachDC(w, req) {
		return
	}
	read := func() kvRead { return c.kv.get(req.key) }
	if recurse {
		read = func() kvRead { return c.kv.list(req.key) }
	}
	res, err := c.kv.block(r.Context(), req.q, read)
	if err != nil {
		return // the client went away
	}
	setKVMeta(w, res.index)
	if len(res.entries) == 0 {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if req.has("raw") && !recurse {
		writeRaw(w, res.entries[0].Value)
		return
	}
	writeKVJSON(w, req, res.entries)
}

// writeRaw answers a key's bare value with the headers Consul sets against XSS.
func writeRaw(w http.ResponseWriter, value []byte) {
	h := w.Header()
	h.Set("Content-Length", strconv.Itoa(len(value)))
	h.Set("Content-Type", "text/plain")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox")
	_, _ = w.Write(value)
}

func (c *Catalog) serveKVKeys(w http.ResponseWriter, r *http.Request, req kvRequest) {
	if !communityEdition(w, r) || !reachDC(w, req) {
		return
	}
	// Consul reads both spellings; the correct one wins.
	sep := req.params.Get("seperator")
	if req.has("separator") {
		sep = req.params.Get("separator")
	}
	res, err := c.kv.block(r.Context(), req.q, func() kvRead { return c.kv.list(req.key) })
	if err != nil {
		return
	}
	setKVMeta(w, res.index)
	keys := keyList(res.entries, req.key, sep)
	if len(keys) == 0 && req.key != "" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	writeKVJSON(w, req, keys)
}

// keyList is KVS.ListKeys' answer: the keys under prefix, each cut after the first
// separator that follows the prefix (once per distinct result), in key order.
func keyList(entries []*kvEntry, prefix, sep string) []string {
	keys := []string{}
	seen := map[string]bool{}
	for _, e := range entries {
		key := e.Key
		if sep != "" {
			if i := strings.Index(key[len(prefix):], sep); i >= 0 {
				key = key[:len(prefix)+i+len(sep)]
			}
		}
		if !seen[key] {
			seen[key] = true
			keys = append(keys, key)
		}
	}
	return keys
}

func (c *Catalog) serveKVPut(w http.ResponseWriter, r *http.Request, req kvRequest) {
	if !communityEdition(w, r) {
		return
	}
	if req.key == "" {
		kvError(w, http.StatusBadRequest, "Missing key name")
		return
	}
	if conflictingFlags(w, req.params, "cas", "acquire", "release") {
		return
	}
	flags, ok := uintParam(w, req, "flags")
	if !ok {
		return
	}
	cas, ok := uintParam(w, req, "cas")
	if !ok {
		return
	}
	if r.ContentLength > kvMaxValueSize {
		kvError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"Request body(%d bytes) too large, max size: %d bytes. See %s.", r.ContentLength, kvMaxValueSize,
			"https://www.consul.io/docs/agent/config/config-files#kv_max_value_size"))
		return
	}
	value, err := io.ReadAll(r.Body)
	if err != nil {
		kvError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if len(value) == 0 {
		value = nil // Consul stores an empty body as no value: it reads back as null
	}
	if !reachDC(w, req) {
		return
	}
	if msg, ok := sessionError(req); ok {
		c.kv.apply(func(uint64) bool { return false }) // the Raft entry is applied, and fails
		kvError(w, http.StatusInternalServerError, "raft apply failed: "+msg)
		return
	}
	if req.has("release") {
		// No key can be locked without sessions, so a release never applies.
		writeKVJSON(w, req, c.kv.apply(func(uint64) bool { return false }))
		return
	}
	if req.has("cas") {
		writeKVJSON(w, req, c.kv.apply(func(i uint64) bool { return c.kv.setCAS(i, req.key, value, flags, cas) }))
		return
	}
	c.kv.apply(func(i uint64) bool { c.kv.set(i, req.key, value, flags); return true })
	writeKVJSON(w, req, true)
}

// sessionError is the error Consul's state store gives a lock operation when the sim has no
// sessions: any ?acquire names an unknown session, and either needs one named.
func sessionError(req kvRequest) (string, bool) {
	switch {
	case req.has("acquire") && req.params.Get("acquire") == "", req.has("release") && req.params.Get("release") == "":
		return "missing session", true
	case req.has("acquire"):
		return fmt.Sprintf("invalid session %q", req.params.Get("acquire")), true
	}
	return "", false
}

func (c *Catalog) serveKVDelete(w http.ResponseWriter, r *http.Request, req kvRequest) {
	if !communityEdition(w, r) || conflictingFlags(w, req.params, "recurse", "cas") {
		return
	}
	recurse := req.has("recurse")
	if !recurse && req.key == "" {
		kvError(w, http.StatusBadRequest, "Missing key name")
		return
	}
	cas, ok := uintParam(w, req, "cas")
	if !ok || !reachDC(w, req) {
		return
	}
	switch {
	case req.has("cas"):
		writeKVJSON(w, req, c.kv.apply(func(i uint64) bool { return c.kv.delCAS(i, req.key, cas) }))
	case recurse:
		c.kv.apply(func(i uint64) bool { c.kv.delTree(i, req.key); return true })
		writeKVJSON(w, req, true)
	default:
		c.kv.apply(func(i uint64) bool { c.kv.del(i, req.key); return true })
		writeKVJSON(w, req, true)
	}
}

// communityEdition refuses namespaces and admin partitions as Consul's community edition
// does, which the sim's Consul is.
func communityEdition(w http.ResponseWriter, r *http.Request) bool {
	for _, f := range []struct{ header, param, feature string }{
		{"X-Consul-Namespace", "ns", "Namespaces are"},
		{"X-Consul-Partition", "partition", "Partitions are"},
	} {
		if r.Header.Get(f.header) != "" {
			kvError(w, http.StatusBadRequest, fmt.Sprintf("Invalid header: %q - %s a Consul Enterprise feature", f.header, f.feature))
			return false
		}
		if r.URL.Query().Get(f.param) != "" {
			kvError(w, http.StatusBadRequest, fmt.Sprintf("Invalid query parameter: %q - %s a Consul Enterprise feature", f.param, f.feature))
			return false
		}
	}
	return true
}

// uintParam reads an unsigned query parameter; Consul answers a malformed one with a 500
// carrying strconv's error.
func uintParam(w http.ResponseWriter, req kvRequest, name string) (uint64, bool) {
	if !req.has(name) {
		return 0, true
	}
	n, err := strconv.ParseUint(req.params.Get(name), 10, 64)
	if err != nil {
		kvError(w, http.StatusInternalServerError, err.Error())
		return 0, false
	}
	return n, true
}

// conflictingFlags refuses a request with more than one of flags, in Consul's words.
func conflictingFlags(w http.ResponseWriter, params url.Values, flags ...string) bool {
	found := 0
	for _, f := range flags {
		if _, ok := params[f]; ok {
			found++
		}
	}
	if found < 2 {
		return false
	}
	kvError(w, http.StatusBadRequest, "Conflicting flags: "+params.Encode()+"\n")
	return true
}

// setKVMeta writes the query headers of a KV read, as a leader answers them. Unlike the
// health endpoints, Consul's KV endpoint reports no X-Consul-Effective-Consistency; its
// reads are always plain blocking queries (never the streaming backend).
func setKVMeta(w http.ResponseWriter, index uint64) {
	w.Header().Set("X-Consul-Index", strconv.FormatUint(max(index, 1), 10))
	w.Header().Set("X-Consul-KnownLeader", "true")
	w.Header().Set("X-Consul-LastContact", "0")
	w.Header().Set("X-Consul-Query-Backend", "blocking-query")
}

// writeKVJSON answers 200 with v encoded as a Consul agent outside dev mode does: compact,
// without a trailing newline; with ?pretty, indented by four spaces and ending in one.
func writeKVJSON(w http.ResponseWriter, req kvRequest, v any) {
	var b []byte
	var err error
	if req.has("pretty") {
		b, err = json.MarshalIndent(v, "", "    ")
		b = append(b, '\n')
	} else {
		b, err = json.Marshal(v)
	}
	if err != nil {
		kvError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// kvError answers an error as Consul's HTTP layer does: plain text, the message alone.
func kvError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}
