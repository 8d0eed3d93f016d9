package onchange

import (
	"fmt"
	"slices"
	"strings"
	"text/template/parse"
)

// Read is one template's read of a source.
type Read struct {
	Task string
	// Template is the template's index among the task's templates; Destination its
	// destination, which names it for a reader.
	Template    int
	Destination string `json:",omitempty"`
	// Function is the consul-template function that reads the source: nomadVar, key, ls…
	Function string
	// ChangeMode is the template's change_mode (Nomad's default, restart, where unset).
	ChangeMode string
}

// NotWatched is something a template reads, or a whole template, that the agent does not
// watch, with the reason: a change of it never starts a rollout.
type NotWatched struct {
	Task        string
	Template    int
	Destination string `json:",omitempty"`
	// What is the call as written ({{ secret "kv/app" }}), or what the template is.
	What   string
	Reason string
}

func (n NotWatched) String() string {
	return fmt.Sprintf("task %q template %s: %s: %s", n.Task, templateName(n.Template, n.Destination), n.What, n.Reason)
}

// templateName names a template by its destination, else its index.
func templateName(index int, dest string) string {
	if dest != "" {
		return fmt.Sprintf("%q", dest)
	}
	return fmt.Sprintf("#%d", index)
}

// found is a source a template reads and the read.
type found struct {
	source Source
	read   Read
}

// funcKind classifies consul-template's functions (template/template.go, funcMap) by what
// they read.
type funcKind int

const (
	funcOther   funcKind = iota // no data that changes by itself: text, env, math…
	funcSource                  // a Nomad variable or Consul KV read, watchable
	funcVault                   // a Vault secret
	funcCatalog                 // a Consul or Nomad catalog lookup: services, nodes, CA…
	funcFile                    // a file or a program on the client
)

// sourceFunc is how a watchable function takes its argument.
type sourceFunc struct {
	kind SourceKind
	// minArgs and maxArgs bound the function's arguments; the path is the first.
	minArgs, maxArgs int
	// emptyReadsNothing: consul-template returns at once for an empty path.
	emptyReadsNothing bool
}

// sourceFuncs are the functions whose sources the agent watches, with their arguments as
// consul-template takes them (template/funcs.go, template/nomad_funcs.go).
func sourceFuncs() map[string]sourceFunc {
	return map[string]sourceFunc{
		"nomadVar":         {kind: NomadVariable, minArgs: 1, maxArgs: 1, emptyReadsNothing: true},
		"nomadVarExists":   {kind: NomadVariable, minArgs: 1, maxArgs: 1, emptyReadsNothing: true},
		"nomadVarList":     {kind: NomadPrefix, minArgs: 0, maxArgs: 1},
		"nomadVarListSafe": {kind: NomadPrefix, minArgs: 0, maxArgs: 1},
		"key":              {kind: ConsulKey, minArgs: 1, maxArgs: 1, emptyReadsNothing: true},
		"keyExists":        {kind: ConsulKey, minArgs: 1, maxArgs: 1, emptyReadsNothing: true},
		"keyOrDefault":     {kind: ConsulKey, minArgs: 2, maxArgs: 2, emptyReadsNothing: true},
		"ls":               {kind: ConsulPrefix, minArgs: 1, maxArgs: 1, emptyReadsNothing: true},
		"safeLs":           {kind: ConsulPrefix, minArgs: 1, maxArgs: 1, emptyReadsNothing: true},
		"tree":             {kind: ConsulPrefix, minArgs: 1, maxArgs: 1, emptyReadsNothing: true},
		"safeTree":         {kind: ConsulPrefix, minArgs: 1, maxArgs: 1, emptyReadsNothing: true},
	}
}

