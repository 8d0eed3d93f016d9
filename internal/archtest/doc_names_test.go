package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// declared is what the module's product code defines, for checking the names a doc cites.
type declared struct {
	files   []string                   // every Go file, slash-separated from the module root
	topName map[string]map[string]bool // package's last path element -> its top-level names
	members map[string]map[string]bool // type name (any package) -> its fields and methods
	pkgs    map[string]bool            // every package's last path element
}

// loadDeclarations parses every non-test Go file of the module (moduleGoFiles' walk, as
// loadFiles) and collects its top-level names, and each type's fields and methods.
func loadDeclarations(fsys fs.FS) (declared, error) {
	d := declared{topName: map[string]map[string]bool{}, members: map[string]map[string]bool{}, pkgs: map[string]bool{}}
	fset := token.NewFileSet()
	member := func(typ, name string) {
		if d.members[typ] == nil {
			d.members[typ] = map[string]bool{}
		}
		d.members[typ][name] = true
	}
	files, err := moduleGoFiles(fsys)
	if err != nil {
		return d, err
	}
	d.files = files
	parsed, err := parseProductFiles(fset, fsys, files)
	if err != nil {
		return d, err
	}
	for _, pf := range parsed {
		f := pf.file
		pkg := path.Base(path.Dir(pf.path))
		d.pkgs[pkg] = true
		if d.topName[pkg] == nil {
			d.topName[pkg] = map[string]bool{}
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil {
					d.topName[pkg][decl.Name.Name] = true
					continue
				}
				if typ := receiverType(decl.Recv.List[0].Type); typ != "" {
					member(typ, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						d.topName[pkg][spec.Name.Name] = true
						if st, ok := spec.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									member(spec.Name.Name, n.Name)
								}
								if len(field.Names) == 0 { // an embedded type: its name is the field's
									member(spec.Name.Name, receiverType(field.Type))
								}
							}
						}
						if it, ok := spec.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								for _, n := range m.Names {
									member(spec.Name.Name, n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							d.topName[pkg][n.Name] = true
						}
					}
				}
			}
		}
	}
	return d, nil
}

// receiverType names the type of a receiver or an embedded field: T, *T, T[P], pkg.T.
func receiverType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiverType(e.X)
	case *ast.IndexExpr:
		return receiverType(e.X)
	case *ast.IndexListExpr:
		return receiverType(e.X)
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.Ident:
		return e.Name
	}
	return ""
}

var (
	// codeSpan is a doc's `inline code`.
	codeSpan = regexp.MustCompile("`([^`\n]+)`")
	// qualified is pkg.Name or Type.Member.
	qualified = regexp.MustCompile(`^([A-Za-z]\w*)\.([A-Z]\w*)$`)
	// goFilePath is a Go file's name, with or without its directories.
	goFilePath = regexp.MustCompile(`^[\w./-]*\w\.go$`)
)

// staleNames returns a message for each code span of doc that cites the code and names what
// it does not have: a Go file that no directory holds, a package's name it does not declare
// (`store.Mutate`), a type's member it lacks (`Record.Control`). A file cited as Nomad's
// ("Nomad's `nomad/event_endpoint.go`") is another project's and is not checked.
func staleNames(doc string, d declared) []string {
	var bad []string
	for _, m := range codeSpan.FindAllStringSubmatchIndex(doc, -1) {
		span := doc[m[2]:m[3]]
		before := doc[max(0, m[0]-10):m[0]]
		switch {
		case goFilePath.MatchString(span):
			if span == "_test.go" || strings.HasSuffix(before, "Nomad's ") {
				continue
			}
			if !slices.ContainsFunc(d.files, func(f string) bool { return f == span || strings.HasSuffix(f, "/"+span) }) {
				bad = append(bad, fmt.Sprintf("docs/architecture.md cites `%s`, which no file of the module is: name the file as it is now", span))
			}
		case qualified.MatchString(span):
			parts := qualified.FindStringSubmatch(span)
			owner, name := parts[1], parts[2]
			if d.pkgs[owner] {
				if !d.topName[owner][name] {
					bad = append(bad, fmt.Sprintf("docs/architecture.md cites `%s`, which package %s does not declare: name it as the code does now", span, owner))
				}
				continue
			}
			if members, ok := d.members[owner]; ok {
				if !members[name] {
					bad = append(bad, fmt.Sprintf("docs/architecture.md cites `%s`, but type %s has no field or method %s: name it as the code does now", span, owner, name))
				}
				continue
			}
			bad = append(bad, fmt.Sprintf("docs/architecture.md cites `%s`, but no package or type of the module is named %s: name it as the code does now", span, owner))
		}
	}
	return bad
}

// TestDocNamesExist keeps docs/architecture.md true to the code: every file, package-level
// name and type member it cites in code spans exists.
func TestDocNamesExist(t *testing.T) {
	root, doc := architectureDoc(t)
	d, err := loadDeclarations(os.DirFS(root))
	if err != nil {
		t.Fatalf("reading the module's declarations: %v", err)
	}
	if len(d.pkgs) < 20 {
		t.Fatalf("found only %d packages: is the walk wrong?", len(d.pkgs))
	}
	for _, msg := range staleNames(doc, d) {
		t.Error(msg)
	}
}

func TestStaleNamesFindsWhatTheCodeLacks(t *testing.T) {
	d := declared{
		files:   []string{"internal/store/nomad.go", "internal/restart/converge.go"},
		topName: map[string]map[string]bool{"store": {"Mutate": true}},
		members: map[string]map[string]bool{"Record": {"Control": true}},
		pkgs:    map[string]bool{"store": true},
	}
	doc := "`store.Mutate` `store.Gone` `Record.Control` `Record.Lost` `Nobody.Here` " +
		"`converge.go` `store/nomad.go` `internal/cli/gone.go` Nomad's `nomad/event_endpoint.go` " +
		"`_test.go` `-batch-size` `plain words`"
	want := []string{
		"docs/architecture.md cites `store.Gone`, which package store does not declare: name it as the code does now",
		"docs/architecture.md cites `Record.Lost`, but type Record has no field or method Lost: name it as the code does now",
		"docs/architecture.md cites `Nobody.Here`, but no package or type of the module is named Nobody: name it as the code does now",
		"docs/architecture.md cites `internal/cli/gone.go`, which no file of the module is: name the file as it is now",
	}
	if got := staleNames(doc, d); !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
