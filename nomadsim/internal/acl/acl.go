// Package acl is nomadsim's ACL system: tokens, policies written in Nomad's HCL policy
// language, and the decisions Nomad's servers take from them, behind Nomad's /v1/acl API.
package acl

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/index"
	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// Nomad's answers to requests it refuses.
const (
	// PermissionDenied is the 403 text of every refusal, unknown tokens included: Nomad's
	// servers turn a failed authentication into this same error.
	PermissionDenied = "Permission denied"
	// TokenNotFound is the 404 text for an unknown accessor ID.
	TokenNotFound = "ACL token not found"
)

// AnonymousPolicy is the policy name Nomad applies to requests without a token.
const AnonymousPolicy = "anonymous"

// ErrPermissionDenied returns the 403 every handler answers a refused request with.
func ErrPermissionDenied() error { return simhttp.Errorf(http.StatusForbidden, PermissionDenied) }

// policyRecord is a stored policy.
type policyRecord struct {
	Name        string
	Description string
	Rules       string
	CreateIndex uint64
	ModifyIndex uint64
	parsed      *ParsedPolicy
}

// tokenRecord is a stored token.
type tokenRecord struct {
	AccessorID  string
	SecretID    string
	Name        string
	Type        string
	Policies    []string
	Global      bool
	CreateTime  time.Time
	CreateIndex uint64
	ModifyIndex uint64
}

// ACL holds the cluster's tokens and policies. It is safe for concurrent use.
type ACL struct {
	enabled bool
	idx     *index.Index
	now     func() time.Time

	mu              sync.RWMutex
	policies        map[string]*policyRecord
	byAccessor      map[string]*tokenRecord
	bySecret        map[string]*tokenRecord
	bootstrapSecret string
	bootstrapIndex  uint64
}

// New returns the ACL system. When enabled it creates the bootstrap management token at
// once (as `nomad acl bootstrap` would), so that the cluster is usable from the start.
func New(enabled bool, idx *index.Index) *ACL {
	a := &ACL{
		enabled:    enabled,
		idx:        idx,
		now:        time.Now,
		policies:   map[string]*policyRecord{},
		byAccessor: map[string]*tokenRecord{},
		bySecret:   map[string]*tokenRecord{},
	}
	if enabled {
		i := idx.Next()
		t := &tokenRecord{
			AccessorID: newUUID(), SecretID: newUUID(), Name: "Bootstrap Token",
			Type: TypeManagement, Global: true, CreateTime: a.now().UTC(),
			CreateIndex: i, ModifyIndex: i,
		}
		a.byAccessor[t.AccessorID] = t
		a.bySecret[t.SecretID] = t
		a.bootstrapSecret = t.SecretID
		a.bootstrapIndex = i
	}
	return a
}

// Enabled reports whether ACLs are enforced.
func (a *ACL) Enabled() bool { return a.enabled }

// BootstrapSecret is the secret ID of the management token made at New ("" when disabled).
func (a *ACL) BootstrapSecret() string { return a.bootstrapSecret }

// SecretFromRequest reads the token the way Nomad's agent does: X-Nomad-Token first, else an
// "Authorization: Bearer <token>" header.
func SecretFromRequest(r *http.Request) string {
	if v := r.Header.Get("X-Nomad-Token"); v != "" {
		return strings.TrimSpace(v)
	}
	if v := r.Header.Get("Authorization"); v != "" {
		parts := strings.Split(v, " ")
		if len(parts) > 1 && strings.EqualFold(parts[0], "bearer") {
			value := strings.TrimSpace(strings.Join(parts[1:], " "))
			return strings.TrimSpace(strings.Split(value, " ")[0])
		}
	}
	return ""
}

// ResolveRequest resolves the token a request carries.
func (a *ACL) ResolveRequest(r *http.Request) (*Token, error) {
	return a.Resolve(SecretFromRequest(r))
}