// classify says what a function reads.
func classify(name string) funcKind {
	if _, ok := sourceFuncs()[name]; ok {
		return funcSource
	}
	switch name {
	case "secret", "secrets", "pkiCert":
		return funcVault
	case "service", "services", "connect", "node", "nodes", "datacenters", "partitions",
		"peerings", "exportedServices", "importedServices", "caRoots", "caLeaf",
		"nomadService", "nomadServices":
		return funcCatalog
	case "file", "plugin":
		return funcFile
	}
	return funcOther
}

// notWatchedReason is why a call of a function of kind k is not watched.
func notWatchedReason(k funcKind) string {
	switch k {
	case funcVault:
		return "a Vault secret: the agent does not watch Vault; name a source in nomad-restart.on-change or restart by hand"
	case funcCatalog:
		return "a catalog lookup (services, nodes, certificates): its changes are not watched"
	default:
		return "reads a file or runs a program on the client, which the agent cannot watch"
	}
}

// scanner walks one template's parse trees for the calls that read data.
type scanner struct {
	task  string
	index int
	tmpl  TemplateSpec
	defs  defaults
	found []found
	not   []NotWatched
	// dynamic says the template reads something that changes by itself but cannot be
	// watched by path (Vault, a catalog lookup, a computed path, a file on the client):
	// its re-renders are followed instead.
	dynamic bool
}

// scanTemplate lists what one template reads: the sources it would watch, and what it
// does not watch and why. The text is parsed with the template's own delimiters, as
// consul-template parses it. Functions are not checked, as they are only known where the
// template renders (Nomad adds its own, sprig's come prefixed, a client may deny some);
// an unknown function fails there, not here.
func scanTemplate(task string, index int, t TemplateSpec, d defaults) scanner {
	s := scanner{task: task, index: index, tmpl: t, defs: d}
	text := t.Embedded
	if text == "" {
		if src := t.SourcePath; src != "" {
			s.unwatchable(fmt.Sprintf("source %q", src), "its text is a file on the client (from an artifact or the task's directory) that the agent cannot read; name its sources in nomad-restart.on-change")
		}
		return s
	}
	tree := parse.New("template")
	tree.Mode = parse.SkipFuncCheck
	trees := map[string]*parse.Tree{}
	if _, err := tree.Parse(text, t.LeftDelim, t.RightDelim, trees); err != nil {
		s.notWatched("the whole template", "it does not parse, so Nomad cannot render it either: "+err.Error())
		return s
	}
	names := make([]string, 0, len(trees))
	for name := range trees {
		names = append(names, name)
	}
	slices.Sort(names) // {{ define }}d templates too, in a stable order
	for _, name := range names {
		s.walk(trees[name].Root)
	}
	return s
}

// walk visits every pipeline of a template's tree.
func (s *scanner) walk(n parse.Node) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			s.walk(c)
		}
	case *parse.ActionNode:
		s.pipe(n.Pipe)
	case *parse.IfNode:
		s.branch(&n.BranchNode)
	case *parse.RangeNode:
		s.branch(&n.BranchNode)
	case *parse.WithNode:
		s.branch(&n.BranchNode)
	case *parse.TemplateNode:
		s.pipe(n.Pipe)
	}
}

func (s *scanner) branch(b *parse.BranchNode) {
	s.pipe(b.Pipe)
	s.walk(b.List)
	if b.ElseList != nil {
		s.walk(b.ElseList)
	}
}

// pipe visits each command of a pipeline; a command after the first receives the one
// before's result as its last argument ({{ "app/config" | key }}).
func (s *scanner) pipe(p *parse.PipeNode) {
	if p == nil {
		return
	}
	for i, cmd := range p.Cmds {
		var piped parse.Node
		what := call(cmd)
		if i > 0 {
			piped = p.Cmds[i-1]
			what = "{{ " + strings.TrimSpace(p.String()) + " }}"
		}
		s.command(cmd, piped, what)
	}
}

