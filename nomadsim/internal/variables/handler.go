package variables

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// Handler serves GET /v1/vars and GET, PUT, POST and DELETE /v1/var/<path>, with ?cas= and
// ?lock-acquire, ?lock-renew, ?lock-release, as Nomad's agent does.
func (s *Store) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/vars":
			s.serveList(w, r)
		case strings.HasPrefix(r.URL.Path, "/v1/var/"):
			s.serveVariable(w, r, strings.TrimPrefix(r.URL.Path, "/v1/var/"))
		default:
			simhttp.WriteError(w, simhttp.Errorf(http.StatusNotFound, "Invalid URL"))
		}
	})
}

func badRequest(msg string) error { return simhttp.Errorf(http.StatusBadRequest, msg) }

func permissionDenied() error { return acl.ErrPermissionDenied() }

// writeErrorIndexed answers an error with an X-Nomad-Index header, as Nomad's write
// handlers do on failed writes (the index of a write that did not happen: 0).
func writeErrorIndexed(w http.ResponseWriter, err error, idx uint64) {
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	simhttp.WriteError(w, err)
}

// writeConflict answers 409 with the conflicting variable as its body. Nomad writes the
// status before the body's content type is set, so the type is sniffed as plain text.
func writeConflict(w http.ResponseWriter, body any, idx *uint64) {
	if idx != nil {
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(*idx, 10))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusConflict)
	_ = json.NewEncoder(w).Encode(body)
}

func writeOK(w http.ResponseWriter, body any, idx *uint64) {
	if idx != nil {
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(*idx, 10))
	}
	simhttp.WriteJSON(w, body)
}

func (s *Store) serveVariable(w http.ResponseWriter, r *http.Request, path string) {
	if path == "" {
		simhttp.WriteError(w, badRequest("missing variable path"))
		return
	}
	switch r.Method {
	case http.MethodGet:
		s.serveRead(w, r, path)
	case http.MethodPut, http.MethodPost:
		lockOp, err := lockOperation(r)
		if err != nil {
			simhttp.WriteError(w, badRequest(err.Error()))
			return
		}
		if r.URL.Query().Get("cas") != "" && lockOp != "" {
			simhttp.WriteError(w, badRequest("CAS can't be used with lock operations"))
			return
		}
		switch lockOp {
		case "":
			s.serveUpsert(w, r, path)
		case "lock-renew":
			s.serveRenew(w, r, path)
		default:
			s.serveLockOp(w, r, path, op(lockOp))
		}
	case http.MethodDelete:
		s.serveDelete(w, r, path)
	default:
		simhttp.WriteError(w, badRequest("Invalid method"))
	}
}

// lockOperation reads which of the lock parameters the request names; more than one is an
// error.
func lockOperation(r *http.Request) (string, error) {
	q := r.URL.Query()
	var found []string
	for _, p := range []string{"lock-renew", "lock-acquire", "lock-release"} {
		if _, ok := q[p]; ok {
			found = append(found, p)
		}
	}
	switch len(found) {
	case 0:
		return "", nil
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("multiple lock operations")
}

func parseCAS(r *http.Request) (bool, uint64, error) {
	cq := r.URL.Query().Get("cas")
	if cq == "" {
		return false, 0, nil
	}
	ci, err := strconv.ParseUint(cq, 10, 64)
	if err != nil {
		return true, 0, badRequest(fmt.Sprintf("can not parse cas: %v", err))
	}
	return true, ci, nil
}

// requestNamespace is the namespace of a write: the body's if it names one, else the
// query's, else "default".
func requestNamespace(r *http.Request, body string) string {
	if body != "" {
		return body
	}
	if ns := r.URL.Query().Get("namespace"); ns != "" {
		return ns
	}
	return "default"
}

// readQuery reads the front of a read: the common query options, then the caller's token;
// it answers either's error itself.
func (s *Store) readQuery(w http.ResponseWriter, r *http.Request) (simhttp.Query, *acl.Token, bool) {
	q, err := simhttp.ParseQuery(r)
	if err != nil {
		simhttp.WriteError(w, err)
		return q, nil, false
	}
	tok, err := s.acl.ResolveRequest(r)
	if err != nil {
		simhttp.WriteError(w, err)
		return q, nil, false
	}
	return q, tok, true
}

func (s *Store) serveRead(w http.ResponseWriter, r *http.Request, path string) {
	q, tok, ok := s.readQuery(w, r)
	if !ok {
		return
	}
	if !tok.AllowVariable(q.Namespace, path, acl.VariablesRead) {
		simhttp.WriteError(w, permissionDenied())
		return
	}
	got, v, err := simhttp.Block(r.Context(), s.idx, q, nil, func() (uint64, any, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		cur, ok := s.vars[key{q.Namespace, path}]
		if !ok {
			return s.tableIndex, nil, nil
		}
		// Only management tokens see a lock on a read.
		return cur.modifyIndex, cur.wire(tok.Management()), nil
	})
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	simhttp.SetMeta(w, got, true, 0)
	if v == nil || v.(*varJSON) == nil {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusNotFound, "variable not found"))
		return
	}
	simhttp.WriteJSON(w, v)
}

