package acl

import "strings"

// Token types, as Nomad names them.
const (
	TypeClient     = "client"
	TypeManagement = "management"
)

// capSet is a set of capability names.
type capSet map[string]struct{}

func (c capSet) has(k string) bool { _, ok := c[k]; return ok }

// Token is a resolved ACL token: its public fields and the decisions its policies allow,
// compiled from the policies as they stood when it was resolved.
type Token struct {
	// tokenRecord holds the public fields, those of the stored token: AccessorID, SecretID,
	// Name, Type, Policies, Global, CreateTime, CreateIndex and ModifyIndex.
	tokenRecord

	allowAll bool // management, or ACLs disabled

	namespaces         map[string]capSet
	wildcardNamespaces map[string]capSet
	// variables is keyed by namespace + "\x00" + path, as Nomad keys its rules.
	variables         map[string]capSet
	wildcardVariables map[string]capSet

	agent, node, operator string
}

// Management reports whether the token may do anything.
func (t *Token) Management() bool { return t.allowAll }

// compile builds a token's decisions from its policies, merging them as Nomad's NewACL
// does: a namespace denied by any policy stays denied; variable path rules are unions.
func (t *Token) compile(policies []*ParsedPolicy) {
	t.namespaces = map[string]capSet{}
	t.wildcardNamespaces = map[string]capSet{}
	t.variables = map[string]capSet{}
	t.wildcardVariables = map[string]capSet{}
	for _, p := range policies {
		for _, ns := range p.namespaces {
			glob := strings.Contains(ns.Name, "*")
			set := t.namespaces
			if glob {
				set = t.wildcardNamespaces
			}
			caps, ok := set[ns.Name]
			if !ok {
				caps = capSet{}
				set[ns.Name] = caps
			}
			if ns.Variables != nil {
				for _, pr := range ns.Variables.Paths {
					key := ns.Name + "\x00" + pr.PathSpec
					vset := t.variables
					if glob || strings.Contains(pr.PathSpec, "*") {
						vset = t.wildcardVariables
					}
					vcaps, ok := vset[key]
					if !ok {
						vcaps = capSet{}
						vset[key] = vcaps
					}
					for _, c := range pr.Capabilities {
						vcaps[c] = struct{}{}
					}
				}
			}
			if caps.has(PolicyDeny) {
				continue
			}
			for _, c := range ns.Capabilities {
				if c == PolicyDeny {
					clear(caps)
					caps[PolicyDeny] = struct{}{}
					break
				}
				caps[c] = struct{}{}
			}
		}
		t.agent = maxPrivilege(t.agent, p.agent)
		t.node = maxPrivilege(t.node, p.node)
		t.operator = maxPrivilege(t.operator, p.operator)
	}
}

func maxPrivilege(a, b string) string {
	switch {
	case a == PolicyDeny || b == PolicyDeny:
		return PolicyDeny
	case a == PolicyWrite || b == PolicyWrite:
		return PolicyWrite
	case a == PolicyRead || b == PolicyRead:
		return PolicyRead
	case a == PolicyList || b == PolicyList:
		return PolicyList
	}
	return ""
}

func (t *Token) namespaceCaps(ns string) (capSet, bool) {
	if c, ok := t.namespaces[ns]; ok {
		return c, true
	}
	return closestGlob(t.wildcardNamespaces, ns)
}

// AllowNamespace reports whether the token holds a namespace capability ("read-job",
// "list-jobs", "alloc-lifecycle", ...). A policy shortcut ("read", "write", "scale") asks
// for every capability the shortcut grants. Namespace "*" asks whether any namespace allows
// it, as Nomad does for requests across all namespaces.
func (t *Token) AllowNamespace(namespace, capability string) bool {
	if t == nil {
		return false
	}
	if t.allowAll {
		return true
	}
	want := []string{capability}
	if capability == PolicyRead || capability == PolicyWrite || capability == PolicyScale {
		want = expandNamespacePolicy(capability)
	}
	check := func(c capSet) bool {
		if c.has(PolicyDeny) {
			return false
		}
		for _, w := range want {
			if !c.has(w) {
				return false
			}
		}
		return true
	}
	if namespace == "*" {
		for _, set := range []map[string]capSet{t.namespaces, t.wildcardNamespaces} {
			for _, c := range set {
				if check(c) {
					return true
				}
			}
		}
		return false
	}
	caps, ok := t.namespaceCaps(namespace)
	return ok && check(caps)
}

// AllowVariable reports whether the token may perform op (read, list, write, destroy) on the
// variable at path in namespace: the exact path rule if one exists, else the closest glob.
func (t *Token) AllowVariable(namespace, path, op string) bool {
	if t == nil {
		return false
	}
	if t.allowAll {
		return true
	}
	key := namespace + "\x00" + path
	caps, ok := t.variables[key]
	if !ok {
		caps, ok = closestGlob(t.wildcardVariables, key)
	}
	return ok && caps.has(op)
}

// AllowNode reports whether the node rule allows op ("read" or "write").
func (t *Token) AllowNode(op string) bool { return t.allowLevel(t.node, op) }

// AllowAgent reports whether the agent rule allows op ("read" or "write").
func (t *Token) AllowAgent(op string) bool { return t.allowLevel(t.agent, op) }

// AllowOperator reports whether the operator rule allows op ("read" or "write").
func (t *Token) AllowOperator(op string) bool { return t.allowLevel(t.operator, op) }

func (t *Token) allowLevel(level, op string) bool {
	if t == nil {
		return false
	}
	if t.allowAll {
		return true
	}
	switch op {
	case PolicyRead:
		return level == PolicyRead || level == PolicyWrite
	case PolicyWrite:
		return level == PolicyWrite
	}
	return false
}