// command visits a command's nested pipelines, then the call it makes; what is the call as
// a reader finds it in the template (the whole pipeline when its argument is piped).
func (s *scanner) command(cmd *parse.CommandNode, piped parse.Node, what string) {
	for _, arg := range cmd.Args {
		s.nested(arg)
	}
	if len(cmd.Args) == 0 {
		return
	}
	id, ok := cmd.Args[0].(*parse.IdentifierNode)
	if !ok {
		return
	}
	args := slices.Clone(cmd.Args[1:])
	if piped != nil {
		args = append(args, literalOf(piped))
	}
	switch k := classify(id.Ident); k {
	case funcSource:
		s.sourceCall(id.Ident, args, what)
	case funcOther:
	default:
		s.unwatchable(what, notWatchedReason(k))
	}
}

// nested visits the pipelines inside an argument: ( … ) and ( … ).Field.
func (s *scanner) nested(n parse.Node) {
	switch n := n.(type) {
	case *parse.PipeNode:
		s.pipe(n)
	case *parse.ChainNode:
		s.nested(n.Node)
	}
}

// literalOf is a piped command's value: its string when it is a lone literal.
func literalOf(n parse.Node) parse.Node {
	if c, ok := n.(*parse.CommandNode); ok && len(c.Args) == 1 {
		if str, ok := c.Args[0].(*parse.StringNode); ok {
			return str
		}
	}
	return n
}

// sourceCall records a call of a watchable function, or why it is not watched.
func (s *scanner) sourceCall(name string, args []parse.Node, what string) {
	fn := sourceFuncs()[name]
	if len(args) < fn.minArgs || len(args) > fn.maxArgs {
		s.notWatched(what, fmt.Sprintf("%s takes %s, not %d: Nomad cannot render it", name, argCount(fn), len(args)))
		return
	}
	path := ""
	if len(args) > 0 {
		lit, ok := args[0].(*parse.StringNode)
		if !ok {
			s.unwatchable(what, "its path is not a literal string: the agent watches only paths the job file spells out; name the source in nomad-restart.on-change")
			return
		}
		path = lit.Text
	}
	if path == "" && fn.emptyReadsNothing {
		s.notWatched(what, "an empty path reads nothing")
		return
	}
	var src Source
	var err error
	if fn.kind.Nomad() {
		src, err = parseNomadArg(fn.kind, path, s.defs)
	} else {
		src, err = parseConsulArg(fn.kind, path, s.defs)
	}
	if err != nil {
		s.notWatched(what, "consul-template refuses its argument, so Nomad cannot render it: "+err.Error())
		return
	}
	s.found = append(s.found, found{source: src, read: s.read(name)})
}

func argCount(fn sourceFunc) string {
	switch {
	case fn.minArgs == fn.maxArgs && fn.minArgs == 1:
		return "one argument"
	case fn.minArgs == fn.maxArgs:
		return fmt.Sprintf("%d arguments", fn.minArgs)
	default:
		return fmt.Sprintf("%d to %d arguments", fn.minArgs, fn.maxArgs)
	}
}

// call is a command as written in the template, for a reader.
func call(cmd *parse.CommandNode) string {
	return "{{ " + strings.TrimSpace(cmd.String()) + " }}"
}

func (s *scanner) read(function string) Read {
	return Read{
		Task: s.task, Template: s.index, Destination: s.tmpl.DestPath,
		Function: function, ChangeMode: changeMode(s.tmpl),
	}
}

// unwatchable records a read that changes by itself but cannot be watched by path.
func (s *scanner) unwatchable(what, reason string) {
	s.dynamic = true
	s.notWatched(what, reason)
}

func (s *scanner) notWatched(what, reason string) {
	s.not = append(s.not, NotWatched{
		Task: s.task, Template: s.index, Destination: s.tmpl.DestPath,
		What: what, Reason: reason,
	})
}

// changeMode is the template's change_mode, Nomad's default (restart) where unset
// (api.Template.Canonicalize).
func changeMode(t TemplateSpec) string {
	if m := t.ChangeMode; m != "" {
		return m
	}
	return "restart"
}