// authorizeWrite resolves the caller and checks the capability a write needs.
func (s *Store) authorizeWrite(r *http.Request, namespace, path, capability string) (*acl.Token, error) {
	tok, err := s.acl.ResolveRequest(r)
	if err != nil {
		return nil, err
	}
	if !tok.AllowVariable(namespace, path, capability) {
		return nil, permissionDenied()
	}
	return tok, nil
}

func (s *Store) serveUpsert(w http.ResponseWriter, r *http.Request, path string) {
	req, ok := decodeWrite(w, r)
	if !ok {
		return
	}
	if len(req.Items) == 0 {
		simhttp.WriteError(w, badRequest("variable missing required Items object"))
		return
	}
	a, ok := casArgs(w, r, req.args(r, opSet, path), opCAS)
	if !ok {
		return
	}
	s.applyWrite(w, r, a, acl.VariablesWrite, validateSet)
}

// decodeWrite reads the body of a write, answering a 400 when it does not decode.
func decodeWrite(w http.ResponseWriter, r *http.Request) (request, bool) {
	req, err := decodeRequest(r.Body)
	if err != nil {
		simhttp.WriteError(w, badRequest(err.Error()))
		return request{}, false
	}
	return req, true
}

// args are the arguments of the write o of the variable at path that req's body asks for.
func (req request) args(r *http.Request, o op, path string) applyArgs {
	return applyArgs{op: o, namespace: requestNamespace(r, req.Namespace), path: path, items: req.Items, lock: req.Lock}
}

// casArgs turns a, a set or a delete, into its check-and-set form casOp when the request
// asks for one with ?cas=<index>; a malformed index is answered here as Nomad's 400.
func casArgs(w http.ResponseWriter, r *http.Request, a applyArgs, casOp op) (applyArgs, bool) {
	isCAS, checkIndex, err := parseCAS(r)
	if err != nil {
		simhttp.WriteError(w, err)
		return a, false
	}
	if isCAS {
		a.op, a.checkIndex = casOp, checkIndex
	}
	return a, true
}

// applyWrite is the end every write shares: the caller's capability on the variable, then
// validate (Nomad's text for what it refuses, or ""; nil for none), then the write and its
// answer. Both refusals carry X-Nomad-Index 0, as Nomad's are.
func (s *Store) applyWrite(w http.ResponseWriter, r *http.Request, a applyArgs, capability string, validate func(*applyArgs) string) {
	tok, err := s.authorizeWrite(r, a.namespace, a.path, capability)
	if err != nil {
		writeErrorIndexed(w, err, 0)
		return
	}
	if validate != nil {
		if msg := validate(&a); msg != "" {
			writeErrorIndexed(w, badRequest(msg), 0)
			return
		}
	}
	s.answerApply(w, tok, a, s.apply(a))
}

// validateSet is Nomad's canonicalizeAndValidate for set and cas; it returns the text Nomad
// answers, or "".
func validateSet(a *applyArgs) string {
	if a.lock != nil && (a.lock.LockDelay != 0 || a.lock.TTL != 0) {
		return rpcCoded("RPC Error:: 400,variable should not contain lock definition")
	}
	if a.lock != nil {
		canonicalizeLock(a.lock, newUUID)
	}
	if a.namespace == "*" {
		return rpcCoded(`can not target wildcard ("*")namespace`)
	}
	if itemsSize(a.items) > MaxItemsSize {
		return rpcCoded("variables are limited to 64KiB in total size")
	}
	if err := validatePath(a.path); err != nil {
		return rpcCoded(err.Error())
	}
	if a.lock != nil {
		if msgs := validateLock(a.lock); len(msgs) > 0 {
			return rpcCoded(simhttp.MultiError(msgs...))
		}
	}
	return ""
}

