package acl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// tokenJSON is the token as Nomad's servers encode it (the api module's ACLToken reads it).
type tokenJSON struct {
	AccessorID string
	SecretID   string
	tokenShared
	ExpirationTTL string
	CreateIndex   uint64
	ModifyIndex   uint64
}

// tokenStubJSON is an entry of /v1/acl/tokens: the token without its secret and TTL.
type tokenStubJSON struct {
	AccessorID string
	tokenShared
	CreateIndex uint64
	ModifyIndex uint64
}

// tokenShared holds the fields a token and its stub share. encoding/json writes an embedded
// struct's fields where it is embedded, so both keep Nomad's field order.
type tokenShared struct {
	Name           string
	Type           string
	Policies       []string
	Roles          []any
	Global         bool
	Hash           []byte
	CreateTime     time.Time
	ExpirationTime *time.Time
}

type policyJSON struct {
	Name        string
	Description string
	Rules       string
	JobACL      any
	CreateIndex uint64
	ModifyIndex uint64
}

type policyStubJSON struct {
	Name        string
	Description string
	JobACL      any
	CreateIndex uint64
	ModifyIndex uint64
}

func (t *tokenRecord) json() tokenJSON {
	return tokenJSON{
		AccessorID: t.AccessorID, SecretID: t.SecretID, tokenShared: t.shared(),
		CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex,
	}
}

// stub is the token as /v1/acl/tokens lists it.
func (t *tokenRecord) stub() tokenStubJSON {
	return tokenStubJSON{AccessorID: t.AccessorID, tokenShared: t.shared(), CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex}
}

// shared is what the token and its stub both show of it.
func (t *tokenRecord) shared() tokenShared {
	return tokenShared{
		Name: t.Name, Type: t.Type, Policies: slices.Clone(t.Policies), Global: t.Global,
		Hash: t.hash(), CreateTime: t.CreateTime,
	}
}

func errACLDisabled() error { return simhttp.Errorf(http.StatusBadRequest, "ACL support disabled") }

// Handler serves Nomad's /v1/acl API: bootstrap, token/self, tokens, token/:accessor,
// policies and policy/:name.
func (a *ACL) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := r.URL.Path
		switch {
		case path == "/v1/acl/token/self":
			a.serveSelf(w, r)
			return
		case !a.enabled:
			simhttp.WriteError(w, errACLDisabled())
			return
		}
		var err error
		switch {
		case path == "/v1/acl/bootstrap":
			err = a.serveBootstrap(w, r)
		case path == "/v1/acl/tokens":
			err = a.serveTokens(w, r)
		case path == "/v1/acl/token":
			if r.Method != http.MethodPut && r.Method != http.MethodPost {
				err = simhttp.Errorf(http.StatusMethodNotAllowed, "Invalid method")
				break
			}
			err = a.serveTokenUpsert(w, r, "")
		case strings.HasPrefix(path, "/v1/acl/token/"):
			err = a.serveToken(w, r, strings.TrimPrefix(path, "/v1/acl/token/"))
		case path == "/v1/acl/policies":
			err = a.servePolicies(w, r)
		case strings.HasPrefix(path, "/v1/acl/policy/"):
			err = a.servePolicy(w, r, strings.TrimPrefix(path, "/v1/acl/policy/"))
		default:
			err = simhttp.Errorf(http.StatusNotFound, "Invalid URL")
		}
		if err != nil {
			simhttp.WriteError(w, err)
		}
	})
}

// writeMeta sets the read headers without simhttp's "0 means 1" rule: Nomad answers
// token/self with the token's own ModifyIndex, 0 for the built-in tokens.
func writeMeta(w http.ResponseWriter, idx uint64) {
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	w.Header().Set("X-Nomad-KnownLeader", "true")
	w.Header().Set("X-Nomad-LastContact", "0")
}

func (a *ACL) serveSelf(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		simhttp.WriteError(w, simhttp.Errorf(http.StatusMethodNotAllowed, "Invalid method"))
		return
	}
	t, err := a.ResolveRequest(r)
	if err != nil {
		simhttp.WriteError(w, err)
		return
	}
	out := tokenJSON{
		AccessorID: t.AccessorID, SecretID: t.SecretID,
		tokenShared: tokenShared{Name: t.Name, Type: t.Type, Global: t.Global, CreateTime: t.CreateTime},
		CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex,
	}
	if t.AccessorID == "anonymous" {
		out.Policies = t.Policies
	} else if t.AccessorID != "acls-disabled" {
		a.mu.RLock()
		if rec, ok := a.byAccessor[t.AccessorID]; ok {
			out = rec.json()
		}
		a.mu.RUnlock()
	}
	writeMeta(w, t.ModifyIndex)
	simhttp.WriteJSON(w, out)
}

