package openapigen

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// modulePath is agentbox's module; a type's package path under it names
// the directory of its source.
const modulePath = "github.com/agentbox/agentbox"

// typeDoc is what the source says of one type: its doc comment and each
// field's.
type typeDoc struct {
	doc    string
	fields map[string]string
}

// docIndex holds the doc comments of the packages the document's types
// come from, read from their source: descriptions in the document are the
// comments the Go code carries, so that they cannot drift either.
type docIndex struct {
	root string
	pkgs map[string]map[string]typeDoc // package path -> type name -> docs
}

func newDocIndex() (*docIndex, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return nil, fmt.Errorf("finding the source of package openapigen")
	}
	// file is ROOT/internal/api/openapigen/docs.go.
	root := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(file))))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return nil, fmt.Errorf("the generator reads doc comments from the source tree, not found at %s: %w", root, err)
	}
	return &docIndex{root: root, pkgs: map[string]map[string]typeDoc{}}, nil
}

// lookup returns the docs of type name in package pkg ("" when it has
// none, or is not agentbox's).
func (d *docIndex) lookup(pkg, name string) (typeDoc, error) {
	types, ok := d.pkgs[pkg]
	if !ok {
		rel, found := strings.CutPrefix(pkg, modulePath+"/")
		if !found {
			return typeDoc{}, nil
		}
		var err error
		if types, err = parsePackage(filepath.Join(d.root, filepath.FromSlash(rel))); err != nil {
			return typeDoc{}, err
		}
		d.pkgs[pkg] = types
	}
	return types[name], nil
}

// parsePackage reads the doc comments of every type declared in the Go
// files (not tests) of dir.
func parsePackage(dir string) (map[string]typeDoc, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]typeDoc{}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(gd.Specs) == 1 {
					doc = gd.Doc
				}
				td := typeDoc{doc: clean(doc), fields: map[string]string{}}
				if st, ok := ts.Type.(*ast.StructType); ok {
					for _, fl := range st.Fields.List {
						text := clean(fl.Doc)
						if text == "" {
							text = clean(fl.Comment)
						}
						for _, n := range fl.Names {
							td.fields[n.Name] = text
						}
					}
				}
				out[ts.Name.Name] = td
			}
		}
	}
	return out, nil
}

// clean turns a comment into a description: paragraphs kept, lines joined.
func clean(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}
	var paras []string
	for _, p := range strings.Split(strings.TrimSpace(cg.Text()), "\n\n") {
		if p = strings.Join(strings.Fields(p), " "); p != "" {
			paras = append(paras, p)
		}
	}
	return strings.Join(paras, "\n\n")
}