// validateLockOp is canonicalizeAndValidate for lock-acquire and lock-release.
func validateLockOp(a *applyArgs) string {
	switch a.op {
	case opLockAcquire:
		if a.lock == nil {
			a.lock = &lock{}
		}
		canonicalizeLock(a.lock, newUUID)
		if a.namespace == "*" {
			return rpcCoded(simhttp.MultiError(`can not target wildcard ("*")namespace`))
		}
		if itemsSize(a.items) > MaxItemsSize {
			return rpcCoded("variables are limited to 64KiB in total size")
		}
		if err := validatePath(a.path); err != nil {
			return rpcCoded(err.Error())
		}
		if msgs := validateLock(a.lock); len(msgs) > 0 {
			return rpcCoded(simhttp.MultiError(msgs...))
		}
	case opLockRelease:
		if a.lock == nil || a.lock.ID == "" {
			return rpcCoded("missing lock information")
		}
		if a.items != nil {
			return rpcCoded("lock release operation doesn't take variable items")
		}
		if err := validatePath(a.path); err != nil {
			return err.Error()
		}
	}
	return ""
}

func (s *Store) serveLockOp(w http.ResponseWriter, r *http.Request, path string, o op) {
	req, ok := decodeWrite(w, r)
	if !ok {
		return
	}
	s.applyWrite(w, r, req.args(r, o, path), acl.VariablesWrite, validateLockOp)
}

func (s *Store) serveDelete(w http.ResponseWriter, r *http.Request, path string) {
	a, ok := casArgs(w, r, request{}.args(r, opDelete, path), opDeleteCAS)
	if !ok {
		return
	}
	s.applyWrite(w, r, a, acl.VariablesDestroy, nil)
}

// answerApply writes the answer to a write as Nomad's agent does. Set, cas and delete
// conflicts carry the conflicting ModifyIndex as X-Nomad-Index; lock operations' conflicts
// carry none (Nomad sets it only after the status is written). A delete that succeeds is
// answered without a body.
func (s *Store) answerApply(w http.ResponseWriter, tok *acl.Token, a applyArgs, res applyResult) {
	switch {
	case res.outcome == outcomeError:
		writeErrorIndexed(w, res.err, 0)
	case res.outcome == outcomeConflict:
		body := s.conflictBody(tok, a, res)
		var idx *uint64
		if a.op != opLockAcquire && a.op != opLockRelease {
			idx = &body.ModifyIndex
		}
		writeConflict(w, body, idx)
	case a.op == opDelete || a.op == opDeleteCAS:
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(res.index, 10))
		w.WriteHeader(http.StatusNoContent)
	default:
		out := res.written.wire(false)
		out.Items = copyItems(a.items)
		// The writer sees the lock only if it holds it (or is management).
		if res.written.lock != nil && (a.lock != nil && a.lock.ID == res.written.lock.ID || tok.Management()) {
			out.Lock = res.written.lock.wire()
		}
		writeOK(w, out, &res.index)
	}
}

// conflictBody is the conflicting variable as Nomad answers it: its metadata only if the
// caller may not read it, only namespace and path for a zero-value conflict, else all of it.
func (s *Store) conflictBody(tok *acl.Token, a applyArgs, res applyResult) *varJSON {
	c := res.conflict
	if !tok.AllowVariable(a.namespace, a.path, acl.VariablesRead) {
		out := c.wire(true)
		out.Items = nil
		return out
	}
	if res.zero {
		return &varJSON{metaJSON: metaJSON{Namespace: c.namespace, Path: c.path}}
	}
	return c.wire(true)
}

func (s *Store) serveRenew(w http.ResponseWriter, r *http.Request, path string) {
	req, ok := decodeWrite(w, r)
	if !ok {
		return
	}
	namespace := requestNamespace(r, "")
	if _, err := s.authorizeWrite(r, namespace, path, acl.VariablesWrite); err != nil {
		simhttp.WriteError(w, err)
		return
	}
	lockID := ""
	if req.Lock != nil {
		lockID = req.Lock.ID
	}
	if lockID == "" {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusInternalServerError, simhttp.MultiError("missing lock ID")))
		return
	}
	meta, err := s.renew(namespace, path, lockID)
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	writeOK(w, meta, nil)
}

