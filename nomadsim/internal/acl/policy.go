package acl

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/hashicorp/hcl"
)

// Nomad's policy shortcuts (the "policy" attribute of a rule).
const (
	PolicyDeny  = "deny"
	PolicyRead  = "read"
	PolicyList  = "list"
	PolicyWrite = "write"
	PolicyScale = "scale"
)

// Variables capabilities, as Nomad names them in path rules.
const (
	VariablesList    = "list"
	VariablesRead    = "read"
	VariablesWrite   = "write"
	VariablesDestroy = "destroy"
	VariablesDeny    = "deny"
)

// The names Nomad accepts for namespaces in rules (globs allowed).
var validNamespace = regexp.MustCompile(`^[a-zA-Z0-9-*]{1,128}$`)

// policyHCL is the shape of a policy document, as Nomad decodes it.
type policyHCL struct {
	Namespaces []*namespaceRule `hcl:"namespace"`
	Agent      *levelRule       `hcl:"agent"`
	Node       *levelRule       `hcl:"node"`
	Operator   *levelRule       `hcl:"operator"`
	Quota      *levelRule       `hcl:"quota"`
	Plugin     *levelRule       `hcl:"plugin"`
}

type namespaceRule struct {
	Name         string          `hcl:",key"`
	Policy       string          `hcl:"policy"`
	Capabilities []string        `hcl:"capabilities"`
	Variables    *variablesRules `hcl:"variables"`
}

type variablesRules struct {
	Paths []*pathRule `hcl:"path"`
}

type pathRule struct {
	PathSpec     string   `hcl:",key"`
	Capabilities []string `hcl:"capabilities"`
}

type levelRule struct {
	Policy string `hcl:"policy"`
}

// ParsedPolicy is a validated policy with its shortcuts expanded to capabilities.
type ParsedPolicy struct {
	namespaces []*namespaceRule
	agent      string
	node       string
	operator   string
}

// Parse reads a policy's HCL rules and validates them as Nomad does, expanding policy
// shortcuts into capabilities. Errors carry Nomad's wording.
func Parse(rules string) (*ParsedPolicy, error) {
	var raw policyHCL
	if err := decodeHCL(&raw, rules); err != nil {
		return nil, nomadErrorf("Failed to parse ACL Policy: %v", err)
	}
	if len(raw.Namespaces) == 0 && raw.Agent == nil && raw.Node == nil && raw.Operator == nil &&
		raw.Quota == nil && raw.Plugin == nil {
		return nil, nomadErrorf("Invalid policy: %s", rules)
	}
	p := &ParsedPolicy{namespaces: raw.Namespaces}
	for _, ns := range raw.Namespaces {
		if err := validateNamespaceRule(ns); err != nil {
			return nil, err
		}
	}
	for _, lv := range []struct {
		name string
		rule *levelRule
		dst  *string
	}{
		{"agent", raw.Agent, &p.agent}, {"node", raw.Node, &p.node},
		{"operator", raw.Operator, &p.operator}, {"quota", raw.Quota, nil}, {"plugin", raw.Plugin, nil},
	} {
		if lv.rule == nil {
			continue
		}
		if !isPolicyValid(lv.rule.Policy) && !(lv.name == "plugin" && lv.rule.Policy == PolicyList) {
			return nil, nomadErrorf("Invalid %s policy: %q", lv.name, lv.rule.Policy)
		}
		if lv.dst != nil {
			*lv.dst = lv.rule.Policy
		}
	}
	return p, nil
}

// decodeHCL guards against the HCL decoder's panics on malformed input, as Nomad does.
func decodeHCL(dst *policyHCL, rules string) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = nomadErrorf("invalid acl policy: %v", r)
		}
	}()
	return hcl.Decode(dst, rules)
}