func (a *ACL) serveBootstrap(_ http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPut && r.Method != http.MethodPost {
		return simhttp.Errorf(http.StatusMethodNotAllowed, "Invalid method")
	}
	// The bootstrap token exists from New on: Nomad's answer to a second bootstrap.
	return simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("ACL bootstrap already done (reset index: %d)", a.bootstrapIndex))
}

// requireManagement resolves the request's token and refuses it unless it is management.
func (a *ACL) requireManagement(r *http.Request) (*Token, error) {
	t, err := a.ResolveRequest(r)
	if err != nil {
		return nil, err
	}
	if !t.Management() {
		return nil, ErrPermissionDenied()
	}
	return t, nil
}

func (a *ACL) serveTokens(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return simhttp.Errorf(http.StatusMethodNotAllowed, "Invalid method")
	}
	if _, err := a.requireManagement(r); err != nil {
		return err
	}
	return a.serveBlocking(w, r, func(q simhttp.Query) (uint64, any, error) {
		var max uint64
		out := make([]tokenStubJSON, 0, len(a.byAccessor))
		for _, t := range a.byAccessor {
			if q.Prefix != "" && !strings.HasPrefix(t.AccessorID, q.Prefix) {
				continue
			}
			max = maxIndex(max, t.ModifyIndex)
			out = append(out, t.stub())
		}
		slices.SortFunc(out, func(x, y tokenStubJSON) int { return strings.Compare(x.AccessorID, y.AccessorID) })
		return max, out, nil
	})
}

// serveBlocking answers a blocking query with the request's query options: read runs under
// the read lock and returns the index of what it read and the answer.
func (a *ACL) serveBlocking(w http.ResponseWriter, r *http.Request, read func(q simhttp.Query) (uint64, any, error)) error {
	q, err := simhttp.ParseQuery(r)
	if err != nil {
		return err
	}
	got, v, err := simhttp.Block(r.Context(), a.idx, q, nil, func() (uint64, any, error) {
		a.mu.RLock()
		defer a.mu.RUnlock()
		return read(q)
	})
	if err != nil {
		return err
	}
	simhttp.SetMeta(w, got, true, 0)
	simhttp.WriteJSON(w, v)
	return nil
}

// serveOne answers the read of one object: the request's token must resolve, and be
// management or one that may read it; find then looks the object up under the read lock
// and returns it as answered, with its ModifyIndex. A missing one is a 404 saying missing.
func (a *ACL) serveOne(w http.ResponseWriter, r *http.Request, may func(t *Token) bool, missing string, find func() (out any, index uint64, ok bool)) error {
	t, err := a.ResolveRequest(r)
	if err != nil {
		return err
	}
	if !t.Management() && !may(t) {
		return ErrPermissionDenied()
	}
	a.mu.RLock()
	out, index, ok := find()
	a.mu.RUnlock()
	if !ok {
		return simhttp.Errorf(http.StatusNotFound, missing)
	}
	simhttp.SetMeta(w, index, true, 0)
	simhttp.WriteJSON(w, out)
	return nil
}

// serveDelete answers a delete, which needs a management token: del removes the object
// under the write lock, or refuses with Nomad's error when it does not exist.
func (a *ACL) serveDelete(w http.ResponseWriter, r *http.Request, del func() error) error {
	if _, err := a.requireManagement(r); err != nil {
		return err
	}
	a.mu.Lock()
	if err := del(); err != nil {
		a.mu.Unlock()
		return err
	}
	i := a.idx.Next()
	a.mu.Unlock()
	writeBodiless(w, i)
	return nil
}

// writeBodiless answers a write as Nomad does its policy writes and deletes: the write's
// index, and no body.
func writeBodiless(w http.ResponseWriter, index uint64) {
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(index, 10))
	w.WriteHeader(http.StatusOK)
}

// decodeManaged reads the body of a write, which needs a management token, into in.
func (a *ACL) decodeManaged(r *http.Request, in any) error {
	if _, err := a.requireManagement(r); err != nil {
		return err
	}
	if err := json.NewDecoder(r.Body).Decode(in); err != nil {
		return simhttp.Errorf(http.StatusBadRequest, err.Error())
	}
	return nil
}

func maxIndex(a, b uint64) uint64 {
	if b > a {
		return b
	}
	return a
}

