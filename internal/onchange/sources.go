package onchange

import (
	"fmt"
	"regexp"
	"strings"
)

// SourceKind says what a source is and so how it is watched.
type SourceKind string

const (
	// NomadVariable is one Nomad variable at Path (nomadVar, nomadVarExists).
	NomadVariable SourceKind = "nomad-variable"
	// NomadPrefix is the Nomad variables listed under Path, "" for all of the namespace
	// (nomadVarList, nomadVarListSafe).
	NomadPrefix SourceKind = "nomad-prefix"
	// ConsulKey is one Consul KV key (key, keyOrDefault, keyExists).
	ConsulKey SourceKind = "consul-key"
	// ConsulPrefix is the Consul KV keys under Path (ls, safeLs, tree, safeTree).
	ConsulPrefix SourceKind = "consul-prefix"
)

// Nomad reports whether the source lives in Nomad Variables (else in Consul KV).
func (k SourceKind) Nomad() bool { return k == NomadVariable || k == NomadPrefix }

// Source is one thing whose change rolls a group: a Nomad variable or a Consul key, or a
// prefix of either, resolved as the task's template reads it.
type Source struct {
	Kind SourceKind
	Path string
	// Namespace is the Nomad namespace of a variable (the job's unless the template names
	// another; "*" for a listing of every namespace), or the Consul namespace of a key
	// (Consul Enterprise; empty: the namespace the Nomad client's Consul configuration
	// gives).
	Namespace string `json:",omitempty"`
	// Region is a variable's Nomad region: the job's unless the template names another.
	Region string `json:",omitempty"`
	// Partition is a key's Consul admin partition (Consul Enterprise); empty: the default.
	Partition string `json:",omitempty"`
	// Datacenter is a key's Consul datacenter; empty: the datacenter of the Consul agent
	// each client reads, which the agent takes to be its own Consul's.
	Datacenter string `json:",omitempty"`
}

// Ref names the source as nomad-restart.on-change lists it: "nomad:<path>" or
// "consul:<key>[@<datacenter>]", a prefix ending in "/".
func (s Source) Ref() string {
	path := s.Path
	if (s.Kind == NomadPrefix || s.Kind == ConsulPrefix) && !strings.HasSuffix(path, "/") && path != "" {
		path += "/"
	}
	if s.Kind.Nomad() {
		return "nomad:" + path
	}
	if s.Datacenter != "" {
		return "consul:" + path + "@" + s.Datacenter
	}
	return "consul:" + path
}

// String names the source for a reader: what it is, where, and in which namespace,
// region, partition or datacenter where they are set.
func (s Source) String() string {
	var b strings.Builder
	switch s.Kind {
	case NomadVariable:
		fmt.Fprintf(&b, "Nomad variable %q", s.Path)
	case NomadPrefix:
		fmt.Fprintf(&b, "Nomad variables under %q", s.Path)
	case ConsulKey:
		fmt.Fprintf(&b, "Consul key %q", s.Path)
	default:
		fmt.Fprintf(&b, "Consul keys under %q", s.Path)
	}
	var where []string
	if s.Namespace != "" {
		where = append(where, "namespace "+s.Namespace)
	}
	if s.Region != "" {
		where = append(where, "region "+s.Region)
	}
	if s.Partition != "" {
		where = append(where, "partition "+s.Partition)
	}
	if s.Datacenter != "" {
		where = append(where, "datacenter "+s.Datacenter)
	}
	if len(where) > 0 {
		b.WriteString(" (" + strings.Join(where, ", ") + ")")
	}
	return b.String()
}

// The argument syntax of consul-template's functions (dependency/dependency.go and the
// dependency files of each function), so that a source is read exactly as Nomad's
// template runner reads it, and an argument it would refuse is never watched.
var (
	// key, keyOrDefault, keyExists: "<key>?<query>@<dc>".
	consulKeyRe = regexp.MustCompile(`\A/?(?P<path>[^@\?]+)(\?(?P<query>[[:word:]\-\_\=\&]+))?(@(?P<dc>[[:word:]\.\-\_]+))?\z`)
	// ls, safeLs, tree, safeTree: "<prefix>?<query>@<dc>".
	consulPrefixRe = consulKeyRe
	// nomadVar, nomadVarExists: "<path>@<namespace>.<region>".
	nomadVarRe = regexp.MustCompile(`\A/?(?P<path>[^@]+)(@(?P<namespace>[[:word:]\-\_]+))?(\.(?P<region>[[:word:]\-\_]+))?\z`)
	// nomadVarList, nomadVarListSafe: "<prefix>@<namespace or *>.<region>".
	nomadListRe = regexp.MustCompile(`\A/?(?P<path>[^@]*)(@(?P<namespace>([[:word:]\-\_]+|\*)))?(\.(?P<region>[[:word:]\-\_]+))?\z`)
)

// consulQueryKey reports whether consul-template accepts a query parameter
// (GetConsulQueryOpts); a KV read uses ns and partition only.
func consulQueryKey(k string) bool {
	switch k {
	case "ns", "peer", "partition", "sameness-group":
		return true
	}
	return false
}