func validateNamespaceRule(ns *namespaceRule) error {
	if !validNamespace.MatchString(ns.Name) {
		return nomadErrorf("Invalid namespace name: %q", ns.Name)
	}
	if ns.Policy != "" && !isPolicyValid(ns.Policy) {
		return nomadErrorf("Invalid namespace policy: %q", ns.Policy)
	}
	for _, c := range ns.Capabilities {
		if !isNamespaceCapability(c) {
			return nomadErrorf("Invalid namespace capability '%s'", c)
		}
	}
	if ns.Policy != "" {
		ns.Capabilities = append(ns.Capabilities, expandNamespacePolicy(ns.Policy)...)
	}
	ns.Capabilities = append(ns.Capabilities, impliedHostVolumeCapabilities(ns.Capabilities)...)
	if ns.Variables == nil {
		return nil
	}
	if len(ns.Variables.Paths) == 0 {
		return nomadErrorf("Invalid variable policy: no variable paths in namespace %s", ns.Name)
	}
	for _, pr := range ns.Variables.Paths {
		if pr.PathSpec == "" {
			return nomadErrorf("Invalid missing variable path in namespace %s", ns.Name)
		}
		if strings.HasPrefix(pr.PathSpec, "/") {
			return nomadErrorf("Invalid variable path %q in namespace %s: cannot start with a leading '/'`", pr.PathSpec, ns.Name)
		}
		for _, c := range pr.Capabilities {
			switch c {
			case VariablesList, VariablesRead, VariablesWrite, VariablesDestroy, VariablesDeny:
			default:
				return nomadErrorf("Invalid variable capability '%s' in namespace %s", c, ns.Name)
			}
		}
		pr.Capabilities = expandVariablesCapabilities(pr.Capabilities)
	}
	return nil
}

func isPolicyValid(p string) bool {
	switch p {
	case PolicyDeny, PolicyRead, PolicyWrite, PolicyScale:
		return true
	}
	return false
}

// isNamespaceCapability reports whether Nomad knows a namespace capability; a policy naming
// another one is invalid.
func isNamespaceCapability(c string) bool {
	switch c {
	case "deny", "list-jobs", "parse-job", "read-job", "submit-job", "dispatch-job", "read-logs",
		"read-fs", "alloc-exec", "alloc-node-exec", "alloc-lifecycle", "sentinel-override",
		"csi-register-plugin", "csi-write-volume", "csi-read-volume", "csi-list-volume",
		"csi-mount-volume", "host-volume-create", "host-volume-register", "host-volume-read",
		"host-volume-write", "host-volume-delete", "list-scaling-policies", "read-scaling-policy",
		"read-job-scaling", "scale-job", "submit-recommendation", "register-job", "revert-job",
		"deregister-job", "purge-job", "evaluate-job", "plan-job", "tag-job-version", "stable-job",
		"fail-deployment", "pause-deployment", "promote-deployment", "unblock-deployment",
		"cancel-deployment", "set-alloc-health-deployment", "gc-allocation", "pause-allocation",
		"force-periodic-job", "delete-service-registration":
		return true
	}
	return false
}

// expandNamespacePolicy lists the capabilities a namespace policy shortcut grants.
func expandNamespacePolicy(policy string) []string {
	read := []string{
		"list-jobs", "parse-job", "read-job", "csi-list-volume", "csi-read-volume",
		"read-job-scaling", "list-scaling-policies", "read-scaling-policy", "host-volume-read",
	}
	switch policy {
	case PolicyDeny:
		return []string{"deny"}
	case PolicyRead:
		return read
	case PolicyWrite:
		return append(append([]string(nil), read...),
			"scale-job", "submit-job", "dispatch-job", "read-logs", "read-fs", "alloc-exec",
			"alloc-lifecycle", "csi-mount-volume", "csi-write-volume", "submit-recommendation",
			"host-volume-create")
	case PolicyScale:
		return []string{
			"list-scaling-policies", "read-scaling-policy", "read-job-scaling", "scale-job",
			"read-job", "submit-recommendation",
		}
	}
	return nil
}

// impliedHostVolumeCapabilities adds what Nomad derives from the host volume capabilities.
func impliedHostVolumeCapabilities(caps []string) []string {
	var extra []string
	for _, c := range caps {
		switch c {
		case "host-volume-write":
			extra = append(extra, "host-volume-register", "host-volume-create", "host-volume-delete", "host-volume-read")
		case "host-volume-register":
			extra = append(extra, "host-volume-create", "host-volume-read")
		case "host-volume-create":
			extra = append(extra, "host-volume-read")
		}
	}
	return extra
}

// expandVariablesCapabilities applies Nomad's rules: deny wins alone, read implies list.
func expandVariablesCapabilities(caps []string) []string {
	var read, list bool
	for _, c := range caps {
		switch c {
		case VariablesDeny:
			return []string{VariablesDeny}
		case VariablesRead:
			read = true
		case VariablesList:
			list = true
		}
	}
	if read && !list {
		caps = append(caps, VariablesList)
	}
	return caps
}

// nomadError is an error whose text is Nomad's own wording, capitals included.
type nomadError struct{ text string }

func (e *nomadError) Error() string { return e.text }

func nomadErrorf(format string, args ...any) error {
	return &nomadError{fmt.Sprintf(format, args...)}
}
