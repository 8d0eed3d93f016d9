package httpapi

import (
	"net/http"
	"slices"
	"strings"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/acl"
)

// The ACL rules of the HTTP API: each request's token, checked against what its endpoint needs.

// authorizeToken resolves the request's token and refuses it, with Nomad's 403, unless
// allowed says it may; with ACLs off every request may. authorize, authorizeAny,
// authorizeManagement and authorizeLevel are its rules.
func (c *server) authorizeToken(r *http.Request, allowed func(tok *acl.Token) bool) error {
	if !c.Ext.ACL.Enabled() {
		return nil
	}
	tok, err := c.Ext.ACL.Resolve(secretOf(r))
	if err != nil {
		return err
	}
	if !allowed(tok) {
		return acl.ErrPermissionDenied()
	}
	return nil
}

// authorize resolves the request's token and checks a namespace capability (an empty
// capability only requires a valid token).
func (c *server) authorize(r *http.Request, namespace, capability string) error {
	return c.authorizeToken(r, func(tok *acl.Token) bool {
		return capability == "" || tok.AllowNamespace(namespace, capability)
	})
}

// nsAllowed returns a filter of the namespaces whose objects the request may see with
// the capability, for lists across namespaces (namespace=*), as Nomad filters them. An
// unknown token denies all.
func (c *server) nsAllowed(r *http.Request, capability string) func(ns string) bool {
	if !c.Ext.ACL.Enabled() {
		return func(string) bool { return true }
	}
	tok, err := c.Ext.ACL.Resolve(secretOf(r))
	if err != nil {
		return func(string) bool { return false }
	}
	return func(ns string) bool { return tok.AllowNamespace(ns, capability) }
}

// authorizeList checks a list request: a capability in the namespace, or, for "*", a
// valid token whose visible namespaces filter the answer.
func (c *server) authorizeList(r *http.Request, namespace, capability string) (func(ns string) bool, error) {
	if namespace != "*" {
		if err := c.authorize(r, namespace, capability); err != nil {
			return nil, err
		}
		return func(string) bool { return true }, nil
	}
	if err := c.authorize(r, namespace, ""); err != nil {
		return nil, err
	}
	return c.nsAllowed(r, capability), nil
}

// authorizeAny allows the request if the token holds any of the capabilities.
func (c *server) authorizeAny(r *http.Request, namespace string, caps ...string) error {
	return c.authorizeToken(r, func(tok *acl.Token) bool {
		return slices.ContainsFunc(caps, func(cp string) bool { return tok.AllowNamespace(namespace, cp) })
	})
}

// authorizeManagement requires a management token (namespace writes), when ACLs are on.
func (c *server) authorizeManagement(r *http.Request) error {
	return c.authorizeToken(r, (*acl.Token).Management)
}

// authorizeLevel checks node, agent or operator read/write access.
func (c *server) authorizeLevel(r *http.Request, scope, op string) error {
	return c.authorizeToken(r, func(tok *acl.Token) bool {
		switch scope {
		case "node":
			return tok.AllowNode(op)
		case "agent":
			return tok.AllowAgent(op)
		case "operator":
			return tok.AllowOperator(op)
		}
		return false
	})
}

// secretOf reads the token as Nomad's agent does, also from the ?token= query parameter.
func secretOf(r *http.Request) string {
	if s := acl.SecretFromRequest(r); s != "" {
		return s
	}
	return strings.TrimSpace(r.URL.Query().Get("token"))
}