// defaults are what a source takes from where the template runs when its argument does not
// say: the job's namespace and region for a variable, the task's Consul namespace and
// partition for a key.
type defaults struct {
	nomadNamespace, nomadRegion      string
	consulNamespace, consulPartition string
}

// parseNomadArg reads a nomadVar or nomadVarList argument. Like consul-template, a
// variable's path is trimmed of surrounding space and slashes; a listing's prefix is not.
func parseNomadArg(kind SourceKind, arg string, d defaults) (Source, error) {
	re, fn := nomadVarRe, "nomad.var.get"
	if kind == NomadPrefix {
		re, fn = nomadListRe, "nomad.var.list"
	} else {
		arg = strings.Trim(strings.TrimSpace(arg), "/")
	}
	m, ok := match(re, arg)
	if !ok {
		return Source{}, fmt.Errorf("%s: invalid format: %q", fn, arg)
	}
	s := Source{Kind: kind, Path: m["path"], Namespace: m["namespace"], Region: m["region"]}
	if kind == NomadPrefix && strings.Trim(s.Path, "/") == "" {
		s.Path = ""
	}
	if s.Namespace == "" {
		s.Namespace = d.nomadNamespace
	}
	if s.Region == "" {
		s.Region = d.nomadRegion
	}
	return s, nil
}

// parseConsulArg reads a key or ls argument, query and datacenter included.
func parseConsulArg(kind SourceKind, arg string, d defaults) (Source, error) {
	re, fn := consulKeyRe, "kv.get"
	if kind == ConsulPrefix {
		re, fn = consulPrefixRe, "kv.list"
	}
	m, ok := match(re, arg)
	if !ok {
		return Source{}, fmt.Errorf("%s: invalid format: %q", fn, arg)
	}
	query, err := parseQuery(fn, m["query"])
	if err != nil {
		return Source{}, err
	}
	s := Source{Kind: kind, Path: m["path"], Datacenter: m["dc"], Namespace: query["ns"], Partition: query["partition"]}
	if s.Namespace == "" {
		s.Namespace = d.consulNamespace
	}
	if s.Partition == "" {
		s.Partition = d.consulPartition
	}
	return s, nil
}

// parseQuery reads the "?ns=…&partition=…" of a key as consul-template's
// GetConsulQueryOpts does: the regular expression above admits no escapes, so a split is
// exact; the first value of a key wins, as url.Values.Get gives it.
func parseQuery(fn, raw string) (map[string]string, error) {
	q := map[string]string{}
	if raw == "" {
		return q, nil
	}
	for _, part := range strings.Split(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		if !consulQueryKey(k) {
			return nil, fmt.Errorf("%s: invalid query parameter key %q in query %q: supported keys: ns,peer,partition,sameness-group", fn, k, raw)
		}
		if _, seen := q[k]; !seen {
			q[k] = v
		}
	}
	return q, nil
}

// match returns re's named groups in s.
func match(re *regexp.Regexp, s string) (map[string]string, bool) {
	sub := re.FindStringSubmatch(s)
	if sub == nil {
		return nil, false
	}
	m := make(map[string]string, len(sub))
	for i, name := range re.SubexpNames() {
		if name != "" {
			m[name] = sub[i]
		}
	}
	return m, true
}

// parseExplicit reads one entry of an explicit nomad-restart.on-change list:
// "nomad:<path>" (with nomadVar's "@namespace.region") or "consul:<key>" (with key's
// "?ns=…&partition=…" and "@dc"). A path ending in "/" names a prefix: every variable
// or key under it.
func parseExplicit(entry string, d defaults) (Source, error) {
	if e := strings.TrimSpace(entry); e == "auto" || e == "off" {
		return Source{}, fmt.Errorf("%q does not mix with sources: give %q alone, or only sources", e, e)
	}
	scheme, rest, ok := strings.Cut(strings.TrimSpace(entry), ":")
	if !ok || strings.TrimSpace(rest) == "" {
		return Source{}, fmt.Errorf("%q names no source: give nomad:<variable path> or consul:<key>", entry)
	}
	rest = strings.TrimSpace(rest)
	prefix := strings.HasSuffix(pathPart(rest), "/")
	switch strings.TrimSpace(scheme) {
	case "nomad":
		if prefix {
			return parseNomadArg(NomadPrefix, rest, d)
		}
		return parseNomadArg(NomadVariable, rest, d)
	case "consul":
		if prefix {
			return parseConsulArg(ConsulPrefix, rest, d)
		}
		return parseConsulArg(ConsulKey, rest, d)
	}
	return Source{}, fmt.Errorf("%q: unknown kind %q: give nomad:<variable path> or consul:<key>", entry, scheme)
}

// pathPart is an explicit source without its query and @suffix.
func pathPart(s string) string {
	if i := strings.IndexAny(s, "?@"); i >= 0 {
		return s[:i]
	}
	return s
}