func (s *Store) serveList(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusMethodNotAllowed, "Invalid method"))
		return
	}
	q, tok, ok := s.readQuery(w, r)
	if !ok {
		return
	}
	filter, err := compileFilter(q.Filter)
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	var next string
	var ranAt uint64 // the table's index when the query last looked
	got, v, err := simhttp.Block(r.Context(), s.idx, q, nil, func() (uint64, any, error) {
		changed, table := s.changedUnder(q.Namespace, q.Prefix, q.MinIndex)
		if !changed {
			ranAt = table
			return q.MinIndex, nil, nil // nothing under the prefix moved: keep waiting
		}
		idx, page, nt, err := s.list(tok, q, filter)
		next = nt
		return idx, page, err
	})
	if err == nil && v == nil {
		// The wait ended with nothing changed under the prefix: Nomad answers what its
		// query read last, at the table's index of then (writes elsewhere since do not
		// show in it).
		_, v, next, err = s.list(tok, q, filter)
		got = max(ranAt, 1)
	}
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	simhttp.SetMeta(w, got, true, 0)
	if next != "" {
		w.Header().Set("X-Nomad-NextToken", next)
	}
	simhttp.WriteJSON(w, v)
}

// list is one page of the variables under q's prefix that tok may list and filter keeps,
// at the table's index, with the next page's token.
func (s *Store) list(tok *acl.Token, q simhttp.Query, filter func(metaJSON) (bool, error)) (uint64, []metaJSON, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]metaJSON, 0)
	for _, cur := range s.vars {
		if q.Namespace != "*" && cur.namespace != q.Namespace {
			continue
		}
		if !strings.HasPrefix(cur.path, q.Prefix) {
			continue
		}
		if !tok.AllowVariable(cur.namespace, cur.path, acl.VariablesList) {
			continue
		}
		m := cur.meta(tok.Management())
		ok, err := filter(m)
		if err != nil {
			return 0, nil, "", err
		}
		if ok {
			out = append(out, m)
		}
	}
	page, next := paginate(out, q)
	return s.tableIndex, page, next, nil
}

// changedUnder reports whether a variable under prefix in namespace ns ("*": any) was
// written or deleted after index (always, for index 0), and the table's index: what wakes
// Nomad's blocking listing, which watches the prefix's node in its state tree, not the
// whole table. (Nomad's tree also wakes it when a key created elsewhere splits that node,
// once; the simulation does not.)
func (s *Store) changedUnder(ns, prefix string, index uint64) (changed bool, table uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if index == 0 {
		return true, s.tableIndex
	}
	under := func(k key) bool { return (ns == "*" || k.namespace == ns) && strings.HasPrefix(k.path, prefix) }
	for k, v := range s.vars {
		if v.modifyIndex > index && under(k) {
			return true, s.tableIndex
		}
	}
	for k, i := range s.deleted {
		if i > index && under(k) {
			return true, s.tableIndex
		}
	}
	return false, s.tableIndex
}

// paginate orders entries by namespace and path (Nomad's ID index) and cuts the page that
// starts at the next token ("namespace.path") and holds at most PerPage entries.
func paginate(all []metaJSON, q simhttp.Query) ([]metaJSON, string) {
	tokenOf := func(m metaJSON) string { return m.Namespace + "." + m.Path }
	sort.Slice(all, func(i, j int) bool {
		if all[i].Namespace != all[j].Namespace {
			return all[i].Namespace < all[j].Namespace
		}
		return all[i].Path < all[j].Path
	})
	if q.Reverse {
		for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
			all[i], all[j] = all[j], all[i]
		}
	}
	start := 0
	if q.NextToken != "" {
		start = len(all)
		for i, m := range all {
			t := tokenOf(m)
			if (!q.Reverse && t >= q.NextToken) || (q.Reverse && t <= q.NextToken) {
				start = i
				break
			}
		}
	}
	all = all[start:]
	if q.PerPage > 0 && len(all) > int(q.PerPage) {
		return all[:q.PerPage], tokenOf(all[q.PerPage])
	}
	return all, ""
}