func (a *ACL) serveToken(w http.ResponseWriter, r *http.Request, accessor string) error {
	if accessor == "" {
		return simhttp.Errorf(http.StatusBadRequest, "Missing Token Accessor")
	}
	switch r.Method {
	case http.MethodGet:
		// Nomad lets a token read itself by accessor; anything else needs management.
		self := func(t *Token) bool { return t.AccessorID == accessor }
		return a.serveOne(w, r, self, TokenNotFound, func() (any, uint64, bool) {
			rec, ok := a.byAccessor[accessor]
			if !ok {
				return nil, 0, false
			}
			return rec.json(), rec.ModifyIndex, true
		})
	case http.MethodPut, http.MethodPost:
		return a.serveTokenUpsert(w, r, accessor)
	case http.MethodDelete:
		return a.serveDelete(w, r, func() error {
			rec, ok := a.byAccessor[accessor]
			if !ok {
				return simhttp.Errorf(http.StatusBadRequest, "Cannot delete nonexistent tokens: "+accessor)
			}
			delete(a.byAccessor, accessor)
			delete(a.bySecret, rec.SecretID)
			return nil
		})
	}
	return simhttp.Errorf(http.StatusMethodNotAllowed, "Invalid method")
}

func (a *ACL) serveTokenUpsert(w http.ResponseWriter, r *http.Request, accessor string) error {
	var in tokenJSON
	if err := a.decodeManaged(r, &in); err != nil {
		return err
	}
	if accessor != "" && in.AccessorID != accessor {
		return simhttp.Errorf(http.StatusBadRequest, "ACL token accessor does not match request path")
	}
	var rec *tokenRecord
	if in.AccessorID == "" {
		var err error
		rec, err = a.createToken(tokenRecord{Name: in.Name, Type: in.Type, Policies: in.Policies, Global: in.Global})
		if err != nil {
			return err
		}
	} else {
		a.mu.Lock()
		old, ok := a.byAccessor[in.AccessorID]
		if !ok {
			a.mu.Unlock()
			return simhttp.Errorf(http.StatusBadRequest, "cannot find token "+in.AccessorID)
		}
		// A token's type and secret are fixed at creation; name and policies may change.
		old.Name, old.Policies = in.Name, slices.Clone(in.Policies)
		old.ModifyIndex = a.idx.Next()
		cp := *old
		rec = &cp
		a.mu.Unlock()
	}
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(rec.ModifyIndex, 10))
	simhttp.WriteJSON(w, rec.json())
	return nil
}

func (a *ACL) servePolicies(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return simhttp.Errorf(http.StatusMethodNotAllowed, "Invalid method")
	}
	t, err := a.ResolveRequest(r)
	if err != nil {
		return err
	}
	return a.serveBlocking(w, r, func(q simhttp.Query) (uint64, any, error) {
		var max uint64
		out := make([]policyStubJSON, 0, len(a.policies))
		for _, p := range a.policies {
			// A client token sees only the policies it holds, as in Nomad.
			if !t.Management() && !slices.Contains(t.Policies, p.Name) {
				continue
			}
			if q.Prefix != "" && !strings.HasPrefix(p.Name, q.Prefix) {
				continue
			}
			max = maxIndex(max, p.ModifyIndex)
			out = append(out, policyStubJSON{Name: p.Name, Description: p.Description, CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex})
		}
		slices.SortFunc(out, func(x, y policyStubJSON) int { return strings.Compare(x.Name, y.Name) })
		return max, out, nil
	})
}

func (a *ACL) servePolicy(w http.ResponseWriter, r *http.Request, name string) error {
	if name == "" {
		return simhttp.Errorf(http.StatusBadRequest, "Missing Policy Name")
	}
	switch r.Method {
	case http.MethodGet:
		held := func(t *Token) bool { return slices.Contains(t.Policies, name) }
		return a.serveOne(w, r, held, "ACL policy not found", func() (any, uint64, bool) {
			p, ok := a.policies[name]
			if !ok {
				return nil, 0, false
			}
			return policyJSON{Name: p.Name, Description: p.Description, Rules: p.Rules, CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex}, p.ModifyIndex, true
		})
	case http.MethodPut, http.MethodPost:
		var in policyJSON
		if err := a.decodeManaged(r, &in); err != nil {
			return err
		}
		if in.Name != name {
			return simhttp.Errorf(http.StatusBadRequest, "ACL policy name does not match request path")
		}
		i, err := a.upsertPolicy(in.Name, in.Description, in.Rules)
		if err != nil {
			return err
		}
		writeBodiless(w, i)
		return nil
	case http.MethodDelete:
		return a.serveDelete(w, r, func() error {
			if _, ok := a.policies[name]; !ok {
				return simhttp.Errorf(http.StatusBadRequest, "policy "+name+" does not exist")
			}
			delete(a.policies, name)
			return nil
		})
	}
	return simhttp.Errorf(http.StatusMethodNotAllowed, "Invalid method")
}