// Resolve returns the token for a secret ID. With ACLs disabled every secret resolves to
// Nomad's "acls-disabled" token, which allows everything. An empty secret is the anonymous
// token (allowed what the "anonymous" policy allows, if it exists). An unknown secret is
// Nomad's 403 "Permission denied".
func (a *ACL) Resolve(secretID string) (*Token, error) {
	if !a.enabled {
		return &Token{tokenRecord: tokenRecord{AccessorID: "acls-disabled", Name: "ACLs disabled token", Type: TypeClient}, allowAll: true}, nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if secretID == "" {
		t := &Token{tokenRecord: tokenRecord{AccessorID: "anonymous", Name: "Anonymous Token", Type: TypeClient, Policies: []string{AnonymousPolicy}}}
		t.compile(a.parsedLocked(t.Policies))
		return t, nil
	}
	rec, ok := a.bySecret[secretID]
	if !ok {
		return nil, ErrPermissionDenied()
	}
	return a.tokenLocked(rec), nil
}

func (a *ACL) tokenLocked(rec *tokenRecord) *Token {
	t := &Token{tokenRecord: *rec, allowAll: rec.Type == TypeManagement}
	t.Policies = slices.Clone(rec.Policies)
	if !t.allowAll {
		t.compile(a.parsedLocked(rec.Policies))
	}
	return t
}

// parsedLocked returns the parsed policies among names that exist; missing ones grant
// nothing, as in Nomad.
func (a *ACL) parsedLocked(names []string) []*ParsedPolicy {
	var out []*ParsedPolicy
	for _, n := range names {
		if p, ok := a.policies[n]; ok {
			out = append(out, p.parsed)
		}
	}
	return out
}

// UpsertPolicy creates or replaces a policy from its HCL rules.
func (a *ACL) UpsertPolicy(name, description, rules string) error {
	_, err := a.upsertPolicy(name, description, rules)
	return err
}

func (a *ACL) upsertPolicy(name, description, rules string) (uint64, error) {
	if !validPolicyName(name) {
		return 0, simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("policy 0 invalid: invalid name '%s'", name))
	}
	parsed, err := Parse(rules)
	if err != nil {
		return 0, simhttp.Errorf(http.StatusBadRequest, fmt.Sprintf("policy 0 invalid: failed to parse rules: %v", err))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	i := a.idx.Next()
	rec := &policyRecord{Name: name, Description: description, Rules: rules, CreateIndex: i, ModifyIndex: i, parsed: parsed}
	if old, ok := a.policies[name]; ok {
		rec.CreateIndex = old.CreateIndex
	}
	a.policies[name] = rec
	return i, nil
}

func validPolicyName(name string) bool {
	if name == "" || len(name) > 128 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// CreateToken creates each named policy from its HCL rules, then a client token holding
// them all, and returns its secret ID.
func (a *ACL) CreateToken(name string, policyRules map[string]string) (string, error) {
	if !a.enabled {
		return "", errors.New("create token: ACL support disabled")
	}
	names := make([]string, 0, len(policyRules))
	for n := range policyRules {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := a.UpsertPolicy(n, "", policyRules[n]); err != nil {
			return "", fmt.Errorf("create token %q: policy %q: %w", name, n, err)
		}
	}
	rec, err := a.createToken(tokenRecord{Name: name, Type: TypeClient, Policies: names})
	if err != nil {
		return "", fmt.Errorf("create token %q: %w", name, err)
	}
	return rec.SecretID, nil
}

func (a *ACL) createToken(in tokenRecord) (*tokenRecord, error) {
	switch in.Type {
	case TypeClient:
		if len(in.Policies) == 0 {
			return nil, simhttp.Errorf(http.StatusBadRequest, "token 0 invalid: client token missing policies")
		}
	case TypeManagement:
		if len(in.Policies) != 0 {
			return nil, simhttp.Errorf(http.StatusBadRequest, "token 0 invalid: management token cannot be associated with policies")
		}
	default:
		return nil, simhttp.Errorf(http.StatusBadRequest, "token 0 invalid: token type must be client or management")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	i := a.idx.Next()
	rec := in
	rec.AccessorID, rec.SecretID = newUUID(), newUUID()
	rec.CreateTime = a.now().UTC()
	rec.CreateIndex, rec.ModifyIndex = i, i
	rec.Policies = slices.Clone(in.Policies)
	a.byAccessor[rec.AccessorID] = &rec
	a.bySecret[rec.SecretID] = &rec
	return &rec, nil
}

// newUUID returns a random UUID in Nomad's format.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// hash is a stand-in for Nomad's token hash: a digest of the token's identifying fields.
func (t *tokenRecord) hash() []byte {
	h := sha256.New()
	for _, s := range append([]string{t.AccessorID, t.SecretID, t.Name, t.Type}, t.Policies...) {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	if t.Global {
		_, _ = h.Write([]byte("global"))
	}
	return h.Sum(nil)
}
